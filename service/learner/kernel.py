"""The learners' compiled kernel: a sequence of examples learned in order, one loop in machine
code (numba), for every learner whose rows learn apart from one another.

A learner opts in with a ``KernelRule`` (``Learner.kernel``): its rule's code below and its
numbers; the others (the multiclass perceptron and PA, one-vs-one, a perceptron of more than
two classes, AROW) learn through their Python update plans. The kernel makes the same
floating-point operations in the same order as those plans, so both give the same predictions,
updates and weights bit for bit (tests/test_kernel.py compares them on every learner it takes):

- scores: each row's ``w.x + b``; the perceptron's dot product is numpy's own (its BLAS
  ``ddot``, called here), the others' summed term by term in feature order; an averaged
  perceptron serves ``(w - wsum / seen).x + (b - bsum / seen)`` and keeps its sums
  (``perceptron.py``);
- the rule of each row (binary: one row, ``y = +1`` for class 1; one-vs-rest: one per class);
- a plan that would take a weight beyond ``MAX_WEIGHT`` is not made (PA and logistic);
- each update ``w += c * x``, ``b += c`` (without ``fit_bias``, ``b`` stays).

An example is a row of a dense matrix or a run of a sparse one (``values``, ``index`` and
``offsets``, as scipy's CSR). Compiled once per machine (numba's cache, beside this module or
in ``NUMBA_CACHE_DIR``); where numba cannot be imported the plans are used, which give the same.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from service.learner.drift_detectors import DDM, Detector, Status, feed
from service.learner.features import Example, Rows

log = logging.getLogger("perceptron")

PERCEPTRON, PA1, PA2, LOGISTIC = 0, 1, 2, 3  # the rules the kernel knows


@dataclass(frozen=True)
class KernelRule:
    """A learner's rule as the kernel takes it: its code and its numbers (the perceptron's
    learning rate and margin; PA's C; logistic regression's step)."""

    code: int
    a: float = 0.0
    b: float = 0.0


def _compile() -> Any:
    """The compiled loop, or None where numba (or numpy's ddot) is not there."""
    try:
        from service.learner import kernel_loop
    except Exception as e:  # pragma: no cover (numba missing, or no place for its cache)
        log.warning("the learners learn without their compiled kernel (the same bits): %s", e)
        return None
    return kernel_loop.learn


_LEARN: Any = None
_TRIED = False


def load() -> None:
    """Load the kernel now (numba and its compiled loops, the learners' and the drift
    detectors': compiled here the first time on a machine, read from numba's cache after), so
    that the first batch learned does not wait for it and a worker's start-up heap, which is
    frozen, holds numba's objects."""
    drift_feed(DDM(), DDM().start(), np.zeros(1, dtype=np.bool_))
    learn = compiled()
    if learn is not None:
        # Both forms of values learned: arrays of the service's own, and values read in place
        # from a request or a log entry (read-only), which numba compiles apart; compiling
        # one in a serving worker would hold its interpreter for seconds.
        for values in (np.zeros(1), np.frombuffer(bytes(8))):
            one = Packed(values, np.zeros(0, dtype=np.int64), np.array([0, 1]), True)
            learn_sequence(
                KernelRule(PERCEPTRON, 1.0),
                True,
                _Weights(np.zeros((1, 1)), np.zeros(1)),
                xs=one,
                ts=[1],
            )


@dataclass
class _Weights:
    w: np.ndarray
    b: np.ndarray
    version: int = 0


def _compile_drift() -> Any:
    """The drift detectors' compiled loop, or None where numba (or C's powf64) is not there."""
    try:
        from service.learner import drift_loop
    except Exception as e:  # pragma: no cover (numba or powf64 missing, or no cache's place)
        log.warning("the drift detectors run without their compiled loop (the same bits): %s", e)
        return None
    return drift_loop


def drift_feed(
    detector: Detector, state: list[float], marks: np.ndarray
) -> tuple[list[float], list[tuple[int, Status]]]:
    """``drift_detectors.feed`` of a run of marks (booleans, True a mistake): through the
    compiled loop where there is one (the same bits; ``drift_loop.py``), else in Python."""
    global _DRIFT, _DRIFT_TRIED
    if not _DRIFT_TRIED:
        _DRIFT_TRIED = True
        _DRIFT = _compile_drift()
    if _DRIFT is None:
        return feed(detector, state, [int(m) for m in marks])
    st = np.array(state, dtype=np.float64)
    events = np.empty((2 * len(marks), 2), dtype=np.int64)
    params = np.array([getattr(detector, f.name) for f in fields(detector)], dtype=np.float64)
    which = _DRIFT.DDM if detector.name == "ddm" else _DRIFT.EDDM
    k = _DRIFT.feed(which, params, st, np.array(marks, dtype=np.bool_), events)  # (writable)
    kinds: dict[int, Status] = {_DRIFT.WARNING: "warning", _DRIFT.DRIFT: "drift"}
    return st.tolist(), [(int(at), kinds[int(kind)]) for at, kind in events[:k]]


_DRIFT: Any = None
_DRIFT_TRIED = False


def compiled() -> Any:
    """The kernel's loop, compiled at its first use in a process (None: not available)."""
    global _LEARN, _TRIED
    if not _TRIED:
        _TRIED = True
        _LEARN = _compile()
    return _LEARN


@dataclass
class Learned:
    """What the kernel did to a sequence: each example's predicted class index, whether it
    updated, its raw scores (one row per example), the updates made, and the last example's
    step per row where it was not applied (None: applied, or no update)."""

    predicted: np.ndarray
    updated: np.ndarray
    raws: np.ndarray
    moves: int
    last: np.ndarray | None


@dataclass(frozen=True)
class Packed:
    """A sequence of examples of one model as the kernel reads them: every value in order,
    their bucket indices (named features; empty for dense ones), and where each example's
    start (``offsets``, one more than the examples)."""

    values: np.ndarray
    index: np.ndarray
    offsets: np.ndarray
    dense: bool

    @classmethod
    def of(cls, xs: Sequence[Any]) -> Packed:
        n = len(xs)
        if isinstance(xs, Rows):  # (a packed batch's matrix, as it is)
            d = xs.matrix.shape[1]
            values = np.ascontiguousarray(xs.matrix).reshape(-1)
            offsets = np.arange(n + 1, dtype=np.int64) * d
            return cls(values, np.zeros(0, dtype=np.int64), offsets, True)
        dense = n == 0 or xs[0].index is None
        values = np.concatenate([x.values for x in xs]) if n else np.zeros(0)
        empty = np.zeros(0, dtype=np.int64)
        if dense:  # (every example of a dense model has its n_features values)
            offsets = np.arange(n + 1, dtype=np.int64) * (len(values) // max(n, 1))
            return cls(values, empty, offsets, True)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(x.values) for x in xs], out=offsets[1:])
        index = empty if dense else np.concatenate([x.index for x in xs]).astype(np.int64)
        return cls(values, index, offsets, dense)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def examples(self) -> list[Example]:
        """The examples one by one."""
        out = []
        for i in range(len(self)):
            start, end = self.offsets[i], self.offsets[i + 1]
            index = None if self.dense else self.index[start:end]
            out.append(Example(self.values[start:end], index))
        return out

    def since(self, at: int) -> Packed:
        """The examples from the ``at``-th on."""
        start = self.offsets[at]
        index = self.index if self.dense else self.index[start:]
        return Packed(self.values[start:], index, self.offsets[at:] - start, self.dense)


def learn_sequence(
    rule: KernelRule,
    fit_bias: bool,
    weights: Any,
    *,
    xs: Sequence[Any] | Packed,
    ts: Any,
    apply_last: bool = True,
) -> Learned | None:
    """Learn ``xs`` (examples of one model, or them packed) with true class indices ``ts`` in
    order on ``weights`` (a ``Weights``), in place, through the kernel; the last example's
    update only with ``apply_last``. None where the kernel is not available."""
    learn = compiled()
    if learn is None:
        return None
    packed = xs if isinstance(xs, Packed) else Packed.of(xs)
    n = len(packed)
    rows = weights.w.shape[0]
    predicted = np.zeros(n, dtype=np.int64)
    updated = np.zeros(n, dtype=np.bool_)
    raws = np.zeros((n, rows))
    last = np.zeros(rows)
    # (indices and labels writable, whatever they were read from: one compiled form of each)
    index = packed.index if packed.index.flags.writeable else packed.index.copy()
    examples = (packed.values, index, np.array(packed.offsets, dtype=np.int64), packed.dense)
    labels = (np.array(ts, dtype=np.int64), apply_last)
    rule_of = (rule.code, rule.a, rule.b, fit_bias)
    kept = getattr(weights, "state", {})  # an averaged perceptron's sums, else none
    wsum, bsum = kept.get("wsum", np.zeros((0, 0))), kept.get("bsum", np.zeros(0))
    state = (weights.w, weights.b, wsum, bsum, int(getattr(weights, "seen", 0)))
    moves = learn(rule_of, state, examples, labels, (predicted, updated, raws, last))
    weights.version += moves
    held = not apply_last and n > 0 and bool(updated[-1])
    return Learned(predicted, updated, raws, moves, last if held else None)
