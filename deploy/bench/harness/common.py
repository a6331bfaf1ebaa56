"""Paths, constants, the progress log (stderr) and the printed results (stdout) shared by the
benchmarks."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # deploy/bench
ROOT = HERE.parent.parent
LUA = HERE / "wrk_bodies.lua"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "perceptron-bench"
VW_DIR = CACHE / "vowpalwabbit"
PY = sys.executable
NCPU = os.cpu_count() or 1
BLAS_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
}
VW_QUOTED_RR = 55_000.0  # VW daemon, one example per request/response, this kind of machine
VW_QUOTED_STREAM = (140_000.0, 180_000.0)
BATCH = 1000  # examples per /learn/batch and /predict/batch body
DIM = 100  # features of a dense example (d=100)
DISTURBED = 0.10  # a run during which other processes used more than this share of the CPUs
# The service runs with auth on (its default): one admin key, sent with every request (to the
# baseline too, so that both parse the same headers).
API_KEY = "bench-" + os.urandom(12).hex()


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def say(*parts: object, flush: bool = True) -> None:
    """A line of a command's results, on stdout."""
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    if flush:
        sys.stdout.flush()
