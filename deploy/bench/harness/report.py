"""The report: one markdown table (a row builder per figure), the notes (notes.py), FILE.json."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict
from typing import Any

from harness.common import BATCH, VW_QUOTED_RR, VW_QUOTED_STREAM
from harness.notes import notes
from harness.results import Results

HEAD = [
    "Fig",
    "Figure",
    "Measured: median (min–max)",
    "Baseline",
    "Baseline: median (min–max)",
    "Ratio",
    "Target",
    "Met",
]
FLOOR = "bare FastAPI + 1 Redis GET"
FLOOR_784 = FLOOR + ", same 784-int body"
FLOOR_NAMED = "bare FastAPI (dict[str, float]) + 1 Redis GET, same body"


def med(v: list[float]) -> float:
    return statistics.median(v) if v else float("nan")


class Table:
    """The rows of the table, and how a cell of several runs is written."""

    def __init__(self, results: Results) -> None:
        self.res = results
        self.rows: list[list[str]] = []

    def vals(self, key: str, attr: str) -> list[float]:
        """``attr`` of every run of ``key``."""
        return [float(getattr(r, attr)) for r in self.res.runs.get(key, [])]

    def cell(self, v: list[float], fmt: str, key: str | None = None) -> str:
        """``median (min–max)``, † when a run of ``key`` was disturbed."""
        if not v:
            return "n/a"
        m = statistics.median(v)
        mark = "†" if key and self.res.disturbed(key) else ""
        if len(v) == 1:
            return fmt.format(m) + mark
        return f"{fmt.format(m)} ({fmt.format(min(v))}–{fmt.format(max(v))}){mark}"

    def add(
        self,
        fig: str,
        what: str,
        ours: str,
        base_name: str = "",
        base: str = "",
        ratio: float | None = None,
        target: str = "",
        ok: bool | None = None,
    ) -> None:
        r = "n/a" if ratio is None or ratio != ratio else f"{ratio:.2f}"
        mark = "" if ok is None else ("yes" if ok else "**no**")
        self.rows.append([fig, what, ours, base_name, base, r, target, mark])

    def markdown(self) -> str:
        out = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(out)


def per_request(
    t: Table, label: str, key: str, base: str, base_label: str, target: float | None
) -> None:
    """Figure 1's four rows of one endpoint beside its baseline: req/s, CPU, p50, p99."""
    runs = t.res.runs
    if key not in runs:
        return
    o, b = t.vals(key, "rps"), t.vals(base, "rps")
    ratio = med(o) / med(b) if b else None
    ok = None if target is None or ratio is None else ratio >= target
    tgt = f"≥ {target:.2f} × baseline" if target is not None else ""
    t.add(
        "1",
        f"{label}: req/s",
        t.cell(o, "{:,.0f}", key),
        base_label,
        t.cell(b, "{:,.0f}", base),
        ratio,
        tgt,
        ok,
    )
    o = [r.extra.get("cpu_us", 0.0) for r in runs.get(key, [])]
    b = [r.extra.get("cpu_us", 0.0) for r in runs.get(base, [])]
    t.add(
        "1",
        f"{label}: server CPU µs per request (workers + Redis)",
        t.cell(o, "{:,.0f}"),
        base_label,
        t.cell(b, "{:,.0f}"),
        med(o) / med(b) if b and med(b) else None,
    )
    for q, attr in (("p50", "p50_ms"), ("p99", "p99_ms")):
        o, b = t.vals(key, attr), t.vals(base, attr)
        t.add(
            "1",
            f"{label}: {q} latency ms",
            t.cell(o, "{:.2f}", key),
            base_label,
            t.cell(b, "{:.2f}", base),
            med(o) / med(b) if b else None,
        )


# Figure 1's endpoints: label, runs' key, baseline's key, baseline's label, req/s target.
PER_REQUEST: tuple[tuple[str, str, str, str, float | None], ...] = (
    ("floor: bare FastAPI + 1 Redis GET, d=100 body", "floor100", "bare100",
     "same app, no Redis call", None),
    ("/predict dense d=100 binary", "predict100", "floor100", FLOOR, 0.85),
    ("/feedback dense d=100 binary (every one updates)", "feedback100", "floor100", FLOOR, 0.75),
    ("/learn dense d=100 binary", "learn100", "floor100", FLOOR, None),
    ("/predict dense d=784, 10 classes", "predict784", "floor784", FLOOR_784, None),
    ("/learn dense d=784, 10 classes", "learn784", "floor784", FLOOR_784, None),
    ("/feedback dense d=784, 10 classes (1 run, every one updates)", "feedback784", "floor784",
     FLOOR_784, None),
    ("/predict named, 50 of 2^18 buckets", "predict_named", "floor_named", FLOOR_NAMED, None),
    ("/learn named, 50 of 2^18 buckets", "learn_named", "floor_named", FLOOR_NAMED, None),
)  # fmt: skip


def figure1(t: Table) -> None:
    for label, key, base, base_label, target in PER_REQUEST:
        per_request(t, label, key, base, base_label, target)


# Figure 2's rows per /feedback: label, key in the Redis stats, target in µs, format.
FEEDBACK_METRICS: tuple[tuple[str, str, float | None, str], ...] = (
    ("EVALSHA calls per feedback", "evalsha_calls_per_feedback", None, "{:.2f}"),
    ("EVALSHA usec per call", "evalsha_usec_per_call", 20.0, "{:.1f}"),
    ("Redis command usec per feedback (top-level total)", "total_usec_per_feedback", 20.0,
     "{:.1f}"),
    ("Redis main-thread CPU usec per feedback (incl. network I/O)", "cpu_usec_per_feedback",
     None, "{:.1f}"),
)  # fmt: skip


def figure2(t: Table) -> None:
    fb = t.res.fb_stats
    s7 = t.res.fb784_stats
    for label, k, target, fmt in FEEDBACK_METRICS if fb else ():
        v = [st[k] for st in fb]
        what = f"/feedback d=100 binary: {label}"
        if target is None:
            t.add("2", what, t.cell(v, fmt))
        else:
            t.add(
                "2",
                what,
                t.cell(v, fmt),
                "target",
                f"{target:g}",
                med(v) / target,
                f"≤ {target:g} µs",
                med(v) <= target,
            )
    for label, k, target, fmt in FEEDBACK_METRICS if fb and s7 else ():
        assert s7 is not None
        base = med([st[k] for st in fb])
        limit = 4 * (target or 0)
        t.add(
            "2",
            f"/feedback d=784 x 10 classes: {label}",
            fmt.format(s7[k]),
            "same figure, d=100 binary",
            fmt.format(base),
            s7[k] / base if base else None,
            f"≤ 4 × d=100 (≤ {limit:g} µs)" if target else "",
            None if not target else s7[k] <= limit,
        )
    for key, what in (("predict100", "/predict"), ("learn100", "/learn")):
        st = [r.extra for r in t.res.runs.get(key, []) if r.extra.get("feedbacks")]
        if not st:
            continue
        calls = [e["evalsha_calls"] / e["feedbacks"] for e in st]
        usec = [e["total_usec_per_feedback"] for e in st]
        cpu = [e["cpu_usec_per_feedback"] for e in st]
        t.add(
            "2",
            f"d=100 binary: EVALSHA calls per {what} served",
            t.cell(calls, "{:.2f}"),
            "one script per request",
            "1",
            med(calls),
        )
        t.add(
            "2",
            f"d=100 binary: Redis command usec per {what} (top-level total)",
            t.cell(usec, "{:.1f}"),
        )
        t.add("2", f"d=100 binary: Redis main-thread CPU usec per {what}", t.cell(cpu, "{:.1f}"))


VW_MEASURED = {
    "vw_rr": "VW daemon (pylibvw), measured: one example per request/response, 2 connections",
    "vw_stream": "VW daemon (pylibvw), measured: streaming, 1 connection",
}


def figure3(t: Table) -> None:
    runs = t.res.runs
    lo, hi = VW_QUOTED_STREAM
    if "learn_batch" in runs:
        ex = [r.rps * BATCH for r in runs["learn_batch"]]
        m = med(ex)
        t.add(
            "3",
            "/learn/batch d=100, 1000 per request, 4 connections: examples/s",
            t.cell(ex, "{:,.0f}"),
            "VW daemon req/resp, quoted",
            f"{VW_QUOTED_RR:,.0f}",
            m / VW_QUOTED_RR,
            "≥ 55,000 /s",
            m >= VW_QUOTED_RR,
        )
        t.add(
            "3",
            "  same figure",
            t.cell(ex, "{:,.0f}"),
            "VW daemon streaming, quoted",
            f"{lo:,.0f}–{hi:,.0f}",
            m / lo,
            f"stretch: ≥ {lo:,.0f} /s",
            m >= lo,
        )
        for key, name in VW_MEASURED.items():
            if key in runs:
                v = t.vals(key, "rps")
                t.add(
                    "3",
                    "  same figure",
                    t.cell(ex, "{:,.0f}"),
                    name,
                    t.cell(v, "{:,.0f}"),
                    m / med(v),
                )
        st = [r.extra for r in runs["learn_batch"] if r.extra.get("feedbacks")]
        if st:
            calls = [e["evalsha_calls"] / e["feedbacks"] * BATCH for e in st]
            cpu = [e["cpu_usec_per_feedback"] for e in st]
            t.add(
                "3",
                "/learn/batch: EVALSHA calls per 1000-example request",
                t.cell(calls, "{:.2f}"),
                "one script per request",
                "1",
                med(calls),
            )
            t.add(
                "3", "/learn/batch: Redis main-thread CPU usec per example", t.cell(cpu, "{:.2f}")
            )
        lat = t.vals("learn_batch", "p50_ms")
        t.add(
            "3", "/learn/batch: p50 latency of one 1000-example request, ms", t.cell(lat, "{:.1f}")
        )
    if "learn_batch_packed" in runs and "learn_batch" in runs:
        ex = [r.rps * BATCH for r in runs["learn_batch"]]
        pk = [r.rps * BATCH for r in runs["learn_batch_packed"]]
        t.add(
            "3",
            "/learn/batch d=100, packed_features (base64 float64), 1000 per request: examples/s",
            t.cell(pk, "{:,.0f}"),
            "the same, JSON features",
            t.cell(ex, "{:,.0f}"),
            med(pk) / med(ex),
        )
        t.add(
            "3",
            "  same figure",
            t.cell(pk, "{:,.0f}"),
            "VW daemon streaming, quoted",
            f"{lo:,.0f}–{hi:,.0f}",
            med(pk) / lo,
            f"stretch: ≥ {lo:,.0f} /s",
            med(pk) >= lo,
        )
        if "vw_stream" in runs:
            v = t.vals("vw_stream", "rps")
            t.add(
                "3",
                "  same figure",
                t.cell(pk, "{:,.0f}"),
                VW_MEASURED["vw_stream"],
                t.cell(v, "{:,.0f}"),
                med(pk) / med(v),
            )
        lat = t.vals("learn_batch_packed", "p50_ms")
        json_lat = t.vals("learn_batch", "p50_ms")
        t.add(
            "3",
            "/learn/batch packed: p50 latency of one 1000-example request, ms",
            t.cell(lat, "{:.1f}"),
            "the same, JSON features",
            t.cell(json_lat, "{:.1f}"),
            med(lat) / med(json_lat),
        )


def figure4(t: Table) -> None:
    wm, pm = t.res.weights_mem, t.res.pending
    if wm:
        bpw = wm["bytes_per_weight"]
        t.add(
            "4",
            "Redis bytes per weight, 2^20-weight named model (all its keys)",
            f"{bpw:.2f} ({wm['total_mib']:.1f} MiB)",
            "float64 weight",
            "8",
            bpw / 8,
            "≤ 32 B (≤ 32 MiB)",
            bpw <= 32,
        )
    if pm:
        t.add(
            "4",
            "Redis bytes per pending prediction, d=100 (used_memory delta / 20,000)",
            f"{pm['per_prediction']:,.0f}",
            "the pending record's own bytes (STRLEN)",
            f"{pm['record_bytes']:,}",
            pm["per_prediction"] / pm["record_bytes"],
        )


def table(results: Results) -> str:
    t = Table(results)
    for figure in (figure1, figure2, figure3, figure4):
        figure(t)
    return t.markdown()


def render(res: Results, cmd: str, elapsed: float) -> str:
    """The whole report: a title line, the table, the notes."""
    return (
        f"Perceptron service benchmark ({cmd}), {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{elapsed:.0f} s\n\n"
        + table(res)
        + "\n\n"
        + "\n".join(f"- {n}" for n in notes(res))
        + "\n"
    )


def raw(res: Results) -> str:
    """FILE.json: every run, and each figure's own findings."""
    out: dict[str, Any] = {"runs": {k: [asdict(r) for r in v] for k, v in res.runs.items()}}
    for k in ("fb_stats", "fb784_stats", "pending", "weights_mem", "vw_status"):
        out[k] = getattr(res, k)
    return json.dumps(out, indent=1, default=str)
