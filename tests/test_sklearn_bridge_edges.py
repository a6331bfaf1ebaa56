"""The scikit-learn bridge's edges, in-process: the document it writes is one the service
reads (and the reverse), every estimator or model it cannot take is refused with the reason
before any request, and without scikit-learn the error names the extra to install."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression, Perceptron
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier

from perceptron_client import AsyncClient, Client, calls, model_document
from perceptron_client.sklearn_bridge import SklearnBridgeError, estimator_document, estimator_of
from service.contract import export_format
from service.learner import ModelConfig, Weights

X, Y = load_iris(return_X_y=True)
BINARY = Y < 2  # setosa against versicolor


def fit(estimator: Any, binary: bool = False) -> Any:
    if binary:
        return estimator.fit(X[BINARY], Y[BINARY])
    return estimator.fit(X, Y)


def unanswered() -> tuple[Client, list[httpx.Request]]:
    """A client whose requests are recorded and answered 500: a refusal must send none."""
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    return Client("http://perceptron.test", transport=httpx.MockTransport(handle)), sent


def exporting(document: dict[str, Any]) -> Client:
    """A client of a service whose every export is ``document``."""
    return Client(
        "http://perceptron.test",
        transport=httpx.MockTransport(lambda _: httpx.Response(200, json=document)),
    )


# --- the document, against the service's own reading and writing ------------------------------


def test_the_format_is_the_services() -> None:
    assert (model_document.FORMAT, model_document.FORMAT_VERSION) == (
        export_format.FORMAT,
        export_format.FORMAT_VERSION,
    )


@pytest.mark.parametrize(
    ("estimator", "binary", "options"),
    [
        pytest.param(Perceptron(), True, {}, id="binary"),
        pytest.param(Perceptron(eta0=0.25), False, {}, id="ovr"),
        pytest.param(LogisticRegression(max_iter=1000), False, {}, id="multinomial"),
        pytest.param(LinearSVC(max_iter=20_000), False, {"averaged": True}, id="ovr-averaged"),
        pytest.param(
            Perceptron(fit_intercept=False),
            True,
            {"margin": 0.5, "feedback_ttl_s": 60},
            id="no-bias",
        ),
    ],
)
def test_a_warm_start_document_is_read_by_the_service_as_the_estimator(
    estimator: Any, binary: bool, options: dict[str, Any]
) -> None:
    est = fit(estimator, binary)
    read = export_format.parse_document(estimator_document("m", est, options))
    config = read.config
    assert list(config.classes) == est.classes_.tolist()
    assert config.n_features == X.shape[1] and config.fit_bias == est.fit_intercept
    assert config.learning_rate == getattr(est, "eta0", 1.0)
    assert config.averaged == options.get("averaged", False)
    assert (config.margin, config.feedback_ttl_s) == (
        options.get("margin", 0.0),
        options.get("feedback_ttl_s", 86_400),
    )
    assert np.array_equal(read.weights.w, est.coef_)
    assert np.array_equal(read.weights.b, est.intercept_)
    if config.averaged:  # the running sums start at zero: the mean is these weights
        assert read.weights.wsum is not None and not read.weights.wsum.any()
        assert read.weights.bsum is not None and not read.weights.bsum.any()
    assert (read.weights.version, read.weights.seen, read.counters) == (0, 0, {})


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(ModelConfig(n_features=3), id="binary"),
        pytest.param(ModelConfig(classes=(0, 1, 2), multiclass="ovr", n_features=3), id="ovr"),
        pytest.param(ModelConfig(classes=("a", "b", "c"), n_features=2), id="multiclass"),
        pytest.param(ModelConfig(n_features=3, averaged=True), id="averaged"),
        pytest.param(
            ModelConfig(classes=(0, 1, 2), multiclass="ovr", n_features=3, averaged=True),
            id="ovr-averaged",
        ),
    ],
)
def test_an_export_of_the_service_reads_as_the_weights_it_serves(config: ModelConfig) -> None:
    rng = np.random.default_rng(3)
    weights = Weights.zeros(config)
    weights.w = rng.normal(size=weights.w.shape)
    weights.b = rng.normal(size=weights.b.shape)
    if config.averaged:
        weights.state["wsum"] = rng.normal(size=weights.w.shape) * 7
        weights.state["bsum"] = rng.normal(size=weights.b.shape) * 7
    weights.version, weights.seen = 11, 13
    document = export_format.export_document("m", config, weights, {})
    est = exporting(document).to_sklearn("m")
    w, b = weights.averaged()  # the mean, what an averaged model serves
    assert np.array_equal(est.coef_, w) and np.array_equal(est.intercept_, b)
    assert est.classes_.tolist() == list(config.classes)
    assert est.t_ == 14.0 and est.n_features_in_ == config.n_features


# --- what a warm start refuses, before any request --------------------------------------------


def with_attributes(**attributes: Any) -> Any:
    est = fit(Perceptron(), binary=True)
    for name, value in attributes.items():
        setattr(est, name, value)
    return est


REFUSED: list[Any] = [
    pytest.param(Perceptron(), NotFittedError, "not fitted", id="not-fitted"),
    pytest.param(object(), TypeError, "not an estimator", id="not-an-estimator"),
    pytest.param(
        fit(DecisionTreeClassifier()), SklearnBridgeError, "has no coef_", id="not-linear"
    ),
    pytest.param(
        fit(make_pipeline(StandardScaler(), Perceptron())),
        SklearnBridgeError,
        "not a pipeline",
        id="a-pipeline",
    ),
    pytest.param(
        with_attributes(coef_=np.ones((2, 4))),
        SklearnBridgeError,
        r"shape \(2, 4\) for 2 classes",
        id="two-rows-for-two-classes",
    ),
    pytest.param(
        with_attributes(coef_=np.ones((1, 4, 1))),
        SklearnBridgeError,
        "the shape",
        id="three-dimensions",
    ),
    pytest.param(
        with_attributes(intercept_=np.zeros(3)),
        SklearnBridgeError,
        "intercept_ has the shape",
        id="intercept-shape",
    ),
    pytest.param(
        with_attributes(coef_=np.array([[np.nan, 0, 0, 0]])),
        SklearnBridgeError,
        "not finite",
        id="nan",
    ),
    pytest.param(
        with_attributes(classes_=np.array([False, True])),
        SklearnBridgeError,
        "booleans",
        id="boolean-classes",
    ),
    pytest.param(
        with_attributes(classes_=np.array([0.5, 1.5])),
        SklearnBridgeError,
        "integers within",
        id="fractional-classes",
    ),
    pytest.param(
        with_attributes(classes_=np.array([0, 1, 2])),
        SklearnBridgeError,
        "for 3 classes",
        id="classes-and-rows-disagree",
    ),
]


@pytest.mark.parametrize(("estimator", "error", "says"), REFUSED)
def test_a_warm_start_refuses_what_the_service_cannot_take(
    estimator: Any, error: type[Exception], says: str
) -> None:
    client, sent = unanswered()
    with pytest.raises(error, match=says):
        client.from_sklearn("m", estimator)
    assert sent == []


def test_a_warm_start_takes_only_options_the_estimator_does_not_decide() -> None:
    client, sent = unanswered()
    est = fit(Perceptron(), binary=True)
    for option in ("classes", "n_features", "fit_bias", "hash_bits", "learning_rat"):
        with pytest.raises(TypeError, match=f"Unknown option '{option}'.*may choose multiclass"):
            client.from_sklearn("m", est, **{option: 1})
    assert sent == []


def test_a_warm_start_of_three_classes_cannot_be_ovo() -> None:
    client, sent = unanswered()
    with pytest.raises(SklearnBridgeError, match="choose 'ovr' or 'multiclass'"):
        client.from_sklearn("m", fit(Perceptron()), multiclass="ovo")
    assert sent == []


def test_a_sparse_coef_is_taken_as_its_dense_weights() -> None:
    est = fit(Perceptron())
    dense = est.coef_.copy()
    est.sparsify()
    assert not isinstance(est.coef_, np.ndarray)
    read = export_format.parse_document(estimator_document("m", est, {}))
    assert np.array_equal(read.weights.w, dense)


def test_integral_float_classes_become_integer_labels() -> None:
    est = Perceptron().fit(X[BINARY], Y[BINARY].astype(float))
    assert est.classes_.dtype == np.float64
    assert estimator_document("m", est, {})["config"]["classes"] == [0, 1]


def test_string_classes_stay_strings() -> None:
    names = np.array(["setosa", "versicolor", "virginica"])[Y]
    est = LogisticRegression(max_iter=1000).fit(X, names)
    document = estimator_document("m", est, {})
    assert document["config"]["classes"] == ["setosa", "versicolor", "virginica"]
    back = estimator_of(document)
    assert back.predict(X).tolist() == est.predict(X).tolist()


def test_a_fitted_estimator_is_left_as_it_was() -> None:
    est = fit(Perceptron(), binary=True)
    before = est.get_params(), est.coef_.copy(), est.intercept_.copy()
    estimator_document("m", est, {"averaged": True})
    assert est.get_params() == before[0]
    assert np.array_equal(est.coef_, before[1]) and np.array_equal(est.intercept_, before[2])


# --- what an export refuses ----------------------------------------------------------------------


def exported(config: ModelConfig) -> dict[str, Any]:
    return export_format.export_document("m", config, Weights.zeros(config), {})


@pytest.mark.parametrize(
    ("config", "says"),
    [
        pytest.param(ModelConfig(hash_bits=4), "named features, hashed into 2\\*\\*4", id="named"),
        pytest.param(
            ModelConfig(classes=(0, 1, 2), multiclass="ovo", n_features=2),
            "'ovo': it predicts by one-vs-one votes",
            id="ovo",
        ),
    ],
)
def test_an_export_refuses_a_model_no_estimator_predicts_alike(
    config: ModelConfig, says: str
) -> None:
    with pytest.raises(SklearnBridgeError, match=says):
        exporting(exported(config)).to_sklearn("m")


def test_an_ovo_model_of_two_classes_is_binary_and_exports() -> None:
    document = exported(ModelConfig(classes=(0, 1), multiclass="ovo", n_features=2))
    assert exporting(document).to_sklearn("m").coef_.shape == (1, 2)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        pytest.param({"sha256": "0" * 64}, "checksum", id="checksum"),
        pytest.param({"format_version": 2}, "version 2", id="format-version"),
        pytest.param({"format": "other"}, "format 'perceptron-model'", id="format"),
    ],
)
def test_an_export_document_that_does_not_check_out_is_refused(
    change: dict[str, Any], says: str
) -> None:
    document = exported(ModelConfig(n_features=2)) | change
    with pytest.raises(ValueError, match=says):
        exporting(document).to_sklearn("m")


def test_an_averaged_model_that_has_seen_nothing_serves_its_weights() -> None:
    config = ModelConfig(n_features=2, averaged=True)
    weights = Weights.zeros(config)
    weights.w = np.array([[1.5, -2.0]])
    document = export_format.export_document("m", config, weights, {})
    assert exporting(document).to_sklearn("m").coef_.tolist() == [[1.5, -2.0]]


# --- both clients ---------------------------------------------------------------------------------


def test_the_async_client_sends_the_same_requests() -> None:
    est = fit(Perceptron(), binary=True)
    document = estimator_document("m", est, {})
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.method == "GET":
            return httpx.Response(200, json=document)
        config = ModelConfig.from_dict(document["config"]).to_dict()
        info = {"name": "m", "config": config, "version": 0, "created": 1}
        return httpx.Response(200, json={**info, "counters": {}})

    async def run() -> tuple[Any, Any]:
        transport = httpx.MockTransport(handle)
        async with AsyncClient("http://perceptron.test", transport=transport) as c:
            return await c.from_sklearn("m", est), await c.to_sklearn("m")

    info, back = asyncio.run(run())
    assert [(r.method, r.url.path) for r in sent] == [
        ("POST", "/models/m/import"),
        ("GET", "/models/m/export"),
    ]
    assert json.loads(sent[0].content) == calls.from_sklearn("m", est, {}).body == document
    assert info.config.classes == [0, 1]
    assert np.array_equal(back.coef_, est.coef_) and np.array_equal(back.intercept_, est.intercept_)


# --- without scikit-learn ---------------------------------------------------------------------


def without(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """As if ``package`` were not installed, and no bridge imported yet (None in sys.modules
    makes an import of a module fail, of one already imported too)."""
    for bridge in ("perceptron_client.sklearn_bridge", "perceptron_client.river_bridge"):
        monkeypatch.delitem(sys.modules, bridge, raising=False)
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, package, None)


@pytest.mark.parametrize(
    "use",
    [
        pytest.param(lambda c: c.to_sklearn("m"), id="to_sklearn"),
        pytest.param(lambda c: c.from_sklearn("m", object()), id="from_sklearn"),
    ],
)
def test_without_scikit_learn_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, use: Callable[[Client], Any]
) -> None:
    without(monkeypatch, "sklearn")
    client, sent = unanswered()
    with pytest.raises(ImportError, match=r"pip install 'perceptron-client\[sklearn\]'"):
        use(client)
    assert sent == []


def test_without_river_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "river")
    with pytest.raises(ImportError, match=r"pip install 'perceptron-client\[river\]'"):
        import perceptron_client.river_bridge  # noqa: F401
