// Numbers, shares, counts and times as the dashboard shows them, in the browser's locale: its
// digits, grouping and decimal separators, its date order. Each formatter is built once. A
// missing value (null, undefined, NaN) shows as '—'.

const MISSING = '—';
const missing = (v) => v === null || v === undefined || Number.isNaN(v);

// (undefined: the browser's own locale; 'negative': a value that rounds to zero shows no sign)
const INT = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0, signDisplay: 'negative' });
const COMPACT = new Intl.NumberFormat(undefined, { notation: 'compact' });
// A share to one decimal, to two under 1% (so that 0.25% does not read 0.3%), none at zero.
const PCT_0 = new Intl.NumberFormat(undefined, { style: 'percent', maximumFractionDigits: 0 });
const PCT_1 = new Intl.NumberFormat(undefined,
  { style: 'percent', minimumFractionDigits: 1, maximumFractionDigits: 1 });
const PCT_2 = new Intl.NumberFormat(undefined,
  { style: 'percent', minimumFractionDigits: 2, maximumFractionDigits: 2 });
// An axis tick: only the decimals it needs (0%, 0.25%, 0.5%, 1%).
const AXIS_PCT = new Intl.NumberFormat(undefined, { style: 'percent', maximumFractionDigits: 2 });
// Four significant digits, but never a digit of the integer part lost: 12.35, 123.5, 12,346.
const NUM = new Intl.NumberFormat(undefined, {
  maximumSignificantDigits: 4,
  maximumFractionDigits: 0,
  roundingPriority: 'morePrecision',
  signDisplay: 'negative',
});
const SCI = new Intl.NumberFormat(undefined, { notation: 'scientific', maximumFractionDigits: 2 });

// A 24-hour clock in every locale: the times shown are when buckets start and when the page last
// heard from the service, read against each other and against logs and Prometheus, and on the
// time axis "14:05:30" is narrower than "2:05:30 PM". ('h23' rather than hour12: false, which
// some engines have read as 'h24', midnight as 24:00.) The locale still orders the date.
const CLOCK = new Intl.DateTimeFormat(undefined,
  { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
const CLOCK_HM = new Intl.DateTimeFormat(undefined,
  { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
const DATE = new Intl.DateTimeFormat(undefined,
  { dateStyle: 'medium', timeStyle: 'short', hourCycle: 'h23' });

// The words of the page are in its own language (<html lang>), so a noun agrees with its number
// by that language's rules, whatever the locale of the digits; the number is taken rounded as
// INT shows it.
const PLURAL = new Intl.PluralRules(document.documentElement.lang || 'en', { maximumFractionDigits: 0 });

// A whole number: "1,024" (en-US), "1.024" (de-DE).
export function fmtInt(n) {
  return missing(n) ? MISSING : INT.format(n);
}

// A count where space is short: whole below 10,000, then compact ("12K", "1.2M" in en-US).
export function fmtCount(n) {
  if (missing(n)) return MISSING;
  return Math.abs(n) < 1e4 ? INT.format(n) : COMPACT.format(n);
}

// The noun for n of it: "mistake" for exactly one, "mistakes" otherwise.
export function nounFor(n, noun, nouns = noun + 's') {
  return PLURAL.select(n) === 'one' ? noun : nouns;
}

// "1 mistake", "2 mistakes", "1,024 examples".
export function nCount(n, noun, nouns) {
  return `${fmtInt(n)} ${nounFor(n, noun, nouns)}`;
}

// A rate in [0, 1] as a percentage: "0%", "0.25%", "26.0%".
export function fmtPct(r) {
  if (missing(r)) return MISSING;
  if (r === 0) return PCT_0.format(r);
  return (Math.abs(r) < 0.01 ? PCT_2 : PCT_1).format(r);
}

export function fmtAxisPct(r) {
  return AXIS_PCT.format(r);
}

// A measurement (a norm, a margin): four significant digits, scientific when far from 1.
export function fmtNum(v) {
  if (missing(v)) return MISSING;
  const a = Math.abs(v);
  if (a === 0) return INT.format(0);
  return a >= 1e7 || a < 1e-3 ? SCI.format(v) : NUM.format(v);
}

// Unix seconds as the local time of day, "14:05:30" (or "14:05").
export function fmtClock(unixS, withSeconds = true) {
  return (withSeconds ? CLOCK : CLOCK_HM).format(unixS * 1000);
}

// Unix seconds as a local date and time: "May 1, 2024, 14:05" (en-US), "01.05.2024, 14:05" (de-DE).
export function fmtDate(unixS) {
  return DATE.format(unixS * 1000);
}

// A delay in the unit that reads best: "0.5 sec", "42 sec", "3.5 min", "2.1 hr", "1.3 days" (en-US;
// the words and digits of the browser's locale); one decimal under 10 of its unit, none above.
const DURATION_UNITS = [[86400, 'day'], [3600, 'hour'], [60, 'minute'], [1, 'second']];
const DURATIONS = new Map();
export function fmtDuration(seconds) {
  if (missing(seconds)) return MISSING;
  const [size, unit] = DURATION_UNITS.find(([s]) => Math.abs(seconds) >= s) || [1, 'second'];
  const v = seconds / size;
  const digits = Math.abs(v) < 10 ? 1 : 0;
  const key = unit + digits;
  if (!DURATIONS.has(key)) {
    DURATIONS.set(key, new Intl.NumberFormat(undefined,
      { style: 'unit', unit, unitDisplay: 'short', maximumFractionDigits: digits }));
  }
  return DURATIONS.get(key).format(v);
}
