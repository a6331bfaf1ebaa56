"""A model's metrics, computed from what the store keeps. Pure: no I/O."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from service.contract.sources import parse_source
from service.contract.store_protocol import DELAY_BUCKETS_S, RING_UNKNOWN, Field, parse_cell
from service.learner import ModelConfig, Weights
from service.learner.codec import unpack_entry
from service.learner.perceptron import raw_scores


def ring_mistakes(ring: bytes, seen: int, last: int, size: int) -> tuple[int, int]:
    """(mistakes, examples) among the last ``last`` labelled examples, from the outcome ring;
    examples whose outcome it does not know (``RING_UNKNOWN``, or anything but ``0`` and
    ``1``: a ring an older version padded) are not counted.

    Byte ``(k - 1) % size`` holds the k-th example: ``1`` for a mistake, ``0`` otherwise.

    >>> ring_mistakes(b"0110", seen=4, last=3, size=4), ring_mistakes(b"--1", 3, 100, 4)
    ((2, 3), (1, 1))
    >>> ring_mistakes(b"\\x00\\x001", 3, 100, 4), ring_mistakes(b"01", 3, 100, 4)
    ((1, 1), (1, 2))
    """
    known = known_marks(ring, seen, last, size)
    return known.count(b"1"), len(known)


def known_marks(ring: bytes, seen: int, last: int, size: int) -> bytes:
    """The known outcomes (``0``, ``1``) among the last ``last`` labelled examples, oldest
    first, from the outcome ring (byte ``(k - 1) % size``: the k-th example's).

    >>> known_marks(b"01-1", seen=6, last=4, size=4)
    b'101'
    """
    n = min(last, seen, size)
    whole = ring.ljust(size, RING_UNKNOWN)
    start = (seen - n) % size
    marks = (whole[start:] + whole[:start])[:n]
    return bytes(m for m in marks if m in b"01")


def series_points(series: dict[str, int], bucket_s: int) -> list[dict[str, Any]]:
    """Per-bucket examples and mistakes, oldest first, with the running totals."""
    n_at = -len(Field.EXAMPLES)
    buckets = sorted({int(k[:n_at]) for k in series if k.endswith(Field.EXAMPLES)})
    points, examples, mistakes = [], 0, 0
    for b in buckets:
        n = series.get(f"{b}{Field.EXAMPLES}", 0)
        m = series.get(f"{b}{Field.MISTAKES}", 0)
        examples, mistakes = examples + n, mistakes + m
        points.append(
            {
                "t": b * bucket_s,
                "examples": n,
                "mistakes": m,
                "rate": m / n if n else None,
                "examples_total": examples,
                "mistakes_total": mistakes,
            }
        )
    return points


def curve_points(curve: dict[str, int]) -> tuple[int, list[dict[str, Any]]]:
    """The learning curve's stride and points, oldest first: mistakes among the first
    ``examples`` labelled examples, and their rate."""
    points = sorted((int(k), m) for k, m in curve.items() if k.isdigit() and int(k) > 0)
    every = curve.get(Field.EVERY, 1)
    return every, [{"examples": k, "mistakes": m, "rate": m / k} for k, m in points]


def confusion_cells(config: ModelConfig, meta: dict[str, str]) -> Iterator[tuple[int, int, int]]:
    """``(served, true, count)`` of each confusion field ``cm:<served>:<true>`` of ``meta``.

    A field that names no pair of this model's classes is skipped: one model's odd data
    must not break the metrics of every model.
    """
    k = config.n_classes
    for key, value in meta.items():
        pair = parse_cell(key)
        if pair is None or not value.isdigit():
            continue
        served, true = pair
        if 0 <= served < k and 0 <= true < k:
            yield served, true, int(value)


def confusion(config: ModelConfig, meta: dict[str, str]) -> list[list[int]]:
    """``matrix[true][served]``: counts of served label against true label."""
    k = config.n_classes
    matrix = [[0] * k for _ in range(k)]
    for served, true, count in confusion_cells(config, meta):
        matrix[true][served] = count
    return matrix


def source_rows(meta: dict[str, str]) -> list[tuple[str, int, int, int]]:
    """``(source, labelled, mistakes, updates)`` per API key name that labelled examples of
    the model, from its per-source counts (``sources.source_fields``), most labelled first."""
    counts: dict[str, dict[str, int]] = {}
    for key, value in meta.items():
        found = parse_source(key)
        if found is not None and value.isdigit():
            counts.setdefault(found[0], {})[found[1]] = int(value)
    rows = [
        (source, c.get(Field.EXAMPLES, 0), c.get(Field.MISTAKES, 0), c.get(Field.UPDATES, 0))
        for source, c in counts.items()
    ]
    return sorted(rows, key=lambda r: (-r[1], r[0]))


# What the mistake-bound card says of a PA model, whose steps the perceptron's bound knows not.


def mistake_bound(
    config: ModelConfig, weights: Weights, recent: list[bytes], r2: float, mistakes: int
) -> dict[str, Any]:
    """The seeds' bound R^2 / gamma^2, for the margin the current weights get on ``recent``.

    An estimate: gamma is measured on the latest labelled examples only, with the current
    weights, not the best separator. It applies to binary perceptrons (without averaging,
    whose served predictions are not the learning perceptron's; another learner's is not
    this bound: its ``bound_note`` says why).
    """
    out: dict[str, Any] = {"estimate": True, "mistakes": mistakes, "window": len(recent)}
    if config.learner.bound_note:
        return {**out, "applies": False, "reason": config.learner.bound_note}
    if not config.binary or config.averaged:
        return {**out, "applies": False, "reason": "binary, non-averaged models only"}
    bias = 1.0 if config.fit_bias else 0.0
    radius = math.sqrt(r2 + bias)
    out.update(applies=True, R=radius)
    norm = _norm(weights.w[0], weights.b[0] * bias)
    if not recent or norm == 0.0:
        return {**out, "gamma": None, "bound": None, "separable": None}
    margins = []
    for item in recent:
        _, t, _, x = unpack_entry(config, item)
        y = 1.0 if t == 1 else -1.0
        margins.append(y * float(raw_scores(weights, x)[0]) / norm)
    gamma = min(margins)
    if gamma <= 0:
        return {**out, "gamma": gamma, "bound": None, "separable": False}
    # (R / gamma)^2, not R^2 / gamma^2: gamma^2 may underflow to 0. A bound past the largest
    # double is none (null) rather than infinity, which JSON cannot carry.
    bound = (radius / gamma) ** 2 if radius / gamma < 1e150 else None
    return {**out, "gamma": gamma, "bound": bound, "separable": True}


def _norm(*parts: Any) -> float:
    """The Euclidean norm of the values together, without overflow or underflow on the way:
    scaled by the largest magnitude first (weights reach 1e250, whose square is no double)."""
    v = np.concatenate([np.ravel(np.asarray(p, dtype=np.float64)) for p in parts])
    top = float(np.abs(v).max()) if v.size else 0.0
    if top == 0.0 or not math.isfinite(top):
        return top
    return top * float(np.sqrt(((v / top) ** 2).sum()))


def weight_norm(weights: Weights) -> float:
    return _norm(weights.w, weights.b)


def delay_counts(delays: dict[str, int]) -> list[int]:
    """Labels per bucket of DELAY_BUCKETS_S, and past the last, from a model's ``delays``."""
    return [delays.get(str(i), 0) for i in range(len(DELAY_BUCKETS_S) + 1)]


def delay_quantile(delays: dict[str, int], q: float) -> float | None:
    """The ``q`` quantile of the delay from prediction to label, in seconds, interpolated
    within its bucket as Prometheus's histogram_quantile does (None: no label counted; past
    the last bucket: its bound)."""
    counts = delay_counts(delays)
    total = sum(counts)
    if not total:
        return None
    rank, below, lower = q * total, 0, 0.0
    for bound, n in zip(DELAY_BUCKETS_S, counts, strict=False):
        if n and below + n >= rank:
            return lower + (bound - lower) * (rank - below) / n
        below, lower = below + n, float(bound)
    return float(DELAY_BUCKETS_S[-1])


def without_defaults(counters: dict[str, int]) -> float | None:
    """The mistake rate over the labels that came (the defaulted left out)."""
    n = counters.get("seen", 0) - counters.get("defaulted", 0)
    m = counters.get("mistakes", 0) - counters.get("defaulted_mistakes", 0)
    return m / n if n > 0 else None


def defaulted_share(counters: dict[str, int]) -> float | None:
    """The share of the served predictions' labels that came by default."""
    d = counters.get("defaulted", 0)
    n = counters.get("feedback", 0) + d
    return d / n if n else None
