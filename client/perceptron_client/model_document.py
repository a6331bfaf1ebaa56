"""A model's export document (``GET /models/{name}/export``) as numpy arrays, both ways.

What the bridges to other libraries read and write: a model's configuration and its weights,
float64 little-endian, base64, with their sha256: every weight row (``rows x dim``, row after
row), then one bias a row, then, for an averaged model, the running sums of the same shapes
(and for a learner that keeps more, such as AROW's variances, its arrays of the same shapes,
which no prediction needs).
A document written here is imported as any export is (``POST /models/{name}/import``); the
service checks it whole. ``tests/test_sklearn_bridge_edges.py`` holds the layout to the
service's own (``service/contract/export_format.py``).

Needs numpy: the client imports this module only for a bridge, never at its own import.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

FORMAT = "perceptron-model"
FORMAT_VERSION = 1
_FLOAT = np.dtype("<f8")


@dataclass(frozen=True)
class LinearScores:
    """The weights a model serves its predictions with: one score ``coef @ x + intercept`` a
    row, its configuration, and how many labelled examples it has counted."""

    config: dict[str, Any]
    coef: np.ndarray  # (rows, dim)
    intercept: np.ndarray  # (rows,)
    seen: int


def n_rows(config: Mapping[str, Any]) -> int:
    """How many weight rows a model of ``config`` keeps: one for two classes; one a pair of
    classes for ``ovo``; else one a class."""
    k = len(config["classes"])
    if k == 2:
        return 1
    return k * (k - 1) // 2 if config.get("multiclass") == "ovo" else k


def write(
    name: str, config: Mapping[str, Any], coef: np.ndarray, intercept: np.ndarray
) -> dict[str, Any]:
    """An export document of a model of ``config`` with these weights, as yet unused: version
    0, no labelled example counted, no counters (an averaged model's sums start at zero, so its
    mean weights are these until it learns)."""
    parts = [coef, intercept]
    if config.get("averaged"):
        parts += [np.zeros_like(coef), np.zeros_like(intercept)]
    data = b"".join(np.ascontiguousarray(p, dtype=_FLOAT).tobytes() for p in parts)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "config": dict(config),
        "created": 0,
        "version": 0,
        "seen": 0,
        "counters": {},
        "weights": base64.b64encode(data).decode("ascii"),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def served(document: Mapping[str, Any]) -> LinearScores:
    """The weights an export document's model serves predictions with: for an averaged model
    the mean ``w - wsum / seen`` (``b`` likewise), computed as the service computes it, so that
    the scores are the service's bit for bit."""
    if document.get("format") != FORMAT or document.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"Not an export document this client reads (format {FORMAT!r}, version "
            f"{FORMAT_VERSION}); got {str(document.get('format'))[:40]!r}, version "
            f"{str(document.get('format_version'))[:20]}."
        )
    config: dict[str, Any] = dict(document["config"])
    data = base64.b64decode(document["weights"], validate=True)
    if hashlib.sha256(data).hexdigest() != str(document["sha256"]).lower():
        raise ValueError("The export document's weights do not match their sha256 checksum.")
    rows = n_rows(config)
    dim = config["n_features"] or 1 << config["hash_bits"]
    flat = np.frombuffer(data, dtype=_FLOAT).astype(np.float64)
    sizes = [rows * dim, rows] * (2 if config.get("averaged") else 1)
    extra = flat.size - sum(sizes)  # (a learner's own arrays: weights' and biases' shapes)
    if extra < 0 or extra % (rows * dim + rows):
        raise ValueError(
            f"The export document holds {flat.size} weights; its model has {sum(sizes)}."
        )
    w, b, *sums = np.split(flat[: sum(sizes)], np.cumsum(sizes)[:-1])
    w = w.reshape(rows, dim)
    seen = int(document["seen"])
    if sums and seen > 0:
        w, b = w - sums[0].reshape(rows, dim) / seen, b - sums[1] / seen
    return LinearScores(config, np.ascontiguousarray(w), np.ascontiguousarray(b), seen)
