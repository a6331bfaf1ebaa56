"""The learners' compiled kernel: a sequence of examples learned in order, one loop in machine
code (numba), for every learner whose rows learn apart from one another.

A learner opts in with a ``KernelRule`` (``Learner.kernel``): its rule's code below and its
numbers; the others (the multiclass perceptron and PA, one-vs-one, averaged perceptrons, AROW)
learn through their Python update plans. The kernel makes the same floating-point operations
in the same order as those plans, so both give the same predictions, updates and weights bit
for bit (tests/test_kernel.py compares them on every learner it takes):

- scores: each row's ``w.x + b``; the perceptron's dot product is numpy's own (its BLAS
  ``ddot``, called here), the others' summed term by term in feature order;
- the rule of each row (binary: one row, ``y = +1`` for class 1; one-vs-rest: one per class);
- a plan that would take a weight beyond ``MAX_WEIGHT`` is not made (PA and logistic);
- each update ``w += c * x``, ``b += c`` (without ``fit_bias``, ``b`` stays).

An example is a row of a dense matrix or a run of a sparse one (``values``, ``index`` and
``offsets``, as scipy's CSR). Compiled once per machine (numba's cache, beside this module or
in ``NUMBA_CACHE_DIR``); where numba cannot be imported the plans are used, which give the same.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

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


def learn_sequence(
    rule: KernelRule,
    fit_bias: bool,
    weights: Any,
    xs: list[Any],
    ts: Any,
    apply_last: bool = True,
) -> Learned | None:
    """Learn ``xs`` (examples of one model) with true class indices ``ts`` in order on
    ``weights`` (a ``Weights``), in place, through the kernel; the last example's update only
    with ``apply_last``. None where the kernel is not available."""
    learn = compiled()
    if learn is None:
        return None
    n = len(xs)
    dense = n == 0 or xs[0].index is None
    lengths = np.fromiter((x.values.shape[0] for x in xs), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate([x.values for x in xs]) if n else np.zeros(0)
    index = np.zeros(0, dtype=np.int64) if dense else np.concatenate([x.index for x in xs])
    rows = weights.w.shape[0]
    predicted = np.zeros(n, dtype=np.int64)
    updated = np.zeros(n, dtype=np.bool_)
    raws = np.zeros((n, rows))
    last = np.zeros(rows)
    examples = (values, index.astype(np.int64, copy=False), offsets, dense)
    labels = (np.asarray(ts, dtype=np.int64), apply_last)
    rule_of = (rule.code, rule.a, rule.b, fit_bias)
    moves = learn(
        rule_of, (weights.w, weights.b), examples, labels, (predicted, updated, raws, last)
    )
    weights.version += moves
    held = not apply_last and n > 0 and bool(updated[-1])
    return Learned(predicted, updated, raws, moves, last if held else None)
