"""The examples the benchmark sends, and the files wrk reads its bodies from (one a line)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.client import dumps


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
