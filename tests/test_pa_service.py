"""Passive-aggressive models served: scikit-learn's weights and mistakes through the running
service (``perceptron serve --workers 2``) on real data, on every learning path (``/learn``
one example at a time, JSON and packed batches, predict then feedback) and both ways of
committing (one writer per model, and each worker committing its own)."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import httpx
import numpy as np
import pytest
from sklearn.linear_model import Perceptron, SGDClassifier

from perceptron_client import Client

from .servers import ServiceProcess
from .test_passive_aggressive import replay_sklearn
from .test_sklearn_parity import Dataset, Replay, breast_cancer, digits

pytestmark = pytest.mark.servers  # two services of two workers each, on a redis-server

# Binary and one-vs-rest, PA-I and PA-II; breast_cancer's C small enough that many PA-I steps
# are C itself (its squared norms are ~1e6).
CASES = [(breast_cancer, "pa1", 1e-3), (digits, "pa2", 1.0)]
CASE_IDS = ["breast_cancer-pa1", "digits-ovr-pa2"]
# How each path sends the examples, and whether the one-writer setting matters to it.
PATHS = ["learn", "batch", "packed", "predict-feedback"]


@cache
def expected(load: Callable[[], Dataset], algorithm: str, c: float) -> tuple[Dataset, Replay]:
    data = load()
    return data, replay_sklearn(data, algorithm, c)


@pytest.fixture(scope="module")
def services(redis_server: Any) -> Iterator[dict[str, str]]:
    """``perceptron serve --workers 2``, with one writer per model (the default) and with
    each worker committing its own learns (PERCEPTRON_ONE_WRITER=false)."""
    one = ServiceProcess(redis_server.url, workers=2, PERCEPTRON_DEFAULT_MODEL="false")
    each = ServiceProcess(
        redis_server.url,
        workers=2,
        PERCEPTRON_DEFAULT_MODEL="false",
        PERCEPTRON_ONE_WRITER="false",
    )
    started = [one.start()]
    try:
        started.append(each.start())
        yield {"one-writer": one.url, "each-commits": each.url}
    finally:
        for s in started:
            s.stop()


def send(clients: list[Client], name: str, data: Dataset, path: str) -> tuple[list[int], int]:
    """Every row sent in file order by ``path``, the clients taking turns (their connections
    land on either worker): the label served before learning each row, and the mistakes."""
    turn = itertools.cycle(clients)
    labels: list[int] = []
    mistakes = 0
    if path in ("batch", "packed"):
        size = 97 if path == "batch" else 256
        for at in range(0, len(data.y), size):
            X, y = data.X[at : at + size], data.y[at : at + size].tolist()
            rows = X if path == "packed" else X.tolist()  # a 2-D array goes packed
            answer = next(turn).learn_batch(name, rows, y)
            labels += [int(v) for v in answer.labels]
            mistakes += sum(answer.mistakes)
        return labels, mistakes
    for x, y in zip(data.X.tolist(), data.y.tolist(), strict=True):
        if path == "learn":
            learned = next(turn).learn(name, x, y)
            labels.append(int(learned.label))
            mistakes += learned.mistake
        else:
            made = next(turn).predict(name, x)
            labelled = next(turn).feedback(made.prediction_id, y)
            labels.append(int(made.label))
            mistakes += labelled.mistake
    return labels, mistakes


@pytest.mark.parametrize(
    ("mode", "path"),
    [("one-writer", p) for p in PATHS] + [("each-commits", p) for p in PATHS[:3]],
)
@pytest.mark.parametrize(("load", "algorithm", "c"), CASES, ids=CASE_IDS)
def test_real_data_through_the_service_gives_sklearns_weights_and_mistakes(
    services: dict[str, str],
    mode: str,
    path: str,
    load: Callable[[], Dataset],
    algorithm: str,
    c: float,
) -> None:
    data, sk = expected(load, algorithm, c)
    name = f"pa-{mode}-{path}-{algorithm}"
    clients = [Client(services[mode], timeout=30) for _ in range(3)]
    try:
        httpx.delete(f"{services[mode]}/models/{name}")  # (left by an earlier run)
        info = clients[0].create_model(
            name,
            classes=data.classes,
            n_features=data.X.shape[1],
            multiclass=data.multiclass,
            algorithm=algorithm,
            C=c,
        )
        assert (info.config.algorithm, info.config.settings()) == (algorithm, {"C": c})
        labels, mistakes = send(clients, name, data, path)
        rows = clients[0].weights(name).rows
        counted = clients[0].read_model(name).counters
    finally:
        for client in clients:
            client.close()
    diverged = np.flatnonzero(np.array(labels) != sk.predictions)
    assert diverged.size == 0, f"first divergence at row {diverged[0]}"
    assert mistakes == sk.mistakes == counted.mistakes
    assert 0 < sk.mistakes < len(data.y)
    coef = np.array([r.weights for r in rows], dtype=np.float64)
    intercept = np.array([r.bias for r in rows], dtype=np.float64)
    assert coef.shape == sk.coef.shape
    assert np.array_equal(coef, sk.coef), f"weights differ by {np.abs(coef - sk.coef).max():g}"
    assert np.array_equal(intercept, sk.intercept)


# ---------------------------------------------------------------------------------------------
# scikit-learn both ways: SGDClassifier(loss="hinge", penalty=None, learning_rate=pa1|pa2).
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("load", "algorithm", "c"), CASES, ids=CASE_IDS)
def test_a_pa_model_to_sklearn_and_back_predicts_and_learns_on_as_the_service(
    services: dict[str, str], load: Callable[[], Dataset], algorithm: str, c: float
) -> None:
    """A model the service learned on the first half goes out as an ``SGDClassifier`` that
    predicts what the service predicts on the second; both learn the second half one example
    at a time to the same weights, bit for bit; that estimator comes back in as a PA model of
    its rule and C, with its weights, predicting as it does."""
    data, _ = expected(load, algorithm, c)
    half = len(data.y) // 2
    first, rest = slice(0, half), slice(half, None)
    with Client(services["one-writer"], timeout=30) as api:
        for name in ("pa-out", "pa-back"):
            httpx.delete(f"{services['one-writer']}/models/{name}")
        spec = {"classes": data.classes, "n_features": data.X.shape[1]}
        api.create_model("pa-out", **spec, multiclass=data.multiclass, algorithm=algorithm, C=c)
        for x, y in zip(data.X[first].tolist(), data.y[first].tolist(), strict=True):
            api.learn("pa-out", x, y)
        est = api.to_sklearn("pa-out")
        assert type(est) is SGDClassifier
        params = est.get_params()
        assert (params["loss"], params["penalty"]) == ("hinge", None)
        assert (params["learning_rate"], params["eta0"]) == (algorithm, c)
        served = [p.label for p in api.predict_batch("pa-out", data.X[rest]).predictions]
        assert np.array_equal(est.predict(data.X[rest]), np.array(served))
        classes = np.array(data.classes)
        for x, y in zip(data.X[rest], data.y[rest].tolist(), strict=True):
            api.learn("pa-out", x.tolist(), y)
            est.partial_fit(x.reshape(1, -1), [y], classes=classes)
        rows = api.weights("pa-out").rows
        assert np.array_equal(np.array([r.weights for r in rows]), est.coef_)
        assert np.array_equal(np.array([r.bias for r in rows]), est.intercept_)

        back = api.from_sklearn("pa-back", est)
        assert (back.config.algorithm, back.config.settings()) == (algorithm, {"C": c})
        rows = api.weights("pa-back").rows
        assert np.array_equal(np.array([r.weights for r in rows]), est.coef_)
        served = [p.label for p in api.predict_batch("pa-back", data.X[first]).predictions]
        assert np.array_equal(est.predict(data.X[first]), np.array(served))


def test_from_sklearn_takes_the_deprecated_passive_aggressive_classifier_and_options(
    services: dict[str, str],
) -> None:
    data, _ = expected(breast_cancer, "pa1", 1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # (deprecated in scikit-learn 1.8)
        from sklearn.linear_model import PassiveAggressiveClassifier

        old = PassiveAggressiveClassifier(C=0.01, loss="squared_hinge", random_state=0)
        old.fit(data.X[:100], data.y[:100])
    with Client(services["one-writer"], timeout=30) as api:
        for name in ("pa-old", "pa-chosen", "pa-plain"):
            httpx.delete(f"{services['one-writer']}/models/{name}")
        info = api.from_sklearn("pa-old", old)
        assert (info.config.algorithm, info.config.settings()) == ("pa2", {"C": 0.01})
        # options choose the rule: a PA estimator may come in as a perceptron, or another PA
        plain = api.from_sklearn("pa-plain", old, algorithm="perceptron", learning_rate=0.5)
        assert (plain.config.algorithm, plain.config.learning_rate) == ("perceptron", 0.5)
        chosen = api.from_sklearn(
            "pa-chosen", Perceptron(eta0=0.5).fit(data.X, data.y), C=2.0, algorithm="pa1"
        )
        assert (chosen.config.algorithm, chosen.config.settings()) == ("pa1", {"C": 2.0})
        assert chosen.config.learning_rate is None  # (not a PA learner's setting)
        est = api.to_sklearn("pa-plain")
        assert type(est) is Perceptron and est.eta0 == 0.5
