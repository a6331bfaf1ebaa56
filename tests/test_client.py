"""The typed client, sync and async, against the real service; errors become exceptions.

Each scenario runs twice: on ``Client`` and on ``AsyncClient`` (driven through one event loop
by a small adapter), so both clients are held to the same answers and the same errors.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import httpx
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import Perceptron

from perceptron_client import (
    AsyncClient,
    AuthError,
    ChallengerInfo,
    Challengers,
    Client,
    ConflictError,
    DriftReport,
    FeedbackBatchResponse,
    FeedbackResponse,
    GoneError,
    Health,
    InvalidInputError,
    LearnBatchResponse,
    LearnResponse,
    ModelInfo,
    ModelList,
    ModelMetrics,
    NotFoundError,
    PerceptronError,
    PredictBatchResponse,
    PredictResponse,
    Promotion,
    UnavailableError,
    WeightsResponse,
    error_from_item,
)
from service.cli.loopback import free_port

from .conftest import MakeService
from .inprocess import reach

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

DENSE = {"classes": ["a", "b"], "n_features": 3}


class AsyncDriven:
    """An ``AsyncClient`` whose methods are run to completion on one event loop."""

    def __init__(self, client: AsyncClient, runner: asyncio.Runner) -> None:
        self._client = client
        self._runner = runner

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._runner.run(method(*args, **kwargs))

        return call


def open_client(kind: str, http: httpx.Client, **options: Any) -> tuple[Any, Callable[[], None]]:
    """A ``Client``, or an ``AsyncClient`` behind the sync adapter, of the service ``http``
    talks to; and how to close it."""
    base_url = str(http.base_url)
    if kind == "sync":
        c = Client(base_url, **options, **reach(http))
        return c, c.close
    runner = asyncio.Runner()
    ac = AsyncClient(base_url, **options, **reach(http, asynchronous=True))

    def close() -> None:
        runner.run(ac.aclose())
        runner.close()

    return AsyncDriven(ac, runner), close


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    param: str = request.param
    return param


@pytest.fixture
def api(kind: str, client: httpx.Client) -> Iterator[Any]:
    c, close = open_client(kind, client)
    yield c
    close()


def test_models_resource(api: Any) -> None:
    created = api.create_model("d", **DENSE)
    assert isinstance(created, ModelInfo)
    assert (created.name, created.config.n_features, created.config.classes) == ("d", 3, ["a", "b"])
    assert created.version == 0 and created.counters.mistakes == 0
    again = api.create_model("d", **DENSE)  # same configuration: confirmed, not an error
    assert again.created == created.created

    listed = api.list_models()
    assert isinstance(listed, ModelList)
    assert {"d", "default"} <= {m.name for m in listed.models}
    assert api.read_model("d").config == created.config

    api.learn("d", [1.0, 2.0, 3.0], "b")
    weights = api.weights("d")
    assert isinstance(weights, WeightsResponse)
    assert (weights.model, weights.version, weights.seen) == ("d", 1, 1)
    assert weights.rows[0].weights == [1.0, 2.0, 3.0] and weights.rows[0].bias == 1.0

    metrics = api.metrics("d")
    assert isinstance(metrics, ModelMetrics)
    assert metrics.counters.learned == 1 and metrics.counters.mistakes == 1

    assert api.delete_model("d") is None
    with pytest.raises(NotFoundError) as e:
        api.read_model("d")
    assert (e.value.status, e.value.code) == (404, "model_not_found")
    assert "does not exist" in e.value.detail


def test_reset_export_and_import(api: Any) -> None:
    api.create_model("d", **DENSE)
    api.learn_batch("d", [[1, 2, 3], [-1, 0, 2]], ["b", "a"])
    document = api.export_model("d")
    assert isinstance(document, dict) and document["config"]["classes"] == ["a", "b"]
    copy = api.import_model("e", document)
    assert isinstance(copy, ModelInfo) and copy.name == "e"
    assert (copy.version, copy.counters.learned) == (api.read_model("d").version, 2)
    assert api.weights("e").rows == api.weights("d").rows

    reset = api.reset_model("d")
    assert isinstance(reset, ModelInfo) and (reset.version, reset.counters.learned) == (0, 0)
    with pytest.raises(NotFoundError):
        api.reset_model("nope")
    with pytest.raises(InvalidInputError) as e:
        api.import_model("f", {**document, "checksum": "0" * 64})
    assert e.value.code == "invalid_import"


def test_a_model_from_scikit_learn_and_back(api: Any) -> None:
    """from_sklearn and to_sklearn, on both clients (tests/test_sklearn_bridge.py has the
    parity on real datasets)."""
    X, y = load_iris(return_X_y=True)
    est = Perceptron(random_state=0).fit(X[::2], y[::2])
    info = api.from_sklearn("iris", est, averaged=True)
    assert isinstance(info, ModelInfo)
    assert (info.config.classes, info.config.multiclass, info.config.averaged) == (
        [0, 1, 2],
        "ovr",
        True,
    )
    served = [p.label for p in api.predict_batch("iris", X[1::2]).predictions]
    assert served == est.predict(X[1::2]).tolist()
    back = api.to_sklearn("iris")
    assert isinstance(back, Perceptron) and back.predict(X[1::2]).tolist() == served
    with pytest.raises(NotFoundError):
        api.to_sklearn("nope")
    with pytest.raises(ConflictError):  # another configuration under that name
        api.from_sklearn("iris", est)


def test_challengers_and_a_promotion(api: Any) -> None:
    """Add, read, list, promote and delete challengers, typed, and their errors: the same
    answers from both clients."""
    api.create_model("ch", **DENSE)
    for i in range(6):
        api.learn("ch", [1.0, float(i), -1.0], "ab"[i % 2])
    added = api.add_challenger("ch", "pa", from_served=True, algorithm="pa1", C=0.5)
    assert isinstance(added, ChallengerInfo)
    assert (added.id, added.since, added.seen, added.promotable) == ("pa", 6, 0, True)
    assert added.config["algorithm"] == "pa1" and added.config["C"] == 0.5
    api.add_challenger("ch", "avg", averaged=True)
    api.learn("ch", [0.5, 1.0, 2.0], "b")
    both = api.challengers("ch")
    assert isinstance(both, Challengers)
    assert (both.model, both.labels, both.served.seen) == ("ch", 7, 7)
    assert [(c.id, c.seen) for c in both.challengers] == [("avg", 1), ("pa", 1)]  # by id
    assert api.challenger("ch", "avg").config["averaged"] is True
    assert both.challengers[0].weights is None  # (asked for alone)
    weighed = api.challengers("ch", weights=True).challengers
    pa = api.challenger("ch", "pa", weights=True).weights
    assert pa is not None and weighed[1].weights == pa
    assert len(pa.w) == len(pa.b) == 1 and len(pa.w[0]) == DENSE["n_features"]
    assert pa.w[0] != [0.0] * DENSE["n_features"]  # (a copy of the served weights, learned on)
    with pytest.raises(ConflictError) as taken:
        api.add_challenger("ch", "pa")
    assert taken.value.code == "challenger_exists"
    with pytest.raises(InvalidInputError) as bad:
        api.add_challenger("ch", "x", C=0.0)
    assert bad.value.code == "invalid_config"
    with pytest.raises(NotFoundError) as none:
        api.challenger("ch", "nope")
    assert none.value.code == "challenger_not_found"
    done = api.promote("ch", "pa", demote_as="before")
    assert isinstance(done, Promotion)
    assert (done.model, done.promoted, done.demoted) == ("ch", "pa", "before")
    assert api.read_model("ch").config.algorithm == "pa1"
    with pytest.raises(NotFoundError):
        api.promote("ch", "nope")
    assert api.delete_challenger("ch", "before") is None
    assert [c.id for c in api.challengers("ch").challengers] == ["avg"]
    with pytest.raises(NotFoundError):
        api.delete_challenger("ch", "before")


def test_learning_protocol(api: Any) -> None:
    api.create_model("d", **DENSE)
    p = api.predict("d", [1, 0, 0])
    assert isinstance(p, PredictResponse)
    assert p.label == "a" and p.score == 0.0 and p.prediction_id.startswith("d:")

    f = api.feedback(p.prediction_id, "b")
    assert isinstance(f, FeedbackResponse)
    assert (f.mistake, f.updated, f.version, f.duplicate) == (True, True, 1, False)
    assert api.feedback(p.prediction_id, "b").duplicate is True
    with pytest.raises(ConflictError) as conflict:
        api.feedback(p.prediction_id, "a")
    assert (conflict.value.status, conflict.value.code) == (409, "feedback_conflict")

    pb = api.predict_batch("d", [[1, 0, 0], [0, 1, 0], [0.0, 0.0, 1.0]])
    assert isinstance(pb, PredictBatchResponse)
    assert [q.label for q in pb.predictions] == ["b", "b", "b"] and pb.version == 1
    items = [(q.prediction_id, "a") for q in pb.predictions[:2]] + [("d:nope", "a")]
    fb = api.feedback_batch(items)
    assert isinstance(fb, FeedbackBatchResponse)
    assert [r.mistake for r in fb.results[:2]] == [True, True]
    error = fb.results[2].error
    assert error is not None and fb.results[2].mistake is None
    item_error = error_from_item(error)
    assert isinstance(item_error, NotFoundError)
    assert (item_error.status, item_error.code) == (404, "prediction_not_found")

    r = api.learn("d", [0, 0, 1], "b")
    assert isinstance(r, LearnResponse)
    assert r.label in ("a", "b") and isinstance(r.mistake, bool)
    rb = api.learn_batch("d", [[1, 0, 0], [0, 0, 1]], ["a", "b"])
    assert isinstance(rb, LearnBatchResponse)
    assert len(rb.labels) == 2 and rb.mistake_count == sum(rb.mistakes)
    counters = api.read_model("d").counters
    assert (counters.predictions, counters.feedback, counters.learned) == (4, 3, 3)
    assert counters.unknown_feedback == 0  # "d:nope" is not a token of this model

    assert api.healthz() == Health(status="ok")
    assert api.readyz() == Health(status="ok", store="up")


def test_client_errors_carry_status_and_code(api: Any) -> None:
    api.create_model("d", **DENSE)
    cases: list[tuple[Callable[[], Any], type[PerceptronError], int, str]] = [
        (lambda: api.create_model("d", n_features=4), ConflictError, 409, "model_exists"),
        (lambda: api.create_model("x", classes=["a"]), InvalidInputError, 422, "validation_error"),
        (lambda: api.create_model("x", colour="red"), InvalidInputError, 422, "validation_error"),
        (lambda: api.predict("d", [1, 2]), InvalidInputError, 422, "wrong_dimension"),
        (lambda: api.predict("d", [1, 2, "x"]), InvalidInputError, 422, "invalid_features"),
        (lambda: api.learn("d", [1, 2, 3], "c"), InvalidInputError, 422, "unknown_label"),
        (lambda: api.predict("nope", [1, 2, 3]), NotFoundError, 404, "model_not_found"),
        (lambda: api.feedback("d:nope", "a"), NotFoundError, 404, "prediction_not_found"),
        (lambda: api.weights("nope"), NotFoundError, 404, "model_not_found"),
        (lambda: api.metrics("nope"), NotFoundError, 404, "model_not_found"),
        (lambda: api.delete_model("nope"), NotFoundError, 404, "model_not_found"),
    ]
    for call, cls, status, code in cases:
        with pytest.raises(cls) as e:
            call()
        assert (e.value.status, e.value.code) == (status, code), e.value
        assert e.value.detail and str(e.value).startswith(f"{status} {code}: ")
    assert api.read_model("d").version == 0  # no error changed anything


def test_batch_over_the_limit_is_413(kind: str, make_service: MakeService) -> None:
    http = make_service(max_batch=2, default_model=False)
    api, close = open_client(kind, http)
    try:
        api.create_model("d", **DENSE)
        with pytest.raises(InvalidInputError) as e:
            api.predict_batch("d", [[1, 2, 3]] * 3)
        assert (e.value.status, e.value.code) == (413, "batch_too_large")
    finally:
        close()


def test_store_down_is_unavailable_with_retry_after(
    kind: str, backend: str, make_service: MakeService, fake_redis: fakeredis.FakeServer
) -> None:
    if backend == "inprocess":
        fake_redis.connected = False  # its commands fail as a Redis that is down
        http = make_service(default_model=False)
    else:
        http = make_service(redis_url=f"redis://127.0.0.1:{free_port()}/0", default_model=False)
    api, close = open_client(kind, http)
    try:
        assert api.healthz().status == "ok"
        with pytest.raises(UnavailableError) as e:
            api.readyz()
        assert (e.value.status, e.value.code, e.value.retry_after) == (
            503,
            "store_unavailable",
            1.0,
        )
        with pytest.raises(UnavailableError):
            api.predict("d", [1, 2, 3])
    finally:
        close()


def test_api_key_is_sent_as_bearer(kind: str, make_service: MakeService) -> None:
    admin, reader = "admin-key-0123456789", "predict-key-012345678"
    http = make_service(auth=True, api_keys=f"admin:{admin},predict:{reader}", default_model=False)
    for key, call, status, code in [
        (None, "list_models", 401, "unauthorized"),
        ("not-a-key-0123456789", "list_models", 401, "unauthorized"),
        (reader, "create_model", 403, "forbidden"),
    ]:
        api, close = open_client(kind, http, api_key=key)
        try:
            with pytest.raises(AuthError) as e:
                getattr(api, call)("m") if call == "create_model" else getattr(api, call)()
            assert (e.value.status, e.value.code) == (status, code)
        finally:
            close()
    api, close = open_client(kind, http, api_key=admin)
    try:
        assert api.create_model("m", n_features=2).name == "m"
        assert "m" in {m.name for m in api.list_models().models}
    finally:
        close()


def test_async_client_serves_concurrent_calls(client: httpx.Client) -> None:
    async def main() -> list[bool]:
        async with AsyncClient(str(client.base_url), **reach(client, asynchronous=True)) as ac:
            await ac.create_model("d", **DENSE)
            preds = await asyncio.gather(*(ac.predict("d", [i, 1, 0]) for i in range(20)))
            answers = await asyncio.gather(*(ac.feedback(p.prediction_id, "b") for p in preds))
            return [a.mistake for a in answers]

    mistakes = asyncio.run(main())
    assert len(mistakes) == 20 and all(mistakes)  # all predicted with the zero weights
    with Client(str(client.base_url), **reach(client)) as c:
        counters = c.read_model("d").counters
    assert (counters.predictions, counters.feedback, counters.mistakes) == (20, 20, 20)


# --- error mapping and request building, without a service -----------------------------------

STATUSES = [
    (400, InvalidInputError),
    (401, AuthError),
    (403, AuthError),
    (404, NotFoundError),
    (409, ConflictError),
    (410, GoneError),
    (413, InvalidInputError),
    (422, InvalidInputError),
    (429, UnavailableError),
    (503, UnavailableError),
    (500, PerceptronError),
]


def answering(status: int, seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = {"detail": f"status {status}", "code": f"code_{status}"}
        return httpx.Response(status, json=body, headers={"Retry-After": "7"})

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(("status", "cls"), STATUSES)
def test_each_status_maps_to_its_exception(status: int, cls: type[PerceptronError]) -> None:
    seen: list[httpx.Request] = []
    with Client("http://perceptron.test", transport=answering(status, seen)) as c:
        with pytest.raises(cls) as e:
            c.predict("m", [1.0])
    assert type(e.value) is cls
    assert (e.value.status, e.value.code, e.value.detail) == (
        status,
        f"code_{status}",
        f"status {status}",
    )
    assert e.value.retry_after == 7.0

    async def run() -> PerceptronError:
        async with AsyncClient("http://perceptron.test", transport=answering(status, seen)) as ac:
            with pytest.raises(cls) as e:
                await ac.read_model("m")
            return e.value

    error = asyncio.run(run())
    assert (error.status, error.code) == (status, f"code_{status}")


def test_an_answer_that_is_not_the_services_json_still_maps() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>Bad Gateway</html>")

    with Client("http://perceptron.test", transport=httpx.MockTransport(handle)) as c:
        with pytest.raises(PerceptronError) as e:
            c.healthz()
    assert (e.value.status, e.value.code, e.value.retry_after) == (502, "http_502", None)
    assert "Bad Gateway" in e.value.detail


def test_requests_carry_the_key_and_plain_json() -> None:
    seen: list[httpx.Request] = []
    answer = {
        "labels": [1],
        "mistakes": [True],
        "updated": [True],
        "version": 1,
        "mistake_count": 1,
    }

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204 if request.method == "DELETE" else 200, json=answer)

    transport = httpx.MockTransport(handle)
    with Client("http://perceptron.test/", api_key="k" * 20, transport=transport) as c:
        assert c.base_url == "http://perceptron.test"
        r = c.learn_batch("m", [np.array([1.0, 2.0]), {"x": 1.0}], [np.int64(1)])
        assert r.mistake_count == 1
    with Client("http://perceptron.test", transport=transport) as c:
        c.delete_model("a?b")
    learn, delete = seen
    assert learn.headers["authorization"] == "Bearer " + "k" * 20
    assert learn.headers["content-type"] == "application/json"
    assert learn.url.path == "/learn/batch"
    assert json.loads(learn.content) == {
        "model": "m",
        "features": [[1.0, 2.0], {"x": 1.0}],
        "labels": [1],
    }
    assert "authorization" not in delete.headers
    assert delete.url.raw_path == b"/models/a%3Fb"


def test_an_event_stream_is_read_as_an_event_source_reads_it() -> None:
    """Comments, the retry and kinds this client does not know pass; a stream the service
    ends is opened again after its retry; ``gone`` raises; a body not of its kind is an
    unexpected answer."""
    drift = '{"drift":null,"learners":[],"events":[]}'
    gone = '{"detail":"Model \'m\' does not exist.","code":"model_not_found"}'
    bodies = iter([
        f"retry: 10\n\n: keep-alive\n\nevent: newer\ndata: {{}}\n\nevent: drift\ndata: {drift}\n\n",
        f"event: gone\ndata: {gone}\n\n",
        'event: drift\ndata: {"drift": 1}\n\n',
    ])  # fmt: skip
    paths = []

    def handle(request: httpx.Request) -> httpx.Response:
        paths.append((request.url.path, request.headers["accept"]))
        body = next(bodies)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)

    with Client("http://perceptron.test", transport=httpx.MockTransport(handle)) as c:
        events = c.events("m")
        first = next(events)
        assert first.kind == "drift" and isinstance(first.data, DriftReport)
        with pytest.raises(NotFoundError) as e:
            next(events)  # (the stream opened again: its first event)
        assert e.value.code == "model_not_found"
        with pytest.raises(PerceptronError) as bad:
            next(c.events("m"))
        assert bad.value.code == "unexpected_answer"
    assert paths == [("/models/m/events", "text/event-stream")] * 3
