"""The datasets a replay streams: CSV files, or one bundled with a package (LIBSVM files:
libsvm.py).

scikit-learn's breast_cancer, digits, iris, wine; River's Phishing (the ``replay`` extra);
and ``turning``, made here: a stream whose concept turns halfway (``turning_stream``).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perceptron_client import Label
from service.learner.features import MAX_ABS_VALUE
from service.replay.replay_error import ReplayError

DATASETS = ("breast_cancer", "digits", "iris", "wine", "phishing", "turning")


@dataclass(frozen=True)
class Dataset:
    """Dense examples (rows of floats) and their labels, in file order."""

    name: str
    rows: list[list[float]]
    labels: Sequence[Label]

    def __post_init__(self) -> None:
        if not self.rows:
            raise ReplayError(f"The dataset {self.name!r} has no examples.")
        if len(self.rows) != len(self.labels):
            raise ReplayError(f"{len(self.rows)} examples but {len(self.labels)} labels.")
        width = len(self.rows[0])
        if width == 0 or any(len(r) != width for r in self.rows):
            raise ReplayError(f"The examples of {self.name!r} are not all of one length >= 1.")
        kinds = {type(y) for y in self.labels}
        if len(kinds) > 1:
            raise ReplayError(f"The labels of {self.name!r} mix numbers and strings.")
        large = np.flatnonzero((np.abs(np.asarray(self.rows, dtype=float)) > MAX_ABS_VALUE).any(1))
        if large.size:  # (refused before anything is sent, as the service would refuse it)
            raise ReplayError(
                f"Example {large[0] + 1} of {self.name!r} has a value past +-{MAX_ABS_VALUE:g}, "
                "the largest the service takes."
            )

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def n_features(self) -> int:
        return len(self.rows[0])

    @property
    def classes(self) -> list[Label]:
        """The distinct labels, sorted (so a binary model's positive class is the larger)."""
        return sorted(set(self.labels))  # one kind of label, checked above

    def shuffled(self, seed: int) -> Dataset:
        order = np.random.default_rng(seed).permutation(len(self.rows)).tolist()
        return Dataset(self.name, [self.rows[i] for i in order], [self.labels[i] for i in order])

    def head(self, n: int) -> Dataset:
        return Dataset(self.name, self.rows[:n], self.labels[:n])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def labels_from_text(raw: Sequence[str]) -> list[Label]:
    """Integers when every label is an integer ("1", "-1", "+1", "2.0"); strings otherwise."""
    ints: list[Label] = []
    for text in raw:
        try:
            value = float(text)
        except ValueError:
            return [t.strip() for t in raw]
        if not math.isfinite(value) or value != int(value):
            return [t.strip() for t in raw]
        ints.append(int(value))
    return ints


def _feature(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ReplayError(f"{where}: {text!r} is not a number.") from None
    if not math.isfinite(value):
        raise ReplayError(f"{where}: {text!r} is not a finite number.")
    return value


def model_name_for(stem: str) -> str:
    """A valid model name (1-64 of letters, digits, ``_-.``) made from a file's name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:64].strip(".") or "replay"


def load_csv(path: str | Path, label_column: str | int | None = None) -> Dataset:
    """A CSV file: every column a number but the label's (by name or index; default last).

    The first row is a header when the label column is given by name, or when one of its
    feature fields is not a number.
    """
    path = Path(path)
    with path.open(newline="", encoding="utf-8-sig") as f:
        records = [
            (n, row) for n, row in enumerate(csv.reader(f), 1) if any(c.strip() for c in row)
        ]
    if not records:
        raise ReplayError(f"{path}: no rows.")
    first = records[0][1]
    width = len(first)
    if width < 2:
        raise ReplayError(f"{path}: a row needs at least one feature and a label.")

    def index_of(column: int) -> int:
        if not -width <= column < width:
            raise ReplayError(f"{path}: no column {column} (rows have {width}).")
        return column % width

    column = label_column if label_column is not None else -1
    by_name = isinstance(column, str) and not re.fullmatch(r"[+-]?\d+", column.strip())
    if by_name:
        names = [c.strip() for c in first]
        if str(column).strip() not in names:
            raise ReplayError(f"{path}: no column named {column!r} in the header {names}.")
        label_at = names.index(str(column).strip())
        header = True
    else:
        label_at = index_of(int(column))
        header = any(not _is_number(c) for i, c in enumerate(first) if i != label_at)
    body = records[1:] if header else records
    if not body:
        raise ReplayError(f"{path}: a header but no examples.")
    rows, raw = [], []
    for n, row in body:
        if len(row) != width:
            raise ReplayError(f"{path}, line {n}: {len(row)} fields, the first row has {width}.")
        rows.append([_feature(c, f"{path}, line {n}") for i, c in enumerate(row) if i != label_at])
        raw.append(row[label_at].strip())
    return Dataset(model_name_for(path.stem), rows, labels_from_text(raw))


def turning_stream(n: int = 12_000, d: int = 10, degrees: float = 70.0, seed: int = 0) -> Dataset:
    """``n`` examples of ``d`` standard normal features, labelled -1 or 1 by the side of a
    hyperplane through the origin that turns by ``degrees`` after the first half, 5% of the
    labels flipped at random: a concept drift, the same stream for the same arguments."""
    rng = np.random.default_rng(seed)
    before = rng.normal(size=d)
    before /= np.linalg.norm(before)
    across = rng.normal(size=d)
    across -= (across @ before) * before
    across /= np.linalg.norm(across)
    angle = math.radians(degrees)
    after = math.cos(angle) * before + math.sin(angle) * across
    xs = rng.normal(size=(n, d)).round(4)
    normals = np.where(np.arange(n)[:, None] < n // 2, before, after)
    ys = np.where(np.einsum("ij,ij->i", xs, normals) > 0, 1, -1)
    ys[rng.random(n) < 0.05] *= -1
    return Dataset("turning", xs.tolist(), [int(v) for v in ys])


def load_dataset(name: str) -> Dataset:
    """A dataset bundled with an installed package (no download), or made here: see
    ``DATASETS``."""
    key = name.strip().lower()
    if key == "turning":
        return turning_stream()
    if key == "phishing":
        try:
            from river.datasets import Phishing
        except ImportError as e:
            raise ReplayError(
                "The Phishing dataset comes with River: pip install 'perceptron-service[replay]'."
            ) from e
        rows: list[list[float]] = []
        labels: list[Label] = []
        for x, y in Phishing():
            rows.append([float(v) for v in x.values()])
            labels.append(int(y))
        return Dataset("phishing", rows, labels)
    if key not in DATASETS:
        raise ReplayError(f"Unknown dataset {name!r}; bundled: {', '.join(DATASETS)}.")
    try:
        from sklearn import datasets
    except ImportError as e:
        raise ReplayError(
            f"The {key} dataset comes with scikit-learn: pip install 'perceptron-service[replay]'."
        ) from e
    X, y = getattr(datasets, f"load_{key}")(return_X_y=True)
    return Dataset(key, X.astype(float).tolist(), [int(v) for v in y])
