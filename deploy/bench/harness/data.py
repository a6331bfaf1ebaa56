"""The examples the benchmarks send, and the files wrk reads its bodies from (one a line):
benchmark.py's (``make_data``), and the dense d=100 bodies of the other commands (packed
batches, /learn, /predict and /feedback files)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.client import call, dumps
from harness.common import BATCH, DIM

PREDICTIONS = 60_000  # fresh ids for one run's /feedback (feedback_bodies): more than it can send


def r4(a: np.ndarray) -> list[float]:
    return [float(v) for v in np.round(a, 4)]


@dataclass
class Data:
    dense_x: np.ndarray  # (n, 100)
    dense_y: list[int]
    mnist_x: np.ndarray  # (n, 784) ints
    mnist_y: list[int]
    named_x: list[dict[str, float]]
    named_y: list[int]


def make_data(seed: int = 7) -> Data:
    """Dense d=100 from a noisy linear teacher, MNIST-like d=784 (80% zeros) with 10 classes,
    and named features (50 of 200,000 names per example)."""
    rng = np.random.default_rng(seed)
    n = 16_000
    x = rng.uniform(-1, 1, size=(n, 100)).round(4)
    w = rng.normal(size=100)
    y = np.where(x @ w + 0.1 > 0, 1, -1)
    flip = rng.random(n) < 0.05
    y[flip] = -y[flip]
    m = 2_000
    mx = np.where(rng.random((m, 784)) < 0.2, rng.integers(1, 256, size=(m, 784)), 0)
    wm = rng.normal(size=(10, 784))
    my = np.argmax(mx @ wm.T, axis=1)
    flip = rng.random(m) < 0.05
    my[flip] = rng.integers(0, 10, size=int(flip.sum()))
    k = 2_000
    vocab = 200_000
    teacher = rng.normal(size=vocab)
    named_x, named_y = [], []
    for _ in range(k):
        ids = rng.choice(vocab, size=50, replace=False)
        vals = rng.uniform(0.1, 2.0, size=50).round(3)
        named_x.append({f"tok{i:06d}": float(v) for i, v in zip(ids, vals, strict=True)})
        s = float(teacher[ids] @ vals)
        named_y.append(1 if s > 0 else -1)
    return Data(x, [int(v) for v in y], mx, [int(v) for v in my], named_x, named_y)


def write_lines(path: Path, lines: Sequence[bytes]) -> Path:
    with open(path, "wb") as f:
        for line in lines:
            f.write(line + b"\n")
    return path


def feedback_files(
    tmp: Path, threads: int, tag: str, preds: list[dict[str, Any]], against: Callable[[Any], Any]
) -> str:
    """Feedback bodies (label chosen against each prediction) split into one file per wrk
    thread: the pattern of their paths, ``%d`` for the thread."""
    lines = [
        dumps({"prediction_id": p["prediction_id"], "label": against(p["label"])}) for p in preds
    ]
    per = (len(lines) + threads - 1) // threads
    for t in range(threads):
        write_lines(tmp / f"{tag}.{t}", lines[t * per : (t + 1) * per])
    return str(tmp / f"{tag}.%d")


def packed_bodies(seed: int, n: int = 8, model: str = "w") -> list[bytes]:
    """Packed batches (BATCH x DIM) of a linearly separable problem with some noise (updates
    throughout), for ``model``."""
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(0).normal(size=DIM)
    out = []
    for _ in range(n):
        x = rng.normal(size=(BATCH, DIM))
        y = np.where(x @ truth + rng.normal(scale=2.0, size=BATCH) > 0, 1, -1)
        packed = base64.b64encode(x.astype("<f8").tobytes()).decode()
        out.append(
            json.dumps({"model": model, "packed_features": packed, "labels": y.tolist()}).encode()
        )
    return out


def learn_bodies(path: Path, model: str = "m") -> Path:
    """2,000 /learn bodies of one example each, a noisy linear teacher's, written to ``path``."""
    rng = np.random.default_rng(1)
    truth = np.random.default_rng(0).normal(size=DIM)
    with path.open("w") as f:
        for _ in range(2000):
            x = rng.normal(size=DIM).round(4)
            y = 1 if float(x @ truth) + rng.normal(scale=2.0) > 0 else -1
            f.write(json.dumps({"model": model, "features": x.tolist(), "label": y}) + "\n")
    return path


def predict_bodies(path: Path) -> Path:
    """2,000 /predict bodies of model ``m``, one example each, written to ``path``."""
    rng = np.random.default_rng(3)
    with path.open("w") as f:
        for _ in range(2000):
            x = rng.normal(size=DIM).round(4).tolist()
            f.write(json.dumps({"model": "m", "features": x}) + "\n")
    return path


def feedback_bodies(port: int, path: Path, wrong: float) -> Path:
    """One /feedback body per fresh prediction of model ``m`` (PREDICTIONS of them), its label
    the other class for a share ``wrong`` of them (each an update), the class served for the
    rest (none an update: the model is taught first, so that no score is 0, where either label
    updates)."""
    rng = np.random.default_rng(2)
    if wrong < 1:
        truth = np.random.default_rng(0).normal(size=DIM)
        xs = rng.normal(size=(1000, DIM)).round(4)
        ys = np.where(xs @ truth > 0, 1, -1).tolist()
        body = {"model": "m", "features": xs.tolist(), "labels": ys}
        assert call(port, "POST", "/learn/batch", body)[0] == 200
    with path.open("w") as f:
        for _ in range(PREDICTIONS // 1000):
            xs = rng.normal(size=(1000, DIM)).round(4).tolist()
            status, data = call(port, "POST", "/predict/batch", {"model": "m", "features": xs})
            assert status == 200, data
            for p in json.loads(data)["predictions"]:
                against = rng.random() < wrong
                label = (-1 if p["label"] == 1 else 1) if against else p["label"]
                f.write(json.dumps({"prediction_id": p["prediction_id"], "label": label}) + "\n")
    return path
