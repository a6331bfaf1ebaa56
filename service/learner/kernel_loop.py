"""The kernel's loop in machine code (numba), imported by ``kernel.py`` at its first use: the
rules of ``kernel.py``'s docstring, one function a part of them."""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any

import llvmlite.binding
import numba
import numpy as np
from numba import types

from service.learner.interface import MAX_WEIGHT

njit = numba.njit(cache=True, nogil=True)


def _numpy_ddot() -> Any:
    """numpy's own BLAS ``ddot`` (what ``ndarray.dot`` of two vectors calls), by its symbol:
    its library loaded for the compiled code to link with (so numba can cache that code)."""
    here = os.path.dirname(np.__file__)
    for pattern in ("../numpy.libs/libscipy_openblas*", ".dylibs/libscipy_openblas*"):
        for path in sorted(glob.glob(os.path.join(here, pattern))):
            lib = ctypes.CDLL(path)
            for name in ("scipy_cblas_ddot64_", "scipy_cblas_ddot"):
                if hasattr(lib, name):
                    llvmlite.binding.load_library_permanently(path)
                    args = (types.int64, types.voidptr, types.int64, types.voidptr, types.int64)
                    return types.ExternalFunction(name, types.float64(*args))
    raise ImportError("numpy's BLAS ddot was not found")


ddot = _numpy_ddot()


@njit
def blas_score(w: Any, b: float, x: Any, tmp: Any) -> float:
    """``w.x + b`` as numpy computes ``w.dot(x) + b`` (its BLAS ddot); ``x``: an example's
    values, their indices and whether it is dense."""
    v, ix, dense = x
    n = v.shape[0]
    if n == 0:
        return 0.0 + b
    if dense:
        return float(ddot(n, w.ctypes.data, 1, v.ctypes.data, 1)) + b
    for j in range(n):
        tmp[j] = w[ix[j]]
    return float(ddot(n, tmp.ctypes.data, 1, v.ctypes.data, 1)) + b


@njit
def averaged_score(state: Any, r: int, seen: int, x: Any, tmp: Any) -> float:
    """Row ``r``'s served score of an averaged perceptron after ``seen`` examples: numpy's
    ``(w - wsum / seen).dot(x) + (b - bsum / seen)`` (its BLAS ddot)."""
    w, b, wsum, bsum = state
    v, ix, dense = x
    n = v.shape[0]
    for j in range(n):
        k = j if dense else ix[j]
        tmp[j] = w[r, k] - wsum[r, k] / seen
    bias = b[r] - bsum[r] / seen
    if n == 0:
        return float(0.0 + bias)
    return float(ddot(n, tmp.ctypes.data, 1, v.ctypes.data, 1) + bias)


@njit
def sequential_score(w: Any, b: float, x: Any) -> float:
    """``w.x + b``, the dot product summed term by term in feature order."""
    v, ix, dense = x
    s = 0.0
    if dense:
        for j in range(v.shape[0]):
            s += w[j] * v[j]
    else:
        for j in range(v.shape[0]):
            s += w[ix[j]] * v[j]
    return s + b


@njit
def gradient(y: float, p: float) -> float:
    """Logistic regression's: the half binomial loss's derivative, clipped (logistic.py)."""
    if p > -37:
        e = np.exp(-p)
        g = ((1 - y) - y * e) / (1 + e)
    else:
        g = np.exp(p) - y
    return float(min(max(g, -1e12), 1e12))


@njit
def step(rule: tuple[int, float, float, bool], positive: bool, p: float, sq: float) -> float:
    """One row's coefficient ``c`` (0: it does not move) for score ``p``."""
    code, a, c2, fit_bias = rule
    y = 1.0 if positive else -1.0
    if code == 0:  # the perceptron: a learning rate, a margin
        return a * y if y * p <= c2 else 0.0
    if code == 3:  # logistic regression: its step
        return -a * gradient(1.0 if positive else 0.0, p)
    loss = 1.0 - y * p  # PA-I (1), PA-II (2): C
    if not loss > 0 or (sq == 0 and not fit_bias):
        return 0.0
    if code == 1:
        return min(a, loss / sq) * y if sq != 0 else 0.0
    return (loss / (sq + 0.5 / a)) * y


@njit
def within(w: Any, b: Any, coefs: Any, x: Any, fit_bias: bool) -> bool:
    """Whether every weight and bias the steps move stays within MAX_WEIGHT."""
    v, ix, dense = x
    for r in range(w.shape[0]):
        c = coefs[r]
        if c == 0:
            continue
        for j in range(v.shape[0]):
            k = j if dense else ix[j]
            if not abs(w[r, k] + c * v[j]) <= MAX_WEIGHT:
                return False
        if fit_bias and not abs(b[r] + c) <= MAX_WEIGHT:
            return False
    return True


@njit
def add(state: Any, coefs: Any, x: Any, fit_bias: bool, age: float) -> None:
    """``w += c * x`` and ``b += c`` for each row's ``c``; an averaged perceptron's sums too,
    ``wsum += age * (c * x)`` and ``bsum += age * c`` (``age``: the examples before)."""
    w, b, wsum, bsum = state
    averaged = wsum.shape[0] > 0
    v, ix, dense = x
    for r in range(w.shape[0]):
        c = coefs[r]
        if c == 0:
            continue
        for j in range(v.shape[0]):
            k = j if dense else ix[j]
            delta = c * v[j]
            w[r, k] += delta
            if averaged:
                wsum[r, k] += age * delta
        if fit_bias:
            b[r] += c
            if averaged:
                bsum[r] += age * c


@njit
def predict(raw: Any) -> int:
    """The class index: binary, 1 iff the score > 0; else the first highest score's row."""
    if raw.shape[0] == 1:
        return 1 if raw[0] > 0 else 0
    best = 0
    for r in range(raw.shape[0]):
        if raw[r] > raw[best]:
            best = r
    return best


@njit
def learn(rule: Any, weights: Any, examples: Any, labels: Any, out: Any) -> int:
    """Learn each example in order (``kernel.learn_sequence`` says what each part holds);
    the count of updates made."""
    code, _, _, fit_bias = rule
    w, b, wsum, bsum, seen = weights
    state = (w, b, wsum, bsum)
    averaged = wsum.shape[0] > 0
    ts, apply_last = labels
    values, index, offsets, dense = examples
    predicted, updated, raws, last = out
    rows, n = w.shape[0], ts.shape[0]
    tmp = np.empty(values.shape[0])
    coefs = np.zeros(rows)
    served = np.zeros(rows)
    moves = 0
    for i in range(n):
        v = values[offsets[i] : offsets[i + 1]]
        ix = index[offsets[i] : offsets[i + 1]] if not dense else index[:0]
        x = (v, ix, dense)
        for r in range(rows):
            if code == 0:
                raws[i, r] = blas_score(w[r], b[r], x, tmp)
            else:
                raws[i, r] = sequential_score(w[r], b[r], x)
        if averaged and seen + i > 0:  # served: the mean of the weights so far
            for r in range(rows):
                served[r] = averaged_score(state, r, seen + i, x, tmp)
            predicted[i] = predict(served)
        else:
            predicted[i] = predict(raws[i])
        sq = 0.0
        if code == 1 or code == 2:
            for j in range(v.shape[0]):
                sq += v[j] * v[j]
        moved = False
        for r in range(rows):
            positive = (ts[i] == 1) if rows == 1 else (ts[i] == r)
            coefs[r] = step(rule, positive, raws[i, r], sq)
            moved = moved or coefs[r] != 0
        if moved and code != 0:
            moved = within(w, b, coefs, x, fit_bias)
        updated[i] = moved
        if moved and i == n - 1 and not apply_last:
            last[:] = coefs
        elif moved:
            add(state, coefs, x, fit_bias, float(seen + i))
            moves += 1
    return moves
