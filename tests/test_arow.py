"""AROW (service/learner/arow.py): a learner with a variance per weight, plugged in by its
module. Against a reference written below from docs/conventions.md's update alone, bit for bit,
binary and one-vs-rest on real data; through the service one example a request and in batches;
as a challenger counted exactly; its variances exported, imported, rolled back and promoted.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest

from service.learner import ConfigError, ModelConfig, OnlineLearner

from .test_sklearn_parity import Dataset, breast_cancer, digits, phishing


@dataclass
class Reference:
    """AROW as docs/conventions.md writes it, in plain Python loops."""

    classes: list[Any]
    d: int
    r: float = 1.0
    fit_bias: bool = True

    def __post_init__(self) -> None:
        n = 1 if len(self.classes) == 2 else len(self.classes)
        self.w = [[0.0] * self.d for _ in range(n)]
        self.b = [0.0] * n
        self.s = [[1.0] * self.d for _ in range(n)]
        self.sb = [1.0] * n
        self.updates = 0

    def learn(self, x: list[float], label: Any) -> Any:
        t = self.classes.index(label)
        binary = len(self.classes) == 2
        ys = (
            [1.0 if t == 1 else -1.0]
            if binary
            else [1.0 if k == t else -1.0 for k in range(len(self.w))]
        )
        margins = []
        for k in range(len(self.w)):
            m = 0.0
            for i in range(self.d):
                m += self.w[k][i] * x[i]
            margins.append(m + self.b[k])
        if binary:
            predicted = self.classes[1] if margins[0] > 0 else self.classes[0]
        else:
            predicted = self.classes[margins.index(max(margins))]
        moved = False
        for k, (y, m) in enumerate(zip(ys, margins, strict=True)):
            if y * m >= 1.0:
                continue
            v = 0.0
            for i in range(self.d):
                v += (self.s[k][i] * x[i]) * x[i]
            if self.fit_bias:
                v += self.sb[k]
            beta = 1.0 / (v + self.r)
            c = ((1.0 - y * m) * beta) * y
            for i in range(self.d):
                sx = self.s[k][i] * x[i]
                self.w[k][i] += (c * self.s[k][i]) * x[i]
                self.s[k][i] -= beta * (sx * sx)
            if self.fit_bias:
                self.b[k] += c * self.sb[k]
                self.sb[k] -= beta * (self.sb[k] * self.sb[k])
            moved = True
        self.updates += moved
        return predicted

    def packed(self) -> bytes:
        """The state as an export packs it: weights, biases, variances, the biases'."""
        return np.concatenate([np.ravel(self.w), self.b, np.ravel(self.s), self.sb]).tobytes()


def _config(data: Dataset, r: float) -> ModelConfig:
    multiclass: Any = data.multiclass
    classes = tuple(data.classes)
    n = data.X.shape[1]
    return ModelConfig(classes=classes, n_features=n, multiclass=multiclass, algorithm="arow", r=r)


@pytest.mark.parametrize(
    ("load", "r", "rows"),
    [
        (breast_cancer, 1.0, 569),
        (breast_cancer, 1e-3, 300),
        (phishing, 0.1, 1250),
        (digits, 1.0, 500),
    ],
    ids=["breast_cancer", "breast_cancer-r1e-3", "phishing", "digits-ovr"],
)
def test_the_learner_is_the_reference_bit_for_bit(load: Any, r: float, rows: int) -> None:
    data = load()
    ours, ref = OnlineLearner(_config(data, r)), Reference(data.classes, data.X.shape[1], r)
    for x, y in zip(data.X[:rows].tolist(), data.y[:rows].tolist(), strict=True):
        assert ours.learn(x, y).label == ref.learn(x, y)
    assert np.array_equal(ours.weights.w, np.array(ref.w))
    assert np.array_equal(ours.weights.b, np.array(ref.b))
    assert np.array_equal(ours.weights.state["sigma"], np.array(ref.s))
    assert np.array_equal(ours.weights.state["sigma_bias"], np.array(ref.sb))
    assert ours.weights.version == ref.updates


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"r": 0.0}, "r"),
        ({"r": -1.0}, "r"),
        ({"r": 1e6 * 1.01}, "r"),
        ({"r": True}, "r"),
        ({"C": 0.5}, "C"),
        ({"learning_rate": 0.5}, "learning_rate"),
        ({"classes": (1, 2, 3)}, "multiclass"),
    ],
)
def test_a_setting_out_of_range_or_of_another_learner_is_refused(
    params: dict[str, Any], parameter: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        ModelConfig(algorithm="arow", **params)
    assert caught.value.parameter == parameter


def test_every_update_is_finite_and_every_variance_at_least_zero_at_the_edges() -> None:
    for r in (5e-324, 1e-300, 1.0, 1e6):
        model = OnlineLearner(ModelConfig(n_features=3, algorithm="arow", r=r))
        for i in range(300):
            x = [[1e15, -1e15, 0.0], [5e-324, 0.0, 1e-300], [0.0, 0.0, 0.0]][i % 3]
            model.learn(x, 1 if i % 2 else -1)
            for a in model.weights.arrays():
                assert np.isfinite(a).all()
            assert (model.weights.state["sigma"] >= 0).all()
            assert (model.weights.state["sigma_bias"] >= 0).all()


def test_named_features_update_only_their_variances() -> None:
    model = OnlineLearner(ModelConfig(algorithm="arow", hash_bits=4, fit_bias=False))
    model.learn({"a": 2.0}, 1)
    sigma = model.weights.state["sigma"]
    assert (sigma < 1).sum() == 1 and model.weights.state["sigma_bias"].tolist() == [1.0]


pytestmark = pytest.mark.in_process  # the tests below: on the service in-process and real


def _weights(export: dict[str, Any]) -> bytes:
    return base64.b64decode(export["weights"])


def test_the_service_learns_exports_imports_and_rolls_back_the_variances(
    client: httpx.Client,
) -> None:
    data = phishing()
    spec = {"classes": [0, 1], "n_features": data.X.shape[1], "algorithm": "arow", "r": 0.5}
    assert client.put("/models/a", json=spec).status_code == 201
    ref = Reference([0, 1], data.X.shape[1], 0.5)
    at: dict[int, bytes] = {0: ref.packed()}
    for x, y in zip(data.X[:150].tolist(), data.y[:150].tolist(), strict=True):
        r = client.post("/learn", json={"model": "a", "features": x, "label": y})
        assert r.status_code == 200 and r.json()["label"] == ref.learn(x, y)
        at[ref.updates] = ref.packed()
    export = client.get("/models/a/export").json()
    assert _weights(export) == ref.packed()
    assert client.post("/models/b/import", json=export).status_code == 200
    x, y = data.X[150].tolist(), int(data.y[150])
    client.post("/learn", json={"model": "b", "features": x, "label": y})
    ref.learn(x, y)
    assert _weights(client.get("/models/b/export").json()) == ref.packed()
    version = ref.updates // 2
    rolled = client.post("/models/a/rollback", json={"version": version})
    assert rolled.status_code == 200, rolled.text
    assert _weights(client.get("/models/a/export").json()) == at[version]


def test_in_batches_one_vs_rest_and_as_a_challenger_counted_exactly(client: httpx.Client) -> None:
    data = digits()
    spec = {"classes": data.classes, "n_features": 64, "multiclass": "ovr"}
    assert client.put("/models/d", json={**spec, "algorithm": "arow"}).status_code == 201
    assert client.put("/models/p", json=spec).status_code == 201
    added = client.put("/models/p/challengers/ar", json={"algorithm": "arow", "r": 2.0})
    assert added.status_code == 201, added.text
    ref, challenger = Reference(data.classes, 64), Reference(data.classes, 64, r=2.0)
    X, y = data.X[:400].tolist(), data.y[:400].tolist()
    for start in range(0, 400, 100):
        body = {"features": X[start : start + 100], "labels": y[start : start + 100]}
        assert client.post("/learn/batch", json={"model": "d", **body}).status_code == 200
        assert client.post("/learn/batch", json={"model": "p", **body}).status_code == 200
    mistakes = sum(challenger.learn(x, label) != label for x, label in zip(X, y, strict=True))
    for x, label in zip(X, y, strict=True):
        ref.learn(x, label)
    assert _weights(client.get("/models/d/export").json()) == ref.packed()
    figures = client.get("/models/p/challengers/ar").json()
    assert (figures["seen"], figures["mistakes"], figures["updates"]) == (
        400,
        mistakes,
        challenger.updates,
    )
    promoted = client.post("/models/p/promote", json={"challenger": "ar"})
    assert promoted.status_code == 200, promoted.text
    assert _weights(client.get("/models/p/export").json()) == challenger.packed()


def test_to_scikit_learn_a_perceptron_that_predicts_alike(client: httpx.Client) -> None:
    from sklearn.linear_model import Perceptron

    from perceptron_client.sklearn_bridge import estimator_of

    data = breast_cancer()
    spec = {"classes": [0, 1], "n_features": 30, "algorithm": "arow"}
    assert client.put("/models/a", json=spec).status_code == 201
    body = {"model": "a", "features": data.X[:200].tolist(), "labels": data.y[:200].tolist()}
    assert client.post("/learn/batch", json=body).status_code == 200
    estimator = estimator_of(client.get("/models/a/export").json())
    assert isinstance(estimator, Perceptron)
    served = client.post("/predict/batch", json={"model": "a", "features": data.X.tolist()})
    labels = [p["label"] for p in served.json()["predictions"]]
    assert estimator.predict(data.X).tolist() == labels
