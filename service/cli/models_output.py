"""What ``perceptron models`` and its scikit-learn actions print, and the error that says a
command's input is unusable: shared by ``models_command.py`` and ``models_sklearn.py``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from perceptron_client import Checkpoints, DriftReport, ModelInfo, ModelMetrics


class Usage(Exception):
    """Input the command cannot use (a file it cannot read or write)."""


def features_of(info: ModelInfo) -> str:
    c = info.config
    return str(c.n_features) if c.n_features is not None else f"named, 2^{c.hash_bits}"


def print_model(info: ModelInfo, as_json: bool) -> None:
    if as_json:
        out(info.model_dump_json(exclude_unset=True))
        return
    created = datetime.fromtimestamp(info.created, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    c = info.config
    lines = [
        ("name", info.name),
        ("classes", ", ".join(map(str, c.classes))),
        ("features", features_of(info)),
        ("multiclass", c.multiclass),
        ("fit_bias", str(c.fit_bias).lower()),
        ("algorithm", c.algorithm),
        # the learner's own settings, and none of another's
        *((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in c.settings().items()),
        ("feedback_ttl_s", str(c.feedback_ttl_s)),
        ("default_label", "none" if c.default_label is None else str(c.default_label)),
        ("drift", "none" if c.drift is None else " ".join(f"{k}={v}" for k, v in c.drift.items())),
        ("version", str(info.version)),
        ("created", created),
        *((name, str(value)) for name, value in info.counters.model_dump().items()),
    ]
    width = max(len(k) for k, _ in lines)
    out("\n".join(f"{k:<{width}}  {v}" for k, v in lines))


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def print_checkpoints(h: Checkpoints, as_json: bool) -> None:
    if as_json:
        out(h.model_dump_json(exclude_unset=True))
        return
    rows: list[tuple[str, ...]] = [
        ("id", "version", "made (UTC)", "reason", "mistake rate", "bytes")
    ]
    for c in h.checkpoints:
        rate = "-" if c.mistake_rate is None else f"{c.mistake_rate:.3f} of {c.window}"
        rows.append((str(c.id), str(c.version), _utc(c.time), c.reason, rate, f"{c.bytes:,}"))
    out(
        f"{h.name}: version {h.version}; every version from {h.restorable_from} on can be "
        f"restored; history {h.bytes:,} bytes"
    )
    out(columns(rows))


def print_drift(report: DriftReport, as_json: bool) -> None:
    """The detector and its parameters, each learner's state, then its events, oldest first."""
    if as_json:
        out(report.model_dump_json(exclude_unset=True))
        return
    if report.drift is None:
        out("no drift detector (the model's configuration has none)")
        return
    settings = ", ".join(f"{k} {v}" for k, v in report.drift.items() if k != "detector")
    out(f"detector {report.drift['detector']}: {settings}")
    for learner in report.learners:
        out(f"{learner.learner}: {learner.state} after {learner.seen:,} labelled examples")
    # (at_seen: the examples that learner had seen, a challenger counting from its start)
    rows: list[tuple[str, ...]] = [("learner", "event", "at its example", "when (UTC)", "action")]
    for e in report.events:
        rows.append(
            (
                e.learner,
                e.kind,
                f"{e.at_seen:,}",
                "-" if e.time is None else _utc(e.time),
                # (a retrain's: the version a rollback serves the learner from before again)
                f"{e.action} after version {e.version}"
                if e.version is not None
                else e.action or "-",
            )
        )
    out(columns(rows) if report.events else "no warning or drift yet")


def print_metrics(m: ModelMetrics, as_json: bool) -> None:
    """Its mistake rates, its confusion matrix, its labels by source, and how late they came."""
    if as_json:
        out(m.model_dump_json(exclude_unset=True))
        return
    c, r = m.counters, m.mistake_rate
    out(f"{m.model}: version {m.version:,}, {c.seen:,} labelled examples, {c.mistakes:,} wrong")
    rates = [("cumulative", r.cumulative, c.seen), ("last 100", r.last_100, r.last_100_examples)]
    rates.append(("last 1000", r.last_1000, r.last_1000_examples))
    if r.without_defaults is not None:
        rates.append(("without defaults", r.without_defaults, c.seen - c.defaulted))
    out("mistake rate  " + "; ".join(f"{k} {_rate(v, n)}" for k, v, n in rates))
    if m.labels is not None:
        d = m.labels
        late = "-" if d.median_s is None else f"median {d.median_s:g} s, p95 {d.p95_s:g} s"
        share = "-" if d.defaulted_share is None else f"{d.defaulted_share:.1%}"
        out(f"labels        {late}; by default {share}; {d.awaiting_default:,} awaiting it")
    labels = [str(label) for label in m.confusion.labels]
    rows: list[tuple[str, ...]] = [("true \\ predicted", *labels)]
    rows += [(t, *map(str, row)) for t, row in zip(labels, m.confusion.matrix, strict=True)]
    out(columns(rows))
    if m.sources:
        rows = [("source", "labelled", "mistakes", "updates")]
        rows += [
            (s.source or "(no key)", f"{s.labelled:,}", f"{s.mistakes:,}", f"{s.updates:,}")
            for s in m.sources
        ]
        out(columns(rows))


def _rate(rate: float | None, examples: int) -> str:
    return "-" if rate is None else f"{rate:.3f} of {examples:,}"


def columns(rows: list[tuple[str, ...]]) -> str:
    """Rows of text as aligned columns, two spaces apart, the first row their heads."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def out(text: str) -> None:
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    sys.stderr.write(text + "\n")
