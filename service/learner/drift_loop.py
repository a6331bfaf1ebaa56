"""The drift detectors' loop in machine code (numba), imported by ``kernel.py`` at its first
use: ``drift_detectors.py``'s detectors, the same floating-point operations in the same order
(River's), on a state of float64 and a run of 0/1 marks at once, so that a challenger's replay
feeds its detector without a Python step per example. EDDM's square root is the C library's
``pow(v, 0.5)``, as Python's ``v ** 0.5`` computes it, called by its other name ``powf64``: a
``pow`` the compiler sees becomes ``sqrt``, which may round otherwise. (Where the C library has
no ``powf64``, this module does not import, and the detectors run in Python: the same bits.)"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import llvmlite.binding
import numba
import numpy as np
from numba import types

njit = numba.njit(cache=True, nogil=True)
DDM, EDDM = 0, 1  # a detector's code
WARNING, DRIFT = 1, 2  # an event's kind (and the status a state holds)
LIBM = "libm.so.6"  # the GNU C library's maths, by its name (finding it would start a process)


def _libm_pow() -> Any:
    """The C library's ``pow``, by its name ``powf64`` (its library loaded for the compiled
    code to link with, so numba can cache that code)."""
    try:
        found = hasattr(ctypes.CDLL(LIBM), "powf64")
    except OSError:
        found = False
    if not found:
        raise ImportError(f"the C library's powf64 was not found ({LIBM})")
    llvmlite.binding.load_library_permanently(LIBM)
    return types.ExternalFunction("powf64", types.float64(types.float64, types.float64))


_pow = _libm_pow()


@njit
def _ddm(st: Any, x: float, warm: float, wt: float, dt: float) -> None:
    if st[0] == 2.0:
        st[0], st[1], st[2], st[3], st[4], st[5] = 0.0, 0.0, 0.0, 0.0, 0.0, np.inf
    st[1] += 1.0
    st[2] += (1.0 / st[1]) * (x - st[2])
    p = st[2]
    s = math.sqrt(p * (1 - p) / st[1])
    if st[1] > warm:
        if p + s <= st[5]:
            st[3], st[4] = p, s
            st[5] = st[3] + st[4]
        st[0] = 1.0 if p + s > st[3] + wt * st[4] else 0.0
        if p + s > st[3] + dt * st[4]:
            st[0] = 2.0


@njit
def _eddm(st: Any, x: float, warm: float, alpha: float, beta: float) -> None:
    if st[0] == 2.0:
        st[:] = 0.0
        st[7] = -1.0
    status, n, last, errors, count, mean, sq, most, warned = (
        st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7], st[8]
    )  # fmt: skip
    n += 1.0
    if x == 1.0:
        errors += 1.0
        distance = n - last
        old = mean
        count += 1.0
        mean += (1.0 / count) * (distance - mean)
        sq += 1.0 * (distance - old) * (distance - mean)
        if n > warm:
            deviation = _pow(sq / (count - 1) if count > 1 else 0.0, 0.5)
            p2s = mean + 2 * deviation
            if p2s > most:
                most = p2s
            elif errors > warm:
                level = p2s / most
                if level < beta:
                    status = 2.0
                elif level < alpha:
                    warned = 1.0
                else:
                    warned = 0.0
        last = n
    if status != 2.0:
        status = 1.0 if warned else 0.0
    st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7], st[8] = (
        status, n, last, errors, count, mean, sq, most, warned
    )  # fmt: skip


@njit
def _flags(code: int, st: Any) -> tuple[bool, bool]:
    if code == DDM:
        return st[0] == 1.0, st[0] == 2.0
    return st[8] == 1.0, st[0] == 2.0


@njit
def feed(code: int, params: Any, st: Any, marks: Any, events: Any) -> int:
    """``st`` (in place) after ``marks`` (1 a mistake) in order, by detector ``code`` of
    ``params`` (warm_start and its two thresholds); each flag raised written to ``events``
    (two rows a mark at most: the mark's place from 1, the kind): how many."""
    warm, a, b = params[0], params[1], params[2]
    warned, drifted = _flags(code, st)
    k = 0
    for i in range(len(marks)):
        x = 1.0 if marks[i] else 0.0
        if code == DDM:
            _ddm(st, x, warm, a, b)
        else:
            _eddm(st, x, warm, a, b)
        w, d = _flags(code, st)
        if w and not warned:
            events[k, 0], events[k, 1] = i + 1, WARNING
            k += 1
        if d and not drifted:
            events[k, 0], events[k, 1] = i + 1, DRIFT
            k += 1
        warned, drifted = w, d
    return k
