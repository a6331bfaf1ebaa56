"""Logistic regression (service/learner/logistic.py): a learner plugged in by its module.

Against scikit-learn's ``SGDClassifier(loss="log_loss", penalty=None, learning_rate="constant",
eta0=learning_rate)`` fed one ``partial_fit`` at a time on real data: the same prediction
before each row, weights and probabilities within 1e-9. Through the service: one example a
request (binary) and in batches (one-vs-rest), ``/predict``'s probabilities; as a challenger,
counted exactly; promoted, exported and imported; every update finite at the edges.
"""

from __future__ import annotations

import math
from typing import Any

import httpx
import numpy as np
import pytest
from sklearn.linear_model import SGDClassifier

from service.learner import ConfigError, ModelConfig, OnlineLearner

from .test_sklearn_parity import Dataset, breast_cancer, digits, phishing

CASES = [(breast_cancer, 1e-4), (breast_cancer, 0.01), (digits, 0.01), (phishing, 0.1)]


def _sgd(lr: float) -> SGDClassifier:
    return SGDClassifier(
        loss="log_loss", penalty=None, learning_rate="constant", eta0=lr, shuffle=False
    )


def _config(data: Dataset, lr: float) -> ModelConfig:
    multiclass: Any = data.multiclass
    return ModelConfig(
        classes=tuple(data.classes),
        n_features=data.X.shape[1],
        multiclass=multiclass,
        algorithm="logistic",
        learning_rate=lr,
    )


@pytest.mark.parametrize(("load", "lr"), CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_the_learner_makes_scikit_learns_updates(load: Any, lr: float) -> None:
    data = load()
    sgd, ours = _sgd(lr), OnlineLearner(_config(data, lr))
    classes = np.array(data.classes)
    for i, (x, y) in enumerate(zip(data.X, data.y, strict=True)):
        row = x.reshape(1, -1)
        outcome = ours.learn(x.tolist(), int(y))
        if i:  # (an unfitted estimator predicts nothing)
            assert outcome.label == sgd.predict(row)[0], i
        sgd.partial_fit(row, [y], classes=classes)
        if i % 97 == 0:
            got = ours.probabilities(x.tolist())
            assert got is not None
            assert np.allclose(got, sgd.predict_proba(row)[0], rtol=0, atol=1e-9), i
    assert np.allclose(ours.weights.w, sgd.coef_, rtol=1e-9, atol=1e-9)
    assert np.allclose(ours.weights.b, sgd.intercept_, rtol=1e-9, atol=1e-9)


def test_probabilities_follow_scikit_learns_forms() -> None:
    binary = OnlineLearner(ModelConfig(n_features=1, algorithm="logistic"))
    binary.weights.w[0, 0] = 2.0
    p = binary.probabilities([1.0])
    assert p is not None and p.tolist() == [1 - 1 / (1 + math.exp(-2.0)), 1 / (1 + math.exp(-2.0))]
    three = ModelConfig(
        classes=("a", "b", "c"), n_features=1, multiclass="ovr", algorithm="logistic"
    )
    ovr = OnlineLearner(three)
    ovr.weights.w[:, 0] = [-2000.0, -3000.0, -1000.0]  # every sigmoid 0: all equal
    assert ovr.probabilities([1.0]).tolist() == [1 / 3] * 3  # type: ignore[union-attr]
    ovr.weights.w[:, 0] = [1.0, 0.0, -1.0]
    q = ovr.probabilities([1.0])
    assert q is not None and math.isclose(q.sum(), 1.0) and q[0] > q[1] > q[2]
    assert OnlineLearner(ModelConfig(n_features=1)).probabilities([1.0]) is None


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": 1e6 * 1.01}, "learning_rate"),
        ({"C": 0.5}, "C"),
        ({"averaged": True}, "averaged"),
        ({"classes": (1, 2, 3)}, "multiclass"),  # one-vs-rest only
        ({"classes": (1, 2, 3), "multiclass": "ovo"}, "multiclass"),
    ],
)
def test_a_setting_out_of_range_or_of_another_learner_is_refused(
    params: dict[str, Any], parameter: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        ModelConfig(algorithm="logistic", **params)
    assert caught.value.parameter == parameter


def test_the_default_step_is_scikit_learns_and_the_largest_is_taken() -> None:
    assert ModelConfig(algorithm="logistic").settings == {"learning_rate": 0.01}
    assert ModelConfig(algorithm="logistic", learning_rate=1e6).learning_rate == 1e6


def test_every_update_is_finite_at_the_edges() -> None:
    model = OnlineLearner(ModelConfig(n_features=2, algorithm="logistic", learning_rate=1e6))
    for i in range(200):
        model.learn([1e15, -1e15] if i % 3 else [5e-324, 0.0], 1 if i % 2 else -1)
        assert np.isfinite(model.weights.w).all() and np.isfinite(model.weights.b).all()
    p = model.probabilities([1e15, 1e15])
    assert p is not None and np.isfinite(p).all()


pytestmark = pytest.mark.in_process  # the tests below: on the service in-process and real


def test_the_service_learns_and_answers_scikit_learns_probabilities(
    client: httpx.Client,
) -> None:
    data, lr = breast_cancer(), 1e-4
    spec = {"classes": [0, 1], "n_features": 30, "algorithm": "logistic", "learning_rate": lr}
    assert client.put("/models/lg", json=spec).status_code == 201
    sgd = _sgd(lr)
    for i, (x, y) in enumerate(zip(data.X[:120], data.y[:120], strict=True)):
        row = x.reshape(1, -1)
        if i:
            got = client.post("/predict", json={"model": "lg", "features": x.tolist()}).json()
            assert np.allclose(got["probabilities"], sgd.predict_proba(row)[0], atol=1e-9)
            assert got["label"] == sgd.predict(row)[0]
        r = client.post("/learn", json={"model": "lg", "features": x.tolist(), "label": int(y)})
        assert r.status_code == 200, r.text
        sgd.partial_fit(row, [y], classes=np.array([0, 1]))
    rows = client.get("/models/lg/weights").json()["rows"]
    assert np.allclose(rows[0]["weights"], sgd.coef_[0], rtol=1e-9, atol=1e-9)
    info = client.get("/learners").json()["learners"]
    assert {"name": "logistic", "probabilities": True}.items() <= next(
        learner for learner in info if learner["name"] == "logistic"
    ).items()


def test_one_vs_rest_in_batches_and_a_challenger_counted_exactly(client: httpx.Client) -> None:
    data, lr = digits(), 0.01
    spec = {"classes": data.classes, "n_features": 64, "multiclass": "ovr"}
    assert client.put("/models/d", json={**spec, "algorithm": "logistic"}).status_code == 201
    assert client.put("/models/p", json=spec).status_code == 201
    added = client.put("/models/p/challengers/lg", json={"algorithm": "logistic"})
    assert added.status_code == 201, added.text
    assert added.json()["config"]["learning_rate"] == 1.0  # (the served model's step)
    reference = OnlineLearner(_config(data, 1.0))
    sgd, mistakes = _sgd(lr), 0
    X, y = data.X[:600], data.y[:600]
    for start in range(0, len(y), 100):
        body = {
            "features": X[start : start + 100].tolist(),
            "labels": y[start : start + 100].tolist(),
        }
        assert client.post("/learn/batch", json={"model": "d", **body}).status_code == 200
        assert client.post("/learn/batch", json={"model": "p", **body}).status_code == 200
    for x, label in zip(X, y, strict=True):
        sgd.partial_fit(x.reshape(1, -1), [label], classes=np.array(data.classes))
        mistakes += reference.learn(x.tolist(), int(label)).mistake
    rows = client.get("/models/d/weights").json()["rows"]
    assert np.allclose([r["weights"] for r in rows], sgd.coef_, rtol=1e-9, atol=1e-9)
    challenger = client.get("/models/p/challengers/lg").json()
    assert (challenger["seen"], challenger["mistakes"]) == (600, mistakes)
    promoted = client.post("/models/p/promote", json={"challenger": "lg"})
    assert promoted.status_code == 200, promoted.text
    answer = client.post("/predict", json={"model": "p", "features": X[0].tolist()}).json()
    expected = reference.probabilities(X[0].tolist())
    assert expected is not None
    assert np.allclose(answer["probabilities"], expected, atol=1e-12)
    exported = client.get("/models/p/export").json()
    assert client.post("/models/p-copy/import", json=exported).status_code == 200
    again = client.post("/predict", json={"model": "p-copy", "features": X[0].tolist()}).json()
    assert again["probabilities"] == answer["probabilities"]


def test_scikit_learn_both_ways(client: httpx.Client) -> None:
    from perceptron_client.sklearn_bridge import estimator_document, estimator_of

    data, classes = breast_cancer(), np.array([0, 1])
    sgd = _sgd(1e-4)
    for x, y in zip(data.X[:50], data.y[:50], strict=True):
        sgd.partial_fit(x.reshape(1, -1), [y], classes=classes)
    document = estimator_document("warm", sgd, {})
    assert (document["config"]["algorithm"], document["config"]["learning_rate"]) == (
        "logistic",
        1e-4,
    )
    assert client.post("/models/warm/import", json=document).status_code == 200
    X = data.X[50:60]
    got = client.post("/predict", json={"model": "warm", "features": X[0].tolist()}).json()
    assert np.allclose(got["probabilities"], sgd.predict_proba(X[:1])[0], rtol=0, atol=1e-9)
    back = estimator_of(client.get("/models/warm/export").json())
    assert isinstance(back, SGDClassifier) and back.loss == "log_loss"
    assert np.allclose(back.predict_proba(X), sgd.predict_proba(X), rtol=0, atol=1e-12)
