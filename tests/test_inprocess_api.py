"""The API in-process: the app on its embedded store through httpx's ASGI transport.

What the tests on real servers show with processes and a real Redis, shown here in
milliseconds where a process is not the point: time (an injected clock instead of sleeping),
several workers on one store (several apps on one fakeredis server), the store's conditions
(INFO answered by the test), errors of the store and of the code, and one writer per model.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import fakeredis
import httpx
import numpy as np
import pytest
import redis
from redis.exceptions import (
    BusyLoadingError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
)

from service.contract.names import PredictionId, issued_ms, new_token
from service.settings import Settings
from service.store.keys import ModelKeys

from .answers import error
from .inprocess import BASE_URL, Clock, InProcessService, clock_the_store

DENSE = {"classes": ["a", "b"], "n_features": 3}
Start = Callable[..., InProcessService]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The time of the services and of their store."""
    c = Clock()
    clock_the_store(c, monkeypatch)
    return c


@pytest.fixture
def start(fake_redis: fakeredis.FakeServer, clock: Clock) -> Iterator[Start]:
    """Start a service (a worker) on the test's store, with settings overridden."""
    started: list[InProcessService] = []

    def make(embedded: bool = True, **overrides: Any) -> InProcessService:
        settings = Settings(**{"auth": False, "default_model": False, **overrides})
        service = InProcessService(settings, fake_redis, clock, embedded=embedded).start()
        started.append(service)
        return service

    yield make
    for service in started:
        service.stop()


@pytest.fixture
def api(start: Start) -> httpx.Client:
    return start().client()


@pytest.fixture
def keys(fake_redis: fakeredis.FakeServer) -> Iterator[redis.Redis]:
    """A plain client of the test's store, to look at (or break) the keys."""
    r = fakeredis.FakeRedis(server=fake_redis)
    yield r
    r.close()


def learn(api: httpx.Client, model: str, x: Sequence[float], y: Any) -> dict[str, Any]:
    r = api.post("/learn", json={"model": model, "features": x, "label": y})
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


# --- the service, start to finish --------------------------------------------------------------


def test_the_default_model_is_made_once_per_store(start: Start) -> None:
    first = start(default_model=True).client()
    assert first.get("/healthz").json() == {"status": "ok", "store": None}
    assert first.get("/readyz").json() == {"status": "ok", "store": "up"}
    p = first.post("/predict", json={"features": {"word=free": 1}}).json()
    f = first.post("/feedback", json={"prediction_id": p["prediction_id"], "label": 1}).json()
    assert f == {"mistake": True, "updated": True, "version": 1, "duplicate": False}
    assert first.delete("/models/default").status_code == 204
    second = start(default_model=True).client()  # a restart on the same store
    error(second.get("/models/default"), 404, "model_not_found")


def test_models_from_creation_to_deletion(api: httpx.Client) -> None:
    r = api.put("/models/m", json=DENSE)
    assert r.status_code == 201 and r.json()["version"] == 0
    assert api.put("/models/m", json=DENSE).status_code == 200
    other = error(api.put("/models/m", json={**DENSE, "n_features": 4}), 409, "model_exists")
    assert "'n_features' is 3, not 4" in other["detail"], other  # which setting differs
    error(api.put("/models/bad name", json=DENSE), 422, "invalid_model_name")
    assert [m["name"] for m in api.get("/models").json()["models"]] == ["m"]
    learn(api, "m", [1, 2, 3], "b")
    assert api.get("/models/m/weights").json()["rows"] == [
        {"target": "b", "weights": [1.0, 2.0, 3.0], "bias": 1.0}
    ]
    info = api.get("/models/m").json()
    assert info["version"] == 1 and info["counters"]["learned"] == 1
    assert api.delete("/models/m").status_code == 204
    error(api.get("/models/m"), 404, "model_not_found")
    error(api.delete("/models/m"), 404, "model_not_found")
    assert api.get("/models").json()["models"] == []


def test_predict_feedback_and_learn_agree_with_their_batches(start: Start) -> None:
    one, batch = start().client(), start().client()  # two workers: one store, two models
    spec = {"classes": ["x", "y", "z"], "n_features": 2, "averaged": True}
    rng = np.random.default_rng(3)
    xs = rng.integers(-3, 4, (24, 2)).tolist()
    ys = ["xyz"[i % 3] for i in range(24)]
    for name, c in (("one", one), ("batch", batch)):
        assert c.put(f"/models/{name}", json=spec).status_code == 201
    singles = [learn(one, "one", x, y) for x, y in zip(xs, ys, strict=True)]
    b = batch.post("/learn/batch", json={"model": "batch", "features": xs, "labels": ys}).json()
    assert b["labels"] == [s["label"] for s in singles]
    assert b["mistakes"] == [s["mistake"] for s in singles]
    assert b["version"] == singles[-1]["version"] and b["mistake_count"] == sum(b["mistakes"])
    assert (
        one.get("/models/one/weights").json()["rows"]
        == (batch.get("/models/batch/weights").json()["rows"])
    )
    preds = batch.post("/predict/batch", json={"model": "one", "features": xs[:3]}).json()
    items = [{"prediction_id": p["prediction_id"], "label": "x"} for p in preds["predictions"]]
    items.append({"prediction_id": "one:AAAAAAAAAAAAAAAAAAAA", "label": "x"})
    results = batch.post("/feedback/batch", json={"feedback": items}).json()["results"]
    assert [(r["error"] or {}).get("code") for r in results] == [None] * 3 + [
        "prediction_not_found"
    ]
    again = one.post("/feedback", json=items[0]).json()
    assert again["duplicate"] is True and again["version"] == results[0]["version"]
    error(one.post("/feedback", json={**items[0], "label": "y"}), 409, "feedback_conflict")


def test_packed_features_are_the_json_ones(api: httpx.Client) -> None:
    api.put("/models/m", json=DENSE)
    x = np.array([[1.5, -2, 0.25], [0, 1, -1]])
    packed = base64.b64encode(x.astype("<f8").tobytes()).decode()
    by_json = api.post("/predict/batch", json={"model": "m", "features": x.tolist()}).json()
    by_bytes = api.post("/predict/batch", json={"model": "m", "packed_features": packed}).json()
    strip = [{k: v for k, v in p.items() if k != "prediction_id"} for p in by_json["predictions"]]
    assert strip == [
        {k: v for k, v in p.items() if k != "prediction_id"} for p in by_bytes["predictions"]
    ]
    r = api.post("/learn/batch", json={"model": "m", "packed_features": packed, "labels": ["a"]})
    error(r, 422, "length_mismatch")
    error(
        api.post("/predict/batch", json={"model": "m", "packed_features": packed[:-4]}),
        422,
        "invalid_packed_features",
    )


# --- time, through an injected clock -----------------------------------------------------------


def test_a_prediction_expires_after_its_ttl(api: httpx.Client, clock: Clock) -> None:
    api.put("/models/e", json={"n_features": 1, "feedback_ttl_s": 1})
    pid = api.post("/predict", json={"model": "e", "features": [1]}).json()["prediction_id"]
    clock.advance(1.5)
    r = api.post("/feedback", json={"prediction_id": pid, "label": 1})
    error(r, 410, "prediction_expired")
    assert "came 0.5 s after its prediction's wait of 1 s" in r.json()["detail"]
    counters = api.get("/models/e").json()["counters"]
    assert (counters["expired"], counters["unknown_feedback"]) == (1, 0)


def test_expiry_is_told_by_the_id(api: httpx.Client, clock: Clock) -> None:
    """410 only for an id whose own time says its wait ran out; 404 for an id that tells no
    time (an older service's), one that tells a time to come, and one within its wait whose
    record is gone."""
    clock.stop()
    api.put("/models/e", json={"n_features": 1, "feedback_ttl_s": 10})
    now_ms = int(1000 * clock())
    issued = api.post("/predict", json={"model": "e", "features": [1]}).json()["prediction_id"]
    ids = {
        "issued": issued,
        "older": "e:" + "A" * 16,
        "to come": f"e:{new_token(now_ms + 60_000)}",
        "gone early": f"e:{new_token(now_ms)}",
        "never kept": f"e:{new_token(now_ms - 10_001)}",
    }
    parsed = PredictionId.parse(issued)
    assert parsed is not None and issued_ms(parsed.token) == now_ms
    items = [{"prediction_id": pid, "label": 1} for pid in ids.values()]

    def codes() -> list[str | None]:
        results = api.post("/feedback/batch", json={"feedback": items}).json()["results"]
        return [(x["error"] or {}).get("code") for x in results]

    gone, expired = "prediction_not_found", "prediction_expired"
    assert codes() == [None, gone, gone, gone, expired]
    clock.advance(10.5)  # the issued prediction's answer lapses, its wait over
    assert codes() == [expired, gone, gone, expired, expired]
    for pid, status in zip(ids.values(), (410, 404, 404, 410, 410), strict=True):
        assert api.post("/feedback", json={"prediction_id": pid, "label": 1}).status_code == status
    counters = api.get("/models/e").json()["counters"]
    assert (counters["feedback"], counters["expired"], counters["unknown_feedback"]) == (1, 7, 7)


def test_an_answer_is_a_duplicate_for_a_ttl_after_it_was_given(
    api: httpx.Client, clock: Clock
) -> None:
    api.put("/models/e", json={"n_features": 1, "feedback_ttl_s": 10})
    pid = api.post("/predict", json={"model": "e", "features": [1]}).json()["prediction_id"]
    clock.advance(9)  # the prediction lapses in 1 s; its answer is kept 10 s from now
    assert api.post("/feedback", json={"prediction_id": pid, "label": 1}).json()["updated"]
    clock.advance(9)
    again = api.post("/feedback", json={"prediction_id": pid, "label": 1}).json()
    assert again["duplicate"] is True and again["version"] == 1
    clock.advance(2)  # the answer lapsed, and the id tells that the wait ran out long ago
    error(api.post("/feedback", json={"prediction_id": pid, "label": 1}), 410, "prediction_expired")


def test_pending_predictions_are_capped_until_they_lapse(start: Start, clock: Clock) -> None:
    api = start(max_pending_bytes=4000).client()
    api.put("/models/p", json={"n_features": 10, "feedback_ttl_s": 64})
    served = 0
    while (r := api.post("/predict", json={"model": "p", "features": [1] * 10})).status_code == 200:
        served += 1
        assert served < 100
    body = error(r, 429, "too_many_pending")
    wait = int(r.headers["retry-after"])
    assert served >= 2 and 1 <= wait <= 64 + 1 and "PERCEPTRON_MAX_PENDING_BYTES" in body["detail"]
    clock.advance(wait)  # the oldest lapse: room again
    assert api.post("/predict", json={"model": "p", "features": [1] * 10}).status_code == 200


def test_the_series_counts_each_bucket_of_the_injected_clock(start: Start, clock: Clock) -> None:
    api = start(series_bucket_s=10, series_keep_s=60).client()
    api.put("/models/s", json={"n_features": 1})
    t0 = int(clock() // 10) * 10
    for x, y in [(1, 1), (1, -1)]:  # one mistake (0 -> predicts -1), then one more
        learn(api, "s", [x], y)
    clock.advance(10)
    learn(api, "s", [1], 1)
    clock.advance(100)  # past series_keep_s: the first buckets are dropped at the next write
    learn(api, "s", [1], 1)
    m = api.get("/models/s/metrics").json()
    assert m["series"]["bucket_s"] == 10
    points = [(p["t"], p["examples"], p["mistakes"]) for p in m["series"]["points"]]
    assert points[-1] == (t0 + 110, 1, 0)
    assert all(t >= t0 + 110 - 60 for t, _, _ in points), points
    assert m["counters"]["seen"] == 4


# --- several workers on one store --------------------------------------------------------------


def test_every_worker_serves_the_latest_weights(start: Start) -> None:
    a, b = start().client(), start().client()
    a.put("/models/m", json=DENSE)
    assert b.post("/predict", json={"model": "m", "features": [1, 1, 1]}).json()["label"] == "a"
    learn(a, "m", [1, 1, 1], "b")
    p = b.post("/predict", json={"model": "m", "features": [1, 1, 1]}).json()
    assert (p["label"], p["version"]) == ("b", 1)
    f = a.post("/feedback", json={"prediction_id": p["prediction_id"], "label": "a"}).json()
    assert f["updated"] and f["version"] == 2
    assert b.get("/models/m/weights").json()["version"] == 2


def test_a_model_deleted_or_reset_elsewhere_leaves_every_worker(start: Start) -> None:
    one, two = start(), start()
    a, b = one.client(), two.client()
    a.put("/models/m", json=DENSE)
    learn(a, "m", [1, 2, 3], "b")
    b.post("/predict", json={"model": "m", "features": [1, 2, 3]})
    assert two.worker.replicas.kept_models() == ["m"]
    assert a.post("/models/m/reset").json()["version"] == 0
    assert two.run(two.worker.replicas.forget_changed()) == ["m"]  # what each store check does
    assert two.worker.replicas.kept_models() == []
    assert b.get("/models/m/weights").json()["rows"][0]["weights"] == [0.0, 0.0, 0.0]
    a.delete("/models/m")
    assert two.run(two.worker.replicas.forget_changed()) == ["m"]
    error(b.post("/predict", json={"model": "m", "features": [1, 2, 3]}), 404, "model_not_found")


def test_the_log_is_compacted_and_a_new_worker_starts_from_the_snapshot(
    start: Start, keys: redis.Redis
) -> None:
    one = start(compact_every=4)
    a = one.client()
    a.put("/models/m", json={**DENSE, "averaged": True})
    xs = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1]] * 4
    for i, x in enumerate(xs):
        learn(a, "m", x, "ab"[i % 2])
    k = ModelKeys("m")
    for _ in range(100):  # the compaction runs in a task of its own
        if int(keys.hget(k.meta, "snapv") or 0) > 0:
            break
        one.run(asyncio.sleep(0.001))
    assert int(keys.hget(k.meta, "snapv") or 0) > 0 and keys.llen(k.log) < len(xs)
    b = start().client()
    for path in ("/models/m/weights", "/models/m/metrics"):
        assert b.get(path).json() == a.get(path).json()


def test_a_worker_keeps_its_memory_budget_of_models(start: Start) -> None:
    service = start(replica_memory_bytes=1024 * 1024)
    api = service.client()
    for name in "abcd":  # 2^15 weights and a bias, of 8 bytes: a bit over a quarter each
        api.put(f"/models/{name}", json={"hash_bits": 15})
        api.post("/predict", json={"model": name, "features": {"f": 1}})
    assert service.worker.replicas.kept_models() == ["b", "c", "d"]
    assert service.worker.replicas.kept_bytes <= 1024 * 1024
    api.post("/predict", json={"model": "a", "features": {"f": 1}})  # read again from the store
    assert service.worker.replicas.kept_models() == ["c", "d", "a"]
    text = api.get("/metrics").text
    assert "perceptron_worker_replicas 3.0" in text


def test_a_model_that_lost_a_key_is_never_served(start: Start, keys: redis.Redis) -> None:
    a = start().client()
    a.put("/models/m", json=DENSE)
    for _ in range(3):
        learn(a, "m", [1, 1, 1], "b")
        learn(a, "m", [1, 1, 1], "a")
    assert keys.delete(ModelKeys("m").log) == 1
    b = start().client()  # no replica yet: it must read the log
    body = error(
        b.post("/predict", json={"model": "m", "features": [1, 1, 1]}), 503, "model_state_lost"
    )
    assert "import" in body["detail"] or "reset" in body["detail"]
    assert b.post("/models/m/reset").status_code == 200
    assert b.post("/predict", json={"model": "m", "features": [1, 1, 1]}).status_code == 200


# --- the store's conditions and errors ---------------------------------------------------------


def test_a_store_that_may_evict_or_is_full_is_reported(start: Start) -> None:
    service = start(embedded=False)
    api = service.client()
    api.put("/models/m", json=DENSE)
    service.redis_info["maxmemory_policy"] = "allkeys-lru"
    error(api.get("/readyz"), 503, "store_evicts_keys")
    error(
        api.post("/predict", json={"model": "m", "features": [1, 2, 3]}), 503, "store_evicts_keys"
    )
    service.redis_info.update(maxmemory_policy="volatile-lru", maxmemory=100, used_memory=50)
    assert api.get("/readyz").status_code == 200
    service.redis_info.update(maxmemory_policy="noeviction", used_memory=100)
    error(api.get("/readyz"), 503, "store_full")
    service.redis_info["used_memory"] = 10
    assert api.get("/readyz").json()["store"] == "up"
    assert api.post("/predict", json={"model": "m", "features": [1, 2, 3]}).status_code == 200


def test_a_store_that_does_not_answer_is_a_503(
    api: httpx.Client, fake_redis: fakeredis.FakeServer
) -> None:
    api.put("/models/m", json=DENSE)
    fake_redis.connected = False
    error(api.get("/readyz"), 503, "store_unavailable")
    r = api.post("/predict", json={"model": "m", "features": [1, 2, 3]})
    error(r, 503, "store_unavailable")
    assert r.headers["retry-after"] == "1"
    assert api.get("/healthz").status_code == 200
    fake_redis.connected = True
    assert api.post("/predict", json={"model": "m", "features": [1, 2, 3]}).status_code == 200


@pytest.mark.parametrize(
    ("refusal", "status", "code"),
    [
        (OutOfMemoryError("OOM command not allowed"), 503, "store_full"),
        (
            ReadOnlyError("READONLY You can't write against a read only replica."),
            503,
            "store_read_only",
        ),
        (BusyLoadingError("LOADING Redis is loading"), 503, "store_loading"),
        (ResponseError("BUSY Redis is busy running a script"), 503, "store_busy"),
        (ResponseError("MISCONF cannot persist"), 503, "store_cannot_persist"),
        (ResponseError("ERR something no script expects"), 500, "internal_error"),
    ],
)
def test_a_store_refusal_is_named(
    start: Start, monkeypatch: pytest.MonkeyPatch, refusal: Exception, status: int, code: str
) -> None:
    service = start()
    api = service.client()
    api.put("/models/m", json=DENSE)

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise refusal

    monkeypatch.setattr(service.store, "commit_predictions", refuse)
    r = api.post("/predict", json={"model": "m", "features": [1, 2, 3]})
    error(r, status, code)
    assert ("retry-after" in r.headers) == (status == 503)
    assert api.get("/models/m").json()["counters"]["predictions"] == 0


def test_a_bug_is_a_json_500(start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    service = start()
    api = service.client()

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(service.worker.models, "list_models", broken)
    error(api.get("/models"), 500, "internal_error")


def test_bodies_past_the_limit_are_413_with_or_without_a_length(start: Start) -> None:
    api = start(max_body_bytes=2048).client()
    api.put("/models/m", json=DENSE)
    big = b'{"model": "m", "features": [' + b"1, " * 1000 + b"1]}"
    error(api.post("/predict", content=big), 413, "body_too_large")

    def chunks() -> Iterator[bytes]:
        yield big[:1000]
        yield big[1000:]

    error(api.post("/predict", content=chunks()), 413, "body_too_large")
    assert api.get("/models/m").json()["counters"]["predictions"] == 0


def test_an_import_has_its_own_limit_an_export_of_the_default_size_fits(start: Start) -> None:
    """An export file is larger than any batch: an averaged model of the default 2^18 hashed
    weights exports to 6 MB, past the 4 MiB of other bodies. At the import's limit it is
    taken, one byte past it refused (by its length, or as a chunked body is read)."""
    api = start().client()
    assert api.put("/models/big", json={"classes": ["a", "b"], "averaged": True}).is_success
    api.post("/learn", json={"model": "big", "features": {"x": 1.0}, "label": "a"})
    doc = api.get("/models/big/export").content
    assert len(doc) > Settings().max_body_bytes
    as_json = {"content-type": "application/json"}
    assert api.post("/models/big2/import", content=doc, headers=as_json).status_code == 200
    weights = [api.get(f"/models/{m}/weights").json() for m in ("big", "big2")]
    assert weights[0]["rows"] == weights[1]["rows"]

    small = start(max_body_bytes=2048, max_import_bytes=len(doc) + 10).client()
    edge = small.post("/models/m/import", content=doc + b" " * 10, headers=as_json)
    assert edge.status_code == 200, edge.text
    # (with a trailing slash: sent on to the import's path, not refused by other bodies' limit)
    slash = small.post("/models/m/import/", content=doc, headers=as_json)
    assert slash.status_code == 307 and slash.headers["location"].endswith("/models/m/import")
    past = doc + b" " * 11

    def chunks() -> Iterator[bytes]:
        yield past[:1000]
        yield past[1000:]

    for body in (past, chunks()):
        r = error(
            small.post("/models/n/import", content=body, headers=as_json), 413, "body_too_large"
        )
        assert "PERCEPTRON_MAX_IMPORT_BYTES" in r["detail"]
    assert small.get("/models/n").status_code == 404


# --- what the API serves besides JSON ----------------------------------------------------------


def test_the_dashboard_and_its_files(api: httpx.Client) -> None:
    page = api.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for script in ("dashboard.js", "format.js"):  # ES modules: a browser wants a script type
        served = api.get(f"/dashboard/static/{script}")
        assert served.status_code == 200, script
        assert served.headers["content-type"].startswith("text/javascript"), script
    data = api.get("/models")
    assert data.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert data.headers["x-content-type-options"] == "nosniff"


def test_prometheus_figures_are_the_apis(api: httpx.Client) -> None:
    api.put("/models/m", json=DENSE)
    learn(api, "m", [1, 2, 3], "b")
    learn(api, "m", [1, 2, 3], "b")
    text = api.get("/metrics").text
    counters = api.get("/models/m").json()["counters"]
    assert f'perceptron_model_mistakes_total{{model="m"}} {counters["mistakes"]}.0' in text
    assert f'perceptron_model_learned_total{{model="m"}} {counters["learned"]}.0' in text
    assert 'perceptron_http_requests_total{method="POST",route="/learn",status="200"}' in text


def test_roles_limit_what_a_key_may_do(start: Start) -> None:
    api = start(
        auth=True, api_keys="admin:admin-key-0123456789,predict:reader-key-012345:m"
    ).client()
    admin = {"Authorization": "Bearer admin-key-0123456789"}
    reader = {"X-API-Key": "reader-key-012345"}
    error(api.get("/models"), 401, "unauthorized")
    assert api.get("/models").headers["www-authenticate"] == "Bearer"
    assert api.put("/models/m", json=DENSE, headers=admin).status_code == 201
    assert api.put("/models/n", json=DENSE, headers=admin).status_code == 201
    assert api.post(
        "/predict", json={"model": "m", "features": [1, 2, 3]}, headers=reader
    ).is_success
    error(
        api.post("/predict", json={"model": "n", "features": [1, 2, 3]}, headers=reader),
        403,
        "forbidden",
    )
    error(
        api.post(
            "/learn", json={"model": "m", "features": [1, 2, 3], "label": "a"}, headers=reader
        ),
        403,
        "forbidden",
    )
    assert [m["name"] for m in api.get("/models", headers=reader).json()["models"]] == ["m"]
    assert api.get("/healthz").status_code == 200


def test_an_export_imported_into_another_store_is_the_same_model(
    start: Start, clock: Clock
) -> None:
    a = start().client()
    a.put("/models/m", json={"classes": [1, 2, 3], "n_features": 2, "multiclass": "ovo"})
    for x, y in [([1, 0], 1), ([0, 1], 2), ([1, 1], 3), ([2, 1], 1)]:
        learn(a, "m", x, y)
    doc = a.get("/models/m/export").json()
    other = InProcessService(Settings(auth=False, default_model=False), clock=clock).start()
    try:
        b = other.client()
        assert b.post("/models/copy/import", json=doc).status_code == 200
        got, want = b.get("/models/copy/weights").json(), a.get("/models/m/weights").json()
        assert {**got, "model": "m"} == want
        got, want = b.get("/models/copy").json(), a.get("/models/m").json()
        assert (got["version"], got["counters"]) == (want["version"], want["counters"])
        doc["counters"]["mistakes"] = str(doc["seen"] + 1)
        error(b.post("/models/other/import", json=doc), 422, "invalid_import")
        error(b.get("/models/other"), 404, "model_not_found")
    finally:
        other.stop()


# --- one writer per model: workers hand their learns to it ---------------------------------


def test_learns_handed_to_the_writer_are_learned_once_each_in_order(start: Start) -> None:
    workers = [start(embedded=False) for _ in range(3)]
    workers[0].client().put("/models/m", json={"n_features": 2})
    xs = [[float(i % 5 - 2), float(i % 3 - 1)] for i in range(30)]
    ys = [1 if x[0] + x[1] > 0 else -1 for x in xs]

    async def send() -> list[dict[str, Any]]:
        clients = [
            httpx.AsyncClient(base_url=BASE_URL, transport=w.async_transport()) for w in workers
        ]
        try:
            calls = [
                clients[i % 3].post("/learn", json={"model": "m", "features": x, "label": y})
                for i, (x, y) in enumerate(zip(xs, ys, strict=True))
            ]
            return [r.json() for r in await asyncio.gather(*calls)]
        finally:
            for c in clients:
                await c.aclose()

    answers = asyncio.run(send())
    versions = [a["version"] for a in answers if a["updated"]]
    assert sorted(versions) == list(range(1, len(versions) + 1))  # each update once
    info = workers[1].client().get("/models/m").json()
    assert info["counters"]["learned"] == 30 and info["version"] == len(versions)
    weights = {w.client().get("/models/m/weights").text for w in workers}
    assert len(weights) == 1
    assert (
        sum(
            w.worker.learning.writers.writes("m") or "m" in w.worker.learning.writers._leased
            for w in workers
        )
        >= 1
    )


def test_a_learn_nobody_takes_in_time_is_a_503_and_is_not_learned(
    start: Start, keys: redis.Redis
) -> None:
    api = start(embedded=False, learn_wait_s=0.3).client()
    api.put("/models/m", json={"n_features": 2})
    keys.set(ModelKeys("m").writer, "a-stalled-worker", px=60_000)  # holds it, serves nothing
    r = api.post("/learn", json={"model": "m", "features": [1, 1], "label": 1})
    body = error(r, 503, "learn_timeout")
    assert "not learned" in body["detail"]
    keys.delete(ModelKeys("m").writer)
    assert learn(api, "m", [1, 1], 1)["version"] == 1  # now it writes the model itself
    assert api.get("/models/m").json()["counters"]["learned"] == 1


def test_an_imports_own_count_apart_is_checked(api: httpx.Client) -> None:
    """An export of an averaged learner rolled back carries what its counters count beyond
    its own count ('seenoff'): an integer, the count it gives one the service keeps, and no
    fewer than the mistakes."""
    assert api.put("/models/s", json={"n_features": 1, "averaged": True}).is_success
    body = {"model": "s", "features": [[1.0]] * 6, "labels": [1, -1] * 3}
    assert api.post("/learn/batch", json=body).is_success
    assert api.post("/models/s/rollback", json={"version": 1}).is_success
    doc = api.get("/models/s/export").json()
    assert int(doc["counters"]["seenoff"]) == 6 - doc["seen"]
    assert api.post("/models/t/import", json=doc).is_success
    assert api.get("/models/t").json()["counters"]["seen"] == 6
    for bad in ("x", True, -doc["seen"] - 1, 2**60, -int(doc["counters"]["mistakes"])):
        edited = {**doc, "counters": {**doc["counters"], "seenoff": bad}}
        r = error(api.post("/models/u/import", json=edited), 422, "invalid_import")
        assert "seenoff" in r["detail"] or "exceeds the labelled examples" in r["detail"], r
