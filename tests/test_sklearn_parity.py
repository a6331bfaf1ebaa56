"""Replaying real datasets through POST /learn matches sklearn's Perceptron bit for bit.

Each dataset is fed to the service one example at a time, in file order, and to
``sklearn.linear_model.Perceptron()`` (default parameters) one ``partial_fit`` at a time. The
label the service answers for row ``i`` (its prediction before learning the row) must equal
sklearn's ``predict`` on row ``i`` before its ``partial_fit`` of that row (``classes[0]`` for
row 0, when sklearn is still unfitted), and the final weights and biases must be equal exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.linear_model import Perceptron


@dataclass(frozen=True)
class Dataset:
    X: np.ndarray  # (rows, features), float64
    y: np.ndarray  # (rows,), int labels
    classes: list[int]
    multiclass: str = "multiclass"


def breast_cancer() -> Dataset:
    X, y = load_breast_cancer(return_X_y=True)
    return Dataset(X=X, y=y, classes=[0, 1])


def digits() -> Dataset:
    X, y = load_digits(return_X_y=True)
    return Dataset(X=X, y=y, classes=list(range(10)), multiclass="ovr")


def phishing() -> Dataset:
    from river.datasets import Phishing  # bundled with river: no download

    rows = list(Phishing())
    keys = list(rows[0][0])
    assert all(list(x) == keys for x, _ in rows), "Phishing rows differ in their keys' order"
    X = np.array([[float(x[k]) for k in keys] for x, _ in rows])
    y = np.array([int(label) for _, label in rows])
    return Dataset(X=X, y=y, classes=[0, 1])


@dataclass(frozen=True)
class Replay:
    predictions: np.ndarray  # the label predicted for each row before learning it
    mistakes: int
    coef: np.ndarray  # (weight rows, features)
    intercept: np.ndarray  # (weight rows,)


def replay_sklearn(data: Dataset, clf: Any = None) -> Replay:
    """``clf`` (a Perceptron by default) fed one example at a time, in order (partial_fit),
    each predicted just before it learns it (the first: the first class)."""
    clf = Perceptron() if clf is None else clf
    classes = np.array(data.classes)
    predictions = np.empty(len(data.y), dtype=np.int64)
    for i, (x, y) in enumerate(zip(data.X, data.y, strict=True)):
        row = x.reshape(1, -1)
        predictions[i] = classes[0] if i == 0 else clf.predict(row)[0]
        clf.partial_fit(row, [y], classes=classes)
    return Replay(
        predictions=predictions,
        mistakes=int(np.sum(predictions != data.y)),
        coef=clf.coef_,
        intercept=clf.intercept_,
    )


def replay_service(client: httpx.Client, name: str, data: Dataset) -> Replay:
    spec = {"classes": data.classes, "n_features": data.X.shape[1], "multiclass": data.multiclass}
    r = client.put(f"/models/{name}", json=spec)
    assert r.status_code == 201, r.text

    labels, mistakes = [], 0
    for x, y in zip(data.X.tolist(), data.y.tolist(), strict=True):
        r = client.post("/learn", json={"model": name, "features": x, "label": y})
        assert r.status_code == 200, r.text
        body = r.json()
        labels.append(body["label"])
        mistakes += body["mistake"]

    rows = client.get(f"/models/{name}/weights").json()["rows"]
    expected_targets = [str(data.classes[1])] if len(data.classes) == 2 else data.classes
    assert [row["target"] for row in rows] == [str(t) for t in expected_targets]
    return Replay(
        predictions=np.array(labels, dtype=np.int64),
        mistakes=mistakes,
        coef=np.array([row["weights"] for row in rows], dtype=np.float64),
        intercept=np.array([row["bias"] for row in rows], dtype=np.float64),
    )


@pytest.mark.parametrize(
    "load",
    [
        pytest.param(breast_cancer, id="breast_cancer"),
        pytest.param(digits, id="digits-ovr"),
        pytest.param(phishing, id="river-phishing"),
    ],
)
def test_replay_matches_sklearn_perceptron(
    client: httpx.Client, load: Callable[[], Dataset]
) -> None:
    data = load()
    expected = replay_sklearn(data)
    got = replay_service(client, "parity", data)

    diverged = np.flatnonzero(got.predictions != expected.predictions)
    assert diverged.size == 0, (
        f"first divergence at row {diverged[0]}: service predicted "
        f"{got.predictions[diverged[0]]}, sklearn {expected.predictions[diverged[0]]}"
    )
    assert np.array_equal(got.predictions, expected.predictions)
    assert got.coef.shape == expected.coef.shape == (len(expected.intercept), data.X.shape[1])
    assert np.array_equal(got.coef, expected.coef)
    assert np.array_equal(got.intercept, expected.intercept)

    assert 0 < expected.mistakes < len(data.y)
    assert got.mistakes == expected.mistakes
    counters = client.get("/models/parity").json()["counters"]
    assert counters["mistakes"] == expected.mistakes
