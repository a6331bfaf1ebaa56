// The perceptron dashboard: reads the JSON API and draws it. The model shown is followed by
// push (Server-Sent Events from GET /models/{name}/events: its metrics, checkpoints,
// challengers and drift detector's events as they change); the list of models is read every 15 s. Should the stream fail, the page reads the
// API every 2 s instead, and tries the stream again 30 s later. Plain JS, an ES module (so
// strict, its names its own), no dependencies.

import {
  fmtAxisPct, fmtClock, fmtCount, fmtDate, fmtDuration, fmtInt, fmtNum, fmtPct, nCount, nounFor,
} from './format.js';

const KEY_STORAGE = 'perceptron-api-key';
const REFRESH_MS = 2000; // reading the API, without a stream
const LIST_MS = 15000; // reading the list of models, while the stream brings the figures
const STREAM_RETRY_MS = 30000; // after a stream failed, polling until this long has passed
const KEY_COOKIE = 'perceptron_key'; // the key, for the stream alone (api/routes/events.py)
const BASE = new URL('.', location.href); // the API sits beside /dashboard
const SVG = 'http://www.w3.org/2000/svg';
const $ = (id) => document.getElementById(id);

// [field, title, help] of every counter, from the service (dashboard/counters.js).
const COUNTERS = window.PERCEPTRON_COUNTERS || [];
// the counters that, above zero, mean something is wrong: named by the service (protocol.py)
const WARN_COUNTERS = new Set(COUNTERS.filter((c) => c[3]).map((c) => c[0]));

const state = {
  key: null,
  models: [],
  names: '',
  model: null,
  metrics: null,
  checkpoints: [],
  challengers: null, // GET .../challengers: the served learner and each challenger
  drift: [], // GET .../drift's events: the drift detector's warnings and drifts
  learners: null, // GET /learners, by name: each learner's title and settings
  gen: 0,
  timer: null,
  lastOk: 0,
  stream: null, // { es, name, live }: the model followed by push
  streamAfter: 0, // no stream before this time (one failed)
};

// ---------------------------------------------------------------- page

function setText(id, text, value) {
  const el = $(id);
  el.textContent = text;
  if (value !== undefined) el.dataset.value = value === null ? '' : String(value);
  return el;
}

// ---------------------------------------------------------------- API key

function storeKey(key) {
  try {
    if (key) localStorage.setItem(KEY_STORAGE, key);
    else localStorage.removeItem(KEY_STORAGE);
  } catch (e) { /* storage may be disabled: the key lives for this page only */ }
}

function initialKey() {
  const url = new URL(location.href);
  // '#key=...' never reaches the server (nor its logs): the way to hand the page a key.
  const fragment = new URLSearchParams(url.hash.slice(1));
  if (fragment.has('key')) {
    const key = fragment.get('key');
    fragment.delete('key');
    const rest = fragment.toString();
    history.replaceState(history.state, '', url.pathname + url.search + (rest ? '#' + rest : ''));
    if (key) {
      storeKey(key);
      return key;
    }
  }
  try {
    return localStorage.getItem(KEY_STORAGE) || null;
  } catch (e) {
    return null;
  }
}

class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

async function api(path) {
  const headers = { Accept: 'application/json' };
  if (state.key) headers.Authorization = 'Bearer ' + state.key;
  const res = await fetch(new URL(path, BASE), { headers, cache: 'no-store' });
  if (!res.ok) {
    let detail = res.statusText || 'HTTP ' + res.status;
    try {
      detail = (await res.json()).detail || detail;
    } catch (e) { /* not JSON */ }
    throw new ApiError(res.status, detail);
  }
  return res.json();
}

function showAuth(err) {
  const form = $('auth');
  const wasHidden = form.hidden;
  form.hidden = false;
  $('model-view').hidden = true;
  $('empty').hidden = true;
  $('error').hidden = true;
  const why = err.status === 403 ? 'The key was refused for this' : 'An API key is needed for this';
  $('auth-message').textContent = state.key
    ? `${why} request (${err.status}: ${err.message}). Enter another key.`
    : `The service asks for an API key (${err.status}: ${err.message}).`;
  setStatus('auth', 'API key needed');
  if (wasHidden) $('auth-key').focus();
}

$('auth-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const key = $('auth-key').value.trim();
  if (!key) return;
  state.key = key;
  storeKey(key);
  $('auth-key').value = '';
  closeStream();
  state.streamAfter = 0;
  refresh();
});

// ---------------------------------------------------------------- status

function setStatus(kind, text) {
  const s = $('status');
  s.dataset.state = kind;
  $('status-text').textContent = text;
}

setInterval(() => {
  if (state.lastOk && $('status').dataset.state === 'live' && !streaming(state.model)) {
    const age = (Date.now() - state.lastOk) / 1000;
    if (age > 3 * REFRESH_MS / 1000) setStatus('stale', `no update for ${fmtInt(age)} s`);
  }
}, 1000);

// ---------------------------------------------------------------- model choice

function hashModel() {
  return new URLSearchParams(location.hash.slice(1)).get('model');
}

function setHash(name, replace) {
  const hash = '#model=' + encodeURIComponent(name);
  if (location.hash === hash) return;
  if (replace) history.replaceState(history.state, '', location.pathname + location.search + hash);
  else location.hash = hash;
}

function chooseModel(models) {
  const names = models.map((m) => m.name);
  const wanted = hashModel();
  if (wanted && names.includes(wanted)) return wanted;
  if (state.model && names.includes(state.model)) return state.model;
  // Nothing asked for: the busiest model.
  let best = models[0];
  for (const m of models) if (m.counters.seen > best.counters.seen) best = m;
  return best.name;
}

function renderPicker(models) {
  const select = $('model-select');
  const names = models.map((m) => m.name).join('\n');
  if (names !== state.names) {
    state.names = names;
    select.replaceChildren(...models.map((m) => new Option(m.name, m.name)));
  }
  if (state.model) select.value = state.model;
  $('picker').hidden = models.length === 0;
}

$('model-select').addEventListener('change', (ev) => setHash(ev.target.value, false));
window.addEventListener('hashchange', () => {
  const wanted = hashModel();
  if (wanted && wanted !== state.model) {
    state.model = wanted;
    state.metrics = null;
    refresh();
  }
});

function configLine(info) {
  const c = info.config;
  const kind = c.classes.length === 2 ? 'binary' : `${c.classes.length} classes (${c.multiclass})`;
  const parts = [kind, c.n_features ? nCount(c.n_features, 'feature') : `hashed 2^${c.hash_bits}`];
  if (c.learning_rate !== 1) parts.push(`lr ${fmtNum(c.learning_rate)}`);
  if (c.margin) parts.push(`margin ${fmtNum(c.margin)}`);
  if (c.averaged) parts.push('averaged');
  if (c.default_label !== null && c.default_label !== undefined) {
    parts.push(`default label ${c.default_label} after ${fmtDuration(c.feedback_ttl_s)}`);
  }
  parts.push(`created ${fmtDate(info.created)}`);
  return parts.join(' · ');
}

// ---------------------------------------------------------------- refresh loop

async function refresh() {
  clearTimeout(state.timer);
  const gen = ++state.gen;
  let again = true;
  try {
    const list = await api('models');
    if (!state.learners) {
      const known = await api('learners');
      state.learners = Object.fromEntries(known.learners.map((l) => [l.name, l]));
    }
    if (gen !== state.gen) return;
    const models = list.models.slice().sort((a, b) => a.name.localeCompare(b.name));
    state.models = models;
    $('auth').hidden = true;
    $('error').hidden = true;
    if (!models.length) {
      state.model = null;
      state.metrics = null;
      renderPicker(models);
      $('model-view').hidden = true;
      $('empty').hidden = false;
      $('model-config').textContent = '';
      ok();
      return;
    }
    $('empty').hidden = true;
    const name = chooseModel(models);
    if (name !== state.model) state.metrics = null;
    state.model = name;
    setHash(name, true);
    renderPicker(models);
    const info = models.find((m) => m.name === name);
    $('model-config').textContent = configLine(info);
    if (streaming(name)) return; // the stream brings the figures
    const path = 'models/' + encodeURIComponent(name);
    // (the checkpoints are drawn where the key may read them; the metrics decide the rest)
    const [metrics, history, challengers, drift] = await Promise.all([
      api(path + '/metrics'),
      api(path + '/checkpoints').catch(() => null),
      api(path + '/challengers').catch(() => null),
      api(path + '/drift').catch(() => null),
    ]);
    if (gen !== state.gen) return;
    state.metrics = metrics;
    state.checkpoints = history ? history.checkpoints : [];
    state.challengers = challengers;
    state.drift = drift ? servedEvents(drift) : [];
    render(metrics);
    ok();
    if (!state.stream || state.stream.name !== name) openStream(name);
  } catch (err) {
    if (gen !== state.gen) return;
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
      showAuth(err);
      again = false; // wait for a key
    } else if (err instanceof ApiError && err.status === 404) {
      state.model = null; // deleted meanwhile: pick another at once
      state.timer = setTimeout(refresh, 50);
      again = false;
    } else {
      setStatus('error', 'service unreachable, retrying');
      if (!state.lastOk) {
        $('error').hidden = false;
        $('error-text').textContent = String(err.message || err);
      }
    }
  } finally {
    if (gen === state.gen && again) {
      state.timer = setTimeout(refresh, streaming(state.model) ? LIST_MS : REFRESH_MS);
    }
  }
}

function ok(pushed) {
  state.lastOk = Date.now();
  const how = pushed ? 'live · pushed ' : 'live · updated ';
  setStatus('live', how + fmtClock(Date.now() / 1000));
  $('status').dataset.push = String(streaming(state.model));
}

// ---------------------------------------------------------------- push

function streaming(name) {
  return Boolean(state.stream && state.stream.live && state.stream.name === name);
}

// An EventSource sends no Authorization header: the key goes in a cookie sent to the stream's
// path alone, never in its URL (so never in a log).
function keyCookie(path) {
  const secure = location.protocol === 'https:' ? '; Secure' : '';
  const value = state.key ? encodeURIComponent(state.key) : '';
  const age = state.key ? '' : '; Max-Age=0';
  document.cookie = `${KEY_COOKIE}=${value}; Path=${path}; SameSite=Strict${secure}${age}`;
}

function closeStream() {
  if (state.stream) state.stream.es.close();
  state.stream = null;
}

// Poll again, and try the stream later: it was refused (a key, too many streams) or broke.
function streamFailed() {
  closeStream();
  state.streamAfter = Date.now() + STREAM_RETRY_MS;
  clearTimeout(state.timer);
  state.timer = setTimeout(refresh, 50);
}

function openStream(name) {
  closeStream();
  if (!window.EventSource || Date.now() < state.streamAfter) return;
  const url = new URL('models/' + encodeURIComponent(name) + '/events', BASE);
  keyCookie(url.pathname);
  const es = new EventSource(url);
  const stream = { es, name, live: false, lost: null };
  state.stream = stream;
  state.drift = []; // (the stream sends them at once, for a model with a detector)
  const mine = () => state.stream === stream;
  es.addEventListener('metrics', (ev) => {
    if (!mine()) return;
    stream.live = true;
    clearTimeout(stream.lost);
    stream.lost = null;
    state.metrics = JSON.parse(ev.data);
    render(state.metrics);
    ok(true);
  });
  es.addEventListener('checkpoints', (ev) => {
    if (!mine()) return;
    state.checkpoints = JSON.parse(ev.data).checkpoints;
    if (state.metrics) render(state.metrics);
  });
  es.addEventListener('challengers', (ev) => {
    if (!mine()) return;
    state.challengers = JSON.parse(ev.data);
    renderChallengers();
  });
  es.addEventListener('drift', (ev) => {
    if (!mine()) return;
    state.drift = servedEvents(JSON.parse(ev.data));
    if (state.metrics) renderCharts(state.metrics);
  });
  es.addEventListener('gone', () => {
    if (!mine()) return;
    closeStream();
    state.model = null; // deleted: pick another at once
    clearTimeout(state.timer);
    state.timer = setTimeout(refresh, 50);
  });
  es.onerror = () => {
    if (!mine()) return;
    // Closed: refused (not an event stream). Else it connects again by itself; should that
    // take more than a few seconds, the page polls meanwhile.
    if (es.readyState === EventSource.CLOSED) {
      streamFailed();
    } else if (stream.lost === null) {
      stream.lost = setTimeout(() => mine() && !stream.live && streamFailed(), 3 * REFRESH_MS);
    }
    stream.live = false;
  };
}

// ---------------------------------------------------------------- headline

// The trend: the mistake rate of the first examples on the learning curve (about a third of
// them, at most 100) against the last 100.
function trendOf(m) {
  const seen = m.counters.seen;
  const recent = m.mistake_rate.last_100;
  if (!seen) return { trend: 'none' };
  // Examples counted whose outcomes are not known here (an import, a promotion): no trend.
  if (recent === null || m.mistake_rate.last_100_examples < Math.min(100, seen)) {
    return { trend: 'unknown', to: recent };
  }
  if (seen < 20) return { trend: 'early', to: recent };
  const target = Math.min(100, Math.floor(seen / 3));
  const first = m.curve.points.find((p) => p.examples >= target);
  if (!first || first.examples >= seen) return { trend: 'early', to: recent };
  const from = first.rate;
  const to = recent;
  let trend;
  if (to <= from * 0.8 && from - to >= 0.01) trend = 'falling';
  else if (to >= from * 1.25 && to - from >= 0.01) trend = 'rising';
  else trend = to <= 0.02 ? 'low' : 'flat';
  return { trend, from, to, firstN: first.examples };
}

function renderHeadline(m) {
  const t = trendOf(m);
  const box = $('headline');
  box.dataset.trend = t.trend;
  box.dataset.from = t.from === undefined ? '' : String(t.from);
  box.dataset.to = t.to === undefined ? '' : String(t.to);
  const arrow = {
    falling: '↓', rising: '↑', flat: '→', low: '✓', early: '…', none: '○', unknown: '…',
  }[t.trend];
  $('headline-arrow').textContent = arrow;
  const seen = m.counters.seen;
  let title;
  let sub;
  if (t.trend === 'none') {
    title = 'No feedback yet';
    sub = 'Waiting for labelled examples: POST /learn, or /predict then /feedback. ' +
      `${nCount(m.counters.predictions, 'prediction')} served so far.`;
  } else if (t.trend === 'unknown') {
    const n = m.mistake_rate.last_100_examples;
    title = `Mistake rate ${fmtPct(m.mistake_rate.cumulative)} in all`;
    sub = `The outcomes of the last examples before an import or a rollback are not kept; ` +
      (n ? `last ${fmtInt(n)} since: ${fmtPct(t.to)}.` : 'the next labels count again.');
  } else if (t.trend === 'early') {
    title = `Warming up: mistake rate ${fmtPct(t.to)}`;
    sub = `Only ${nCount(seen, 'labelled example')} so far; a trend needs a few more.`;
  } else {
    const fromTo = `from ${fmtPct(t.from)} to ${fmtPct(t.to)}`;
    title = {
      falling: `Learning: mistake rate falling ${fromTo}`,
      rising: `Getting worse: mistake rate rising ${fromTo}`,
      flat: `Not improving: mistake rate flat at ${fmtPct(t.to)}`,
      low: `Learned: mistake rate steady at ${fmtPct(t.to)}`,
    }[t.trend];
    sub = `First ${fmtInt(t.firstN)} examples: ${fmtPct(t.from)} · ` +
      `last ${fmtInt(m.mistake_rate.last_100_examples)}: ${fmtPct(t.to)} · ` +
      `${nCount(seen, 'labelled example')}, ${nCount(m.counters.mistakes, 'mistake')} in all`;
  }
  $('headline-text').textContent = title;
  $('headline-sub').textContent = sub;
  return t;
}

// ---------------------------------------------------------------- numbers

function renderRates(m, t) {
  const seen = m.counters.seen;
  const r = m.mistake_rate;
  const windows = [
    ['rate-last-100', r.last_100, r.last_100_examples],
    ['rate-last-1000', r.last_1000, r.last_1000_examples],
  ];
  for (const [id, rate, n] of windows) {
    const el = setText(id, fmtPct(rate), rate);
    $(id + '-sub').textContent = rate !== null
      ? `${fmtInt(Math.round(rate * n))} of the last ${fmtInt(n)} wrong`
      : seen ? 'none known since the import or promotion' : 'no labelled examples yet';
    el.dataset.tone = '';
  }
  const tone = { falling: 'good', low: 'good', rising: 'bad', flat: 'warn' }[t.trend] || '';
  $('rate-last-100').dataset.tone = tone;
  if (r.last_100 !== null && r.cumulative !== null && r.last_100_examples === 100 && seen > 100) {
    const d = r.last_100 - r.cumulative;
    const word = Math.abs(d) < 0.0005 ? '= ' : d < 0 ? '↓ vs ' : '↑ vs ';
    $('rate-last-100-sub').textContent += ` · ${word}${fmtPct(r.cumulative)} all time`;
  }
  setText('rate-cumulative', fmtPct(r.cumulative), r.cumulative);
  $('rate-cumulative-sub').textContent = r.cumulative === null ? 'no labelled examples yet'
    : `${fmtInt(m.counters.mistakes)} of ${nCount(seen, 'example')}`;
  setText('version', fmtInt(m.version), m.version);
  const info = state.models.find((x) => x.name === m.model);
  $('version-sub').textContent = info ? `model “${m.model}”, created ${fmtDate(info.created)}` : '';
}

function renderCounters(m) {
  const dl = $('counters');
  if (!dl.children.length) {
    for (const [key, label, help] of COUNTERS) {
      const div = document.createElement('div');
      div.title = help;
      const dt = document.createElement('dt');
      dt.textContent = label;
      const dd = document.createElement('dd');
      dd.id = 'counter-' + key;
      div.append(dt, dd);
      dl.append(div);
    }
  }
  for (const [key] of COUNTERS) {
    const v = m.counters[key];
    const dd = setText('counter-' + key, fmtInt(v), v);
    dd.dataset.tone = WARN_COUNTERS.has(key) && v > 0 ? 'warn' : '';
  }
}

function renderWeights(m) {
  setText('weight-norm', fmtNum(m.weight_norm), m.weight_norm);
  setText('max-feature-norm', fmtNum(m.max_feature_norm), m.max_feature_norm);
  const b = m.mistake_bound;
  const box = $('bound');
  box.dataset.applies = String(b.applies);
  box.dataset.separable = String(b.separable);
  const value = $('bound-value');
  value.dataset.value = b.bound === null || b.bound === undefined ? '' : String(b.bound);
  let text;
  if (!b.applies) {
    value.textContent = 'does not apply';
    text = `Not computed for this model: ${b.reason || 'not applicable'}.`;
  } else if (b.gamma === null || b.gamma === undefined) {
    value.textContent = 'no margin yet';
    text = b.window ? 'The weights are still zero, so no margin can be measured yet.'
      : 'No recent labelled examples to measure a margin on yet.';
  } else if (!b.separable) {
    value.textContent = 'no finite bound';
    text = `The current weights do not separate the last ${nCount(b.window, 'example')} ` +
      `(γ = ${fmtNum(b.gamma)} ≤ 0): the data may not be linearly separable, or not yet.`;
  } else {
    value.textContent = `≈ ${fmtCount(b.bound)} ${nounFor(b.bound, 'mistake')}`;
    const share = b.mistakes / b.bound;
    text = `A perceptron on data separable with margin γ makes at most R²/γ² mistakes. ` +
      `γ is measured with the current weights on recent examples only, so this is an ` +
      `estimate. Mistakes so far: ${fmtInt(b.mistakes)}` +
      (share <= 1 ? ` (${fmtPct(share)} of it).` : ', past the estimate.');
  }
  $('bound-text').textContent = text;
  const meter = box.querySelector('.meter') || box.insertBefore(document.createElement('div'), $('bound-text'));
  meter.className = 'meter';
  meter.hidden = !(b.applies && b.separable);
  if (!meter.hidden) {
    meter.style.setProperty('--fill', Math.min(1, b.mistakes / b.bound).toFixed(4));
  }
  $('bound-facts').hidden = !b.applies;
  setText('bound-gamma', fmtNum(b.gamma), b.gamma);
  setText('bound-window', fmtInt(b.window), b.window);
  setText('bound-mistakes', fmtInt(b.mistakes), b.mistakes);
}

// ---------------------------------------------------------------- confusion matrix

const MAX_MATRIX = 20;

// A class name in the matrix's margin: cut short with an ellipsis when compact, whole on hover.
function classLabel(label) {
  const span = document.createElement('span');
  span.className = 'label';
  span.textContent = String(label);
  span.title = String(label);
  return span;
}

function renderConfusion(m) {
  const { labels, matrix } = m.confusion;
  const table = $('confusion');
  // Many classes: the most frequent ones (true or served), in their own order.
  let shown = labels.map((_, i) => i);
  if (labels.length > MAX_MATRIX) {
    const weight = shown.map((i) => matrix[i].reduce((a, b) => a + b, 0) +
      matrix.reduce((a, row) => a + row[i], 0));
    shown = shown.slice().sort((a, b) => weight[b] - weight[a] || a - b)
      .slice(0, MAX_MATRIX).sort((a, b) => a - b);
  }
  $('confusion-note').textContent = shown.length < labels.length
    ? `the ${shown.length} busiest of ${labels.length} classes · ` : '';
  table.dataset.classes = String(shown.length);
  const head = document.createElement('thead');
  const hr = head.insertRow();
  const corner = document.createElement('th');
  corner.className = 'corner';
  corner.innerHTML = '<span>true ↓</span><span>served →</span>';
  hr.append(corner);
  for (const j of shown) {
    const th = document.createElement('th');
    th.scope = 'col';
    th.append(classLabel(labels[j]));
    hr.append(th);
  }
  const tot = document.createElement('th');
  tot.textContent = 'total';
  tot.className = 'total';
  hr.append(tot);
  const body = document.createElement('tbody');
  for (const i of shown) {
    const row = matrix[i];
    const tr = body.insertRow();
    const th = document.createElement('th');
    th.scope = 'row';
    th.append(classLabel(labels[i]));
    tr.append(th);
    const total = row.reduce((a, b) => a + b, 0);
    for (const j of shown) {
      const count = row[j];
      const td = tr.insertCell();
      td.id = `cm-${i}-${j}`;
      td.dataset.count = String(count);
      td.dataset.true = String(labels[i]);
      td.dataset.served = String(labels[j]);
      const share = total ? count / total : 0;
      const hit = i === j;
      td.className = hit ? 'hit' : 'miss';
      if (count > 0) {
        const a = hit ? 0.12 + 0.78 * share : 0.1 + 0.8 * Math.sqrt(share);
        td.style.setProperty('--a', a.toFixed(3));
        if (a > 0.55) td.classList.add('strong');
      } else {
        td.classList.add('zero');
      }
      td.title = `true ${labels[i]}, served ${labels[j]}: ${fmtInt(count)}` +
        (total ? ` (${fmtPct(share)} of true ${labels[i]})` : '');
      const num = document.createElement('span');
      num.className = 'n';
      num.textContent = fmtInt(count);
      td.append(num);
      if (total) {
        const pct = document.createElement('small');
        pct.textContent = fmtPct(share);
        td.append(pct);
      }
    }
    const tc = tr.insertCell();
    tc.className = 'total';
    tc.textContent = fmtInt(total);
  }
  table.replaceChildren(head, body);
  fitConfusion();
}

// The matrix scrolls only when no layout shows it whole. Tried in turn: beside the other two
// cards, beside one of them, across the row, across the row with compact cells (where more
// than 4 classes start).
function fitConfusion() {
  const table = $('confusion');
  const lower = document.querySelector('.lower');
  const wrap = table.parentElement;
  const few = [['', false], ['mid-matrix', false], ['wide-matrix', false]];
  const tries = Number(table.dataset.classes) > 4 ? [] : few;
  for (const [layout, compact] of tries.concat([['wide-matrix', true]])) {
    lower.classList.toggle('mid-matrix', layout === 'mid-matrix');
    lower.classList.toggle('wide-matrix', layout === 'wide-matrix');
    table.classList.toggle('compact', compact);
    if (wrap.scrollWidth <= wrap.clientWidth) return;
  }
}

// ---------------------------------------------------------------- charts

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG, name);
  for (const k in attrs) node.setAttribute(k, attrs[k]);
  if (parent) parent.append(node);
  return node;
}

// The top of a rate axis: a round share, never past 100%.
function niceRateMax(v) {
  for (const s of [0.01, 0.02, 0.04, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8]) if (v <= s) return s;
  return 1;
}

function niceStep(span, maxTicks) {
  const raw = span / Math.max(1, maxTicks);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

function timeStep(span, maxTicks) {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  for (const s of steps) if (span / s <= maxTicks) return s;
  return steps[steps.length - 1];
}

// Draws one chart: x values, and lines of y values (null: a gap) sharing a rate axis.
function drawChart(svg, spec) {
  const width = Math.max(280, Math.round(svg.getBoundingClientRect().width) || 600);
  const height = 240;
  const m = { l: 48, r: 16, t: 14, b: 30 };
  const pw = width - m.l - m.r;
  const ph = height - m.t - m.b;
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('height', String(height));
  svg.replaceChildren();
  const n = spec.x.length;
  svg.dataset.points = String(n);
  svg._chart = null;
  if (!n) {
    svg.parentElement.querySelector('.tooltip').hidden = true;
    el('text', { x: width / 2, y: height / 2, class: 'empty-text', 'text-anchor': 'middle' }, svg)
      .textContent = spec.emptyText;
    return;
  }
  let x0 = spec.x0 === undefined ? spec.x[0] : Math.min(spec.x0, spec.x[0]);
  let x1 = spec.x[n - 1];
  if (x1 <= x0) {
    x0 -= spec.pad;
    x1 += spec.pad;
  }
  let ymax = 0;
  for (const line of spec.lines) for (const y of line.ys) if (y !== null && y > ymax) ymax = y;
  ymax = niceRateMax(Math.max(ymax * 1.05, 0.01));
  const sx = (x) => m.l + ((x - x0) / (x1 - x0)) * pw;
  const sy = (y) => m.t + ph - (y / ymax) * ph;

  // grid and axes
  const grid = el('g', { class: 'grid' }, svg);
  const ystep = ymax / 4;
  for (let i = 0; i <= 4; i++) {
    const y = sy(i * ystep);
    el('line', { x1: m.l, x2: m.l + pw, y1: y, y2: y, class: i ? 'gridline' : 'axisline' }, grid);
    el('text', { x: m.l - 8, y: y + 4, 'text-anchor': 'end', class: 'tick tick-y' }, grid)
      .textContent = fmtAxisPct(i * ystep);
  }
  const maxTicks = Math.max(2, Math.floor(pw / 90));
  // (examples are counted: a tick every whole number at least)
  const step = spec.time ? timeStep(x1 - x0, maxTicks) : Math.max(1, niceStep(x1 - x0, maxTicks));
  for (let v = Math.ceil(x0 / step) * step; v <= x1 + 1e-9; v += step) {
    const x = sx(v);
    el('line', { x1: x, x2: x, y1: m.t + ph, y2: m.t + ph + 4, class: 'axisline' }, grid);
    el('text', { x, y: m.t + ph + 18, 'text-anchor': 'middle', class: 'tick tick-x' }, grid)
      .textContent = spec.time ? fmtClock(v, step < 60) : fmtCount(v);
  }

  // lines, area under the main one, dots
  for (const line of spec.lines) {
    const g = el('g', { class: 'series series-' + line.cls }, svg);
    const pts = [];
    let d = '';
    let pen = false;
    line.ys.forEach((y, i) => {
      if (y === null) {
        pen = false;
        return;
      }
      const px = sx(spec.x[i]).toFixed(1);
      const py = sy(y).toFixed(1);
      pts.push(px + ',' + py);
      d += (pen ? 'L' : 'M') + px + ' ' + py;
      pen = true;
    });
    if (line.area && pts.length > 1) {
      const first = pts[0].split(',')[0];
      const last = pts[pts.length - 1].split(',')[0];
      el('path', { d: `M${first} ${m.t + ph}L${pts.join('L')}L${last} ${m.t + ph}Z`, class: 'area' }, g);
    }
    if (line.polyline) {
      el('polyline', { points: pts.join(' '), class: 'line', 'data-vertices': pts.length }, g);
    } else if (d) {
      el('path', { d, class: 'line' }, g);
    }
    if (line.dots && n <= line.dots) {
      line.ys.forEach((y, i) => {
        if (y === null) return;
        el('circle', { cx: sx(spec.x[i]).toFixed(1), cy: sy(y).toFixed(1), r: line.r || 3, class: 'pt', 'data-i': i }, g);
      });
    }
  }
  // marks: a dashed line and a label at each x within the chart (checkpoints)
  // (a label that would overlap the one before it is left out: the tooltip names each)
  const marks = el('g', { class: 'marks' }, svg);
  let labelled = -Infinity;
  for (const mark of (spec.marks || []).slice().sort((a, b) => a.x - b.x)) {
    if (mark.x < x0 || mark.x > x1) continue;
    const g = el('g', { class: 'mark mark-' + mark.cls, 'data-id': mark.id }, marks);
    const x = sx(mark.x);
    el('line', { x1: x.toFixed(1), x2: x.toFixed(1), y1: m.t, y2: m.t + ph }, g);
    if (!mark.label || x - labelled < 8 * (mark.label.length + 1)) continue;
    labelled = x;
    el('text', { x: x.toFixed(1), y: m.t - 3, 'text-anchor': 'middle' }, g).textContent = mark.label;
  }
  const guide = el('line', { x1: 0, x2: 0, y1: m.t, y2: m.t + ph, class: 'guide', visibility: 'hidden' }, svg);
  svg._chart = { spec, sx, sy, guide, m, pw };
  if (svg._showTip) svg._showTip();
}

function attachTooltip(svg) {
  const tip = svg.parentElement.querySelector('.tooltip');
  const show = (clientX) => {
    const c = svg._chart;
    if (!c) {
      tip.hidden = true;
      return;
    }
    svg._hoverX = clientX;
    const box = svg.getBoundingClientRect();
    const scale = box.width / svg.viewBox.baseVal.width;
    const x = (clientX - box.left) / scale;
    let best = 0;
    for (let i = 1; i < c.spec.x.length; i++) {
      if (Math.abs(c.sx(c.spec.x[i]) - x) < Math.abs(c.sx(c.spec.x[best]) - x)) best = i;
    }
    const gx = c.sx(c.spec.x[best]);
    c.guide.setAttribute('x1', gx);
    c.guide.setAttribute('x2', gx);
    c.guide.setAttribute('visibility', 'visible');
    tip.replaceChildren();
    const head = document.createElement('b');
    head.textContent = c.spec.label(best);
    tip.append(head);
    for (const line of c.spec.lines) {
      const row = document.createElement('div');
      row.innerHTML = `<span class="key key-${line.cls}"></span>`;
      row.append(`${line.name}: ${fmtPct(line.ys[best])}`);
      tip.append(row);
    }
    if (c.spec.extra) {
      const row = document.createElement('div');
      row.className = 'muted';
      row.textContent = c.spec.extra(best);
      tip.append(row);
    }
    for (const text of c.spec.marksAt ? c.spec.marksAt(best) : []) {
      const row = document.createElement('div');
      row.className = 'tip-mark';
      row.textContent = text;
      tip.append(row);
    }
    tip.hidden = false;
    const left = gx * scale;
    tip.style.left = Math.min(left + 12, box.width - tip.offsetWidth - 4) + 'px';
    tip.style.top = '8px';
  };
  svg._showTip = () => svg._hoverX !== null && svg._hoverX !== undefined && show(svg._hoverX);
  svg.addEventListener('mousemove', (ev) => show(ev.clientX));
  svg.addEventListener('mouseleave', () => {
    svg._hoverX = null;
    tip.hidden = true;
    if (svg._chart) svg._chart.guide.setAttribute('visibility', 'hidden');
  });
}

function renderCharts(m) {
  const pts = m.series.points;
  const bucket = m.series.bucket_s;
  $('bucket-legend').textContent = `per ${bucket} s bucket`;
  const cumulative = pts.map((p) => (p.examples_total ? p.mistakes_total / p.examples_total : null));
  const empty = m.counters.seen ? 'No examples in the chart window' : 'No labelled examples yet';
  const timed = state.drift.filter((e) => e.time !== null); // (a promoted learner's: no time)
  drawChart($('chart-time'), {
    x: pts.map((p) => p.t),
    time: true,
    pad: bucket,
    emptyText: empty,
    lines: [
      { cls: 'bucket', name: 'bucket', ys: pts.map((p) => p.rate), dots: 600, r: 2.6 },
      { cls: 'cumulative', name: 'cumulative', ys: cumulative, polyline: true, area: true },
    ],
    label: (i) => `${fmtClock(pts[i].t)} (+${bucket} s)`,
    extra: (i) => `${fmtInt(pts[i].mistakes)} of ${nCount(pts[i].examples, 'example')} wrong`,
    // (at the start of its bucket, as each point: so at the point whose tooltip names it)
    marks: state.checkpoints.map((c) => ({
      x: Math.floor(c.time / bucket) * bucket,
      id: c.id,
      label: '#' + c.id,
      cls: c.reason.replaceAll(' ', '-'),
    })).concat(timed.map((e, i) => ({
      x: Math.floor(e.time / bucket) * bucket, id: 'drift-' + i, label: driftLabel(e), cls: driftClass(e),
    }))),
    marksAt: (i) => state.checkpoints
      .filter((c) => c.time >= pts[i].t && c.time < pts[i].t + bucket)
      .map(checkpointLine)
      .concat(timed.filter((e) => e.time >= pts[i].t && e.time < pts[i].t + bucket)
        .map(driftLine)),
  });
  const curve = m.curve.points;
  const recent = recentRates(m.curve);
  drawChart($('chart-examples'), {
    x: curve.map((p) => p.examples),
    time: false,
    x0: 0,
    pad: 1,
    emptyText: m.counters.seen ? 'No point on the curve yet' : 'No labelled examples yet',
    lines: [
      { cls: 'window', name: windowName(recent.span), ys: recent.rates, dots: 200, r: 2.4 },
      // (dotted while the curve is short: a line of one point is not seen)
      { cls: 'running', name: 'cumulative', ys: curve.map((p) => p.rate), polyline: true, area: true, dots: 20, r: 3 },
    ],
    label: (i) => `after ${nCount(curve[i].examples, 'example')}`,
    extra: (i) => `${nCount(curve[i].mistakes, 'mistake')} in all`,
    // (each of the drift detector's events at the example it came: marked where it lies
    // between two points of the curve, named by the point after it)
    marks: state.drift.map((e, i) => ({ x: e.at_seen, id: 'drift-' + i, label: driftLabel(e), cls: driftClass(e) })),
    marksAt: (i) => state.drift
      .filter((e) => e.at_seen <= curve[i].examples && (i === 0 || e.at_seen > curve[i - 1].examples))
      .map(driftLine),
  });
  $('window-legend').textContent = windowName(recent.span);
}

// The served learner's drift events (a challenger's count its own examples: its card's).
function servedEvents(answer) {
  return answer.events.filter((e) => e.learner === 'served');
}

// A drift detector's event: its mark's label and class, and its line in a tooltip (a drift at
// which the background learner replaced the served one: 'retrained').
function driftLabel(e) {
  if (e.action === 'retrained') return 'retrained';
  return e.kind === 'drift' ? 'drift' : ''; // (a warning: its line alone)
}

function driftClass(e) {
  return e.action === 'retrained' ? 'drift mark-retrained' : e.kind;
}

function driftLine(e) {
  const what = e.kind === 'drift' ? 'drift detected' : 'drift warning';
  const by = e.learner === 'served' ? '' : ` (${e.learner})`;
  const action = e.action ? ` · ${e.action}` : '';
  const when = e.time === null ? '' : `, ${fmtClock(e.time)}`; // (a promoted learner's: none)
  return `${what}${by} at example ${fmtInt(e.at_seen)}${when}${action}`;
}

// A learner's settings in a few words, as GET /learners names them: its title, each number
// not at its default, each boolean that is on ("PA-I C 0.1", "perceptron lr 0.5 averaged").
function learnerLine(c) {
  const name = c.algorithm || 'perceptron';
  const learner = (state.learners || {})[name];
  const parts = [learner ? learner.title : name];
  for (const s of learner ? learner.settings : []) {
    const v = c[s.name];
    if (v === undefined || v === null || v === s.default) continue;
    parts.push(s.type === 'boolean' ? s.name : `${s.short} ${fmtNum(v)}`);
  }
  if (c.classes.length > 2) parts.push(c.multiclass);
  return parts.join(' ');
}

// The served learner (its curve from the metrics) and each challenger: one learning curve
// each, its cumulative mistake rate since it joined, placed on the model's labelled examples
// where it joined (x = the labels before it + the examples it has seen); and a row of figures
// each, a challenger's beside the served learner's on the same examples (since it joined).
function renderChallengers() {
  const s = state.challengers;
  const m = state.metrics;
  const shown = Boolean(s && m && s.model === m.model && s.challengers.length);
  $('challengers').hidden = !shown;
  if (!shown) return;
  const learners = [
    { ...s.served, since: 0, served_mistakes: null, curve: m.curve, label: 'served' },
    ...s.challengers.map((c) => ({ ...c, label: c.id })),
  ];
  const placed = learners.map((l) => new Map(l.curve.points.map((p) => [l.since + p.examples, p.rate])));
  const xs = [...new Set(placed.flatMap((at) => [...at.keys()]))].sort((a, b) => a - b);
  const lines = learners.map((l, i) => (
    { cls: `learner series-learner-${i % 9}`, name: l.label, ys: xs.map((x) => placed[i].get(x) ?? null), polyline: true }
  ));
  drawChart($('chart-challengers'), {
    x: xs,
    time: false,
    x0: 0,
    pad: 1,
    emptyText: 'No labelled examples since the challengers came',
    lines,
    label: (i) => `after the model's ${nCount(xs[i], 'example')}`,
    extra: () => '',
  });
  const body = $('learners').tBodies[0];
  body.replaceChildren();
  learners.forEach((l, i) => {
    const row = body.insertRow();
    row.dataset.id = l.label;
    const name = row.insertCell();
    const swatch = document.createElement('span');
    swatch.className = `swatch series-learner-${i % 9}`;
    name.append(swatch, l.label);
    row.insertCell().textContent = learnerLine(l.config);
    row.insertCell().textContent = fmtInt(l.seen);
    row.insertCell().textContent = fmtInt(l.mistakes);
    row.insertCell().textContent = fmtPct(l.mistake_rate.last_100);
    const own = row.insertCell();
    own.textContent = fmtPct(l.mistake_rate.all);
    if (l.since) own.title = `since it joined, after the model's ${nCount(l.since, 'example')}`;
    const same = row.insertCell();
    same.textContent = l.served_mistakes === null || !l.seen ? '—' : fmtPct(l.served_mistakes / l.seen);
    row.insertCell().textContent = fmtInt(l.updates);
  });
}

// "checkpoint #7 · version 1,200 · before rollback · 4.1% wrong then" (the reason as the
// service names it: protocol.Reason)
function checkpointLine(c) {
  const rate = c.mistake_rate === null ? '' : ` · ${fmtPct(c.mistake_rate)} wrong then`;
  return `checkpoint #${c.id} · version ${fmtInt(c.version)} · ${c.reason}${rate}`;
}

// ---------------------------------------------------------------- history

// What each API key taught the model: labelled examples, its mistake rate, updates.
function renderSources(m) {
  const body = $('sources').tBodies[0];
  body.replaceChildren();
  $('sources-empty').hidden = m.sources.length > 0;
  for (const s of m.sources) {
    const row = body.insertRow();
    row.dataset.source = s.source;
    const name = row.insertCell();
    name.textContent = s.source || 'no key (keys off)';
    if (!s.source) name.className = 'muted';
    for (const text of [fmtInt(s.labelled), fmtPct(s.mistakes / s.labelled), fmtInt(s.updates)]) {
      row.insertCell().textContent = text;
    }
    row.title = `${nCount(s.mistakes, 'mistake')} among ${nCount(s.labelled, 'labelled example')}`;
  }
}

// How late the labels come (the labels that came: feedback), and how many came by default:
// the metrics' labels, as the service measures them.
function renderLabels(m) {
  const l = m.labels;
  const info = state.models.find((x) => x.name === m.model);
  const fallback = info ? info.config.default_label : null;
  const hasDefault = fallback !== null && fallback !== undefined;
  $('labels').dataset.default = hasDefault ? String(fallback) : 'none';
  setText('delay-median', fmtDuration(l.median_s), l.median_s);
  setText('delay-p95', fmtDuration(l.p95_s), l.p95_s);
  if (hasDefault) {
    setText('defaulted-share', fmtPct(l.defaulted_share), l.defaulted_share);
    setText('awaiting-default', fmtInt(l.awaiting_default), l.awaiting_default);
  } else {
    setText('defaulted-share', 'no default label', null);
    setText('awaiting-default', 'no default label', null);
  }
  const came = l.counted ? `Delays of ${nCount(l.counted, 'label')} that came as feedback.`
    : 'No label has come as feedback yet.';
  const wait = info ? fmtDuration(info.config.feedback_ttl_s) : '';
  $('labels-text').textContent = hasDefault
    ? `${came} A prediction with no label after ${wait} is learned as “${fallback}”: ` +
      `${fmtInt(m.counters.defaulted)} so far.`
    : `${came} No default label: a label that comes more than ${wait} after its prediction ` +
      'is refused (410).';
}

// The newest checkpoints, newest first.
function renderCheckpoints() {
  const list = $('checkpoints');
  list.replaceChildren();
  const newest = state.checkpoints.slice().sort((a, b) => b.id - a.id).slice(0, 8);
  $('checkpoints-empty').hidden = newest.length > 0;
  for (const c of newest) {
    const li = document.createElement('li');
    li.dataset.id = String(c.id);
    li.dataset.reason = c.reason;
    const when = document.createElement('span');
    when.className = 'muted';
    when.textContent = fmtDate(c.time);
    li.append(checkpointLine(c), ' ', when);
    list.append(li);
  }
}

function windowName(span) {
  return `last ${nCount(span, 'example')}`;
}

// The mistake rate over the last ~100 examples at each point of the curve (a whole number of
// its steps, so 100 to 128 examples: the legend says how many); null where the curve does not
// reach that far back, so the line starts once that many examples are labelled.
function recentRates(curve) {
  const pts = curve.points;
  const span = curve.every * Math.ceil(100 / curve.every);
  const at = new Map(pts.map((p) => [p.examples, p.mistakes]));
  if (pts.length && pts[0].examples === curve.every) at.set(0, 0); // it starts at the start
  const rates = pts.map((p) => {
    const before = at.get(p.examples - span);
    return before === undefined ? null : (p.mistakes - before) / span;
  });
  return { span, rates };
}

// ---------------------------------------------------------------- render

function render(m) {
  $('model-view').hidden = false;
  $('model-view').dataset.model = m.model;
  const t = renderHeadline(m);
  renderRates(m, t);
  renderCharts(m);
  renderConfusion(m);
  renderWeights(m);
  renderCounters(m);
  renderLabels(m);
  renderSources(m);
  renderCheckpoints();
  renderChallengers();
  document.title = `${m.model}: ${fmtPct(m.mistake_rate.last_100)} mistakes · Perceptron`;
  document.body.dataset.ready = 'true';
}

let resizeTimer = null;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    if (!state.metrics) return;
    renderCharts(state.metrics);
    renderChallengers();
    fitConfusion();
  }, 100);
});

attachTooltip($('chart-time'));
attachTooltip($('chart-examples'));
attachTooltip($('chart-challengers'));
state.key = initialKey();
refresh();
