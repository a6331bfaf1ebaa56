"""What ``perceptron models`` and its scikit-learn actions print, and the error that says a
command's input is unusable: shared by ``models_command.py`` and ``models_sklearn.py``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from perceptron_client import ModelInfo


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
        ("version", str(info.version)),
        ("created", created),
        *((name, str(value)) for name, value in info.counters.model_dump().items()),
    ]
    width = max(len(k) for k, _ in lines)
    out("\n".join(f"{k:<{width}}  {v}" for k, v in lines))


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
