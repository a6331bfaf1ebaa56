"""scikit-learn both ways, on real datasets against ``perceptron serve --workers 2`` and a real
redis-server.

A warm start (``Client.from_sklearn``) of each of five linear classifiers fitted on a training
split predicts, on the held-out rows, exactly the labels the estimator predicts, with its
weights bit for bit; a warm-started ``Perceptron`` then learns on exactly as scikit-learn's own
``partial_fit`` does. An export (``Client.to_sklearn``) of a model the service trained, in
each mode scikit-learn can express, predicts exactly what the service predicts, and learns on
as the service does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.linear_model import LogisticRegression, Perceptron, RidgeClassifier, SGDClassifier
from sklearn.model_selection import train_test_split
from sklearn.svm import LinearSVC

from perceptron_client import Client

from .servers import ServiceProcess
from .test_first_session import python_blocks, section
from .test_river_bridge import CLIENT_PAGE, assert_prints_what_it_says

pytestmark = pytest.mark.servers  # two worker processes on a real redis-server

LOADERS: dict[str, Callable[..., Any]] = {
    "breast_cancer": load_breast_cancer,
    "iris": load_iris,
    "wine": load_wine,
    "digits": load_digits,
}
ESTIMATORS: dict[str, Callable[[], Any]] = {
    "Perceptron": lambda: Perceptron(random_state=0),
    "SGDClassifier": lambda: SGDClassifier(random_state=0),
    "LinearSVC": lambda: LinearSVC(random_state=0, max_iter=20_000),
    "LogisticRegression": lambda: LogisticRegression(max_iter=10_000),
    "RidgeClassifier": lambda: RidgeClassifier(),
}


@dataclass(frozen=True)
class Split:
    train_X: np.ndarray
    train_y: np.ndarray
    test_X: np.ndarray  # held out: never seen by the estimator before the service
    test_y: np.ndarray


@cache
def split(dataset: str) -> Split:
    X, y = LOADERS[dataset](return_X_y=True)
    parts = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    return Split(*parts[::2], *parts[1::2])


@cache
def fitted(dataset: str, estimator: str) -> Any:
    data = split(dataset)
    return ESTIMATORS[estimator]().fit(data.train_X, data.train_y)


@pytest.fixture
def api(two_workers: ServiceProcess) -> Iterator[Client]:
    with Client(two_workers.url) as c:
        yield c


def served(api: Client, name: str, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The service's labels and scores (one column a weight row) for the rows of ``X``."""
    answer = api.predict_batch(name, X)  # a 2-D array travels packed: float64, exactly
    labels = np.array([p.label for p in answer.predictions])
    scores = [
        [p.score] if p.scores is None else list(p.scores.values()) for p in answer.predictions
    ]
    return labels, np.array(scores)


def weights(api: Client, name: str, averaged: bool = False) -> tuple[np.ndarray, np.ndarray]:
    w = api.weights(name)
    rows = w.averaged if averaged else w.rows
    assert rows is not None
    return np.array([r.weights for r in rows]), np.array([r.bias for r in rows])


CASES = [
    pytest.param(dataset, estimator, id=f"{dataset}-{estimator}")
    for dataset in LOADERS
    for estimator in ESTIMATORS
]


@pytest.mark.parametrize(("dataset", "estimator"), CASES)
def test_a_warm_start_predicts_what_the_estimator_predicts(
    api: Client, dataset: str, estimator: str
) -> None:
    est, data = fitted(dataset, estimator), split(dataset)
    want = est.predict(data.test_X)
    modes = ["ovr", "multiclass"] if len(est.classes_) > 2 else [None]
    for mode in modes:  # both modes predict the argmax of the same scores
        name = f"{dataset}-{estimator}-{mode}".lower()
        options = {} if mode is None else {"multiclass": mode}
        info = api.from_sklearn(name, est, **options)
        assert info.config.classes == est.classes_.tolist()
        assert info.config.n_features == data.test_X.shape[1]
        assert (info.version, info.counters.seen) == (0, 0)

        # The weights, bit for bit: one row a class (one for two classes), a bias a row (a
        # binary RidgeClassifier keeps its one row as a vector, and its bias as a scalar).
        coef, bias = weights(api, name)
        assert np.array_equal(coef, np.reshape(est.coef_, coef.shape))
        assert np.array_equal(bias, np.reshape(est.intercept_, bias.shape))

        labels, scores = served(api, name, data.test_X)
        assert np.array_equal(labels, want), f"{name}: {np.flatnonzero(labels != want)}"
        # Each score is the row's dot product plus its bias, as the service computes it
        # (bit for bit); scikit-learn sums a whole matrix product in another order, so its
        # decision_function may differ in the last bits, never in a prediction here.
        rows = np.array([coef @ x + bias for x in data.test_X])
        assert np.array_equal(scores, rows)
        decision = est.decision_function(data.test_X).reshape(len(rows), -1)
        np.testing.assert_allclose(scores, decision, rtol=1e-12, atol=1e-9)


def test_the_default_mode_follows_how_the_estimator_was_trained(api: Client) -> None:
    """Multinomial logistic regression learns on as one model ('multiclass'); the
    one-vs-rest estimators as one binary perceptron a class ('ovr')."""
    assert api.from_sklearn("lr", fitted("iris", "LogisticRegression")).config.multiclass == (
        "multiclass"
    )
    for estimator in ("Perceptron", "SGDClassifier", "LinearSVC", "RidgeClassifier"):
        assert api.from_sklearn(estimator.lower(), fitted("iris", estimator)).config.multiclass == (
            "ovr"
        )


@pytest.mark.parametrize(
    ("dataset", "eta0"),
    [
        pytest.param("breast_cancer", 1.0, id="breast_cancer"),
        pytest.param("wine", 0.1, id="wine-ovr-eta0.1"),
        pytest.param("digits", 1.0, id="digits-ovr"),
    ],
)
def test_a_warm_started_perceptron_learns_on_as_partial_fit_does(
    api: Client, dataset: str, eta0: float
) -> None:
    """The service, warm-started from a fitted Perceptron, learns the held-out rows one at a
    time (POST /learn) and predicts each before learning it exactly as the same estimator
    does through partial_fit; the weights stay equal bit for bit throughout."""
    data = split(dataset)
    est = Perceptron(eta0=eta0, random_state=0).fit(data.train_X, data.train_y)
    name = f"{dataset}-on"
    assert api.from_sklearn(name, est).config.learning_rate == eta0

    theirs, ours, mistakes = [], [], 0
    for x, y in zip(data.test_X, data.test_y.tolist(), strict=True):
        theirs.append(est.predict(x.reshape(1, -1))[0])
        est.partial_fit(x.reshape(1, -1), [y])
        answer = api.learn(name, x, y)
        ours.append(answer.label)
        mistakes += answer.mistake
    assert ours == theirs
    assert 0 < mistakes < len(ours)  # it learned something on the way
    coef, bias = weights(api, name)
    assert np.array_equal(coef, est.coef_) and np.array_equal(bias, est.intercept_)
    assert api.read_model(name).counters.mistakes == mistakes


def service_trained(api: Client, name: str, dataset: str, **config: Any) -> Split:
    """A model the service trained from zero on the training rows, in order."""
    data = split(dataset)
    classes = np.unique(data.train_y).tolist()
    api.create_model(name, classes=classes, n_features=data.train_X.shape[1], **config)
    for start in range(0, len(data.train_y), 200):
        rows = slice(start, start + 200)
        api.learn_batch(name, data.train_X[rows], data.train_y[rows].tolist())
    assert api.read_model(name).counters.seen == len(data.train_y)
    return data


EXPORTS = [
    pytest.param("breast_cancer", {}, id="binary"),
    pytest.param("breast_cancer", {"fit_bias": False, "learning_rate": 0.5}, id="binary-no-bias"),
    pytest.param("breast_cancer", {"averaged": True}, id="binary-averaged"),
    pytest.param("wine", {"multiclass": "ovr"}, id="wine-ovr"),
    pytest.param("wine", {"multiclass": "multiclass", "margin": 1.0}, id="wine-multiclass"),
    pytest.param("iris", {"multiclass": "ovr", "averaged": True}, id="iris-ovr-averaged"),
]


@pytest.mark.parametrize(("dataset", "config"), EXPORTS)
def test_an_export_predicts_what_the_service_predicts(
    api: Client, request: pytest.FixtureRequest, dataset: str, config: dict[str, Any]
) -> None:
    name = "export-" + request.node.callspec.id
    data = service_trained(api, name, dataset, **config)
    est = api.to_sklearn(name)

    assert isinstance(est, Perceptron)
    assert est.classes_.tolist() == np.unique(data.train_y).tolist()
    assert est.fit_intercept == config.get("fit_bias", True)
    assert est.eta0 == config.get("learning_rate", 1.0)
    # The weights the service predicts with (the mean, for an averaged model), bit for bit
    coef, bias = weights(api, name, averaged=config.get("averaged", False))
    assert np.array_equal(est.coef_, coef) and np.array_equal(est.intercept_, bias)

    labels, scores = served(api, name, data.test_X)
    assert np.array_equal(est.predict(data.test_X), labels)
    np.testing.assert_allclose(
        est.decision_function(data.test_X).reshape(scores.shape), scores, rtol=1e-12, atol=1e-9
    )


@pytest.mark.parametrize("dataset", ["breast_cancer", "digits"])
def test_an_exported_perceptron_learns_on_as_the_service_does(api: Client, dataset: str) -> None:
    """Exported halfway, the estimator's partial_fit and the service's /learn go on through
    the held-out rows alike: the same predictions, the same weights bit for bit."""
    multiclass = {} if dataset == "breast_cancer" else {"multiclass": "ovr"}
    name = f"export-on-{dataset}"
    data = service_trained(api, name, dataset, **multiclass)
    est = api.to_sklearn(name)
    theirs, ours = [], []
    for x, y in zip(data.test_X, data.test_y.tolist(), strict=True):
        theirs.append(est.predict(x.reshape(1, -1))[0])
        est.partial_fit(x.reshape(1, -1), [y])
        ours.append(api.learn(name, x, y).label)
    assert ours == theirs
    coef, bias = weights(api, name)
    assert np.array_equal(est.coef_, coef) and np.array_equal(est.intercept_, bias)


def test_the_example_of_the_client_page_runs_as_pasted(two_workers: ServiceProcess) -> None:
    (block,) = python_blocks(section("scikit-learn, both ways", CLIENT_PAGE))
    assert_prints_what_it_says(block, two_workers.url)
