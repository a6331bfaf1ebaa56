"""What ``perceptron models`` and its scikit-learn actions print, and the error that says a
command's input is unusable: shared by ``models_command.py`` and ``models_sklearn.py``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from perceptron_client import Checkpoints, DriftReport, ModelInfo


class Usage(Exception):
    """Input the command cannot use (a file it cannot read or write)."""


def features_of(info: ModelInfo) -> str:
    c = info.config
    return str(c.n_features) if c.n_features is not None else f"named, 2^{c.hash_bits}"


def print_model(info: ModelInfo, as_json: bool) -> None:
    if as_json:
        out(info.model_dump_json())
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
        out(h.model_dump_json())
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
        out(report.model_dump_json())
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
                e.action or "-",
            )
        )
    out(columns(rows) if report.events else "no warning or drift yet")


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
