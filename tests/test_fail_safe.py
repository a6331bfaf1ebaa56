"""A misconfigured or full Redis, hand-edited keys and files: refused loudly, never served wrong.

Each test runs real redis-servers started with the settings under test (an evicting
policy, a small maxmemory) and the service in a thread of the test process.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from service.admin.worker import Worker
from service.cli.loopback import wait_until
from service.settings import Settings

from .answers import error, with_weights
from .servers import RedisServer, ServiceThread

pytestmark = pytest.mark.servers  # each test starts its own redis-server

CHECK_S = 0.2  # PERCEPTRON_STORE_CHECK_S of the services under test


class Api:
    """A service thread on a Redis, its HTTP client, and its worker (to look inside)."""

    def __init__(self, url: str, **overrides: Any) -> None:
        settings = Settings(
            **{"redis_url": url, "auth": False, "store_check_s": CHECK_S, **overrides}
        )
        self.thread = ServiceThread(settings).start()
        self.http = httpx.Client(base_url=self.thread.url, timeout=30)

    @property
    def worker(self) -> Worker:
        worker: Worker = self.thread.app.state.worker
        return worker

    def close(self) -> None:
        self.http.close()
        self.thread.stop()


@pytest.fixture
def apis() -> Iterator[list[Api]]:
    started: list[Api] = []
    yield started
    for api in started:
        api.close()


def start(apis: list[Api], url: str, **overrides: Any) -> Api:
    api = Api(url, **{"default_model": False, **overrides})
    apis.append(api)
    return api


@pytest.fixture
def server() -> Iterator[RedisServer]:
    s = RedisServer().start()
    yield s
    s.stop()


def learn(http: httpx.Client, model: str, n: int, dim: int = 3) -> None:
    rng = np.random.default_rng(n)
    xs = rng.integers(-3, 4, size=(n, dim)).tolist()
    ys = [1 if sum(x) > 0 else -1 for x in xs]
    r = http.post("/learn/batch", json={"model": model, "features": xs, "labels": ys})
    assert r.status_code == 200, r.text


# -- storage that bites back ---------------------------------------------------------------


def test_a_redis_that_may_evict_models_is_refused_loudly_until_fixed(
    apis: list[Api], caplog: pytest.LogCaptureFixture
) -> None:
    evicting = RedisServer("--maxmemory-policy", "allkeys-lru").start()
    try:
        with caplog.at_level(logging.ERROR, logger="perceptron"):
            api = start(apis, evicting.url)
        assert any("store_evicts_keys" in r.getMessage() for r in caplog.records)
        body = error(api.http.get("/readyz"), 503, "store_evicts_keys")
        assert "allkeys-lru" in body["detail"] and "noeviction" in body["detail"]
        assert api.http.get("/healthz").status_code == 200  # the process itself is fine
        error(api.http.put("/models/m", json={"n_features": 3}), 503, "store_evicts_keys")
        error(api.http.get("/models"), 503, "store_evicts_keys")
        r = api.http.post("/predict", json={"model": "m", "features": [1, 2, 3]})
        error(r, 503, "store_evicts_keys")
        # Fixed in Redis: the service serves again by itself.
        with redis.Redis(port=evicting.port) as r:
            r.config_set("maxmemory-policy", "noeviction")
        wait_until(lambda: api.http.get("/readyz").status_code == 200, what="ready again")
        assert api.http.put("/models/m", json={"n_features": 3}).status_code == 201
    finally:
        evicting.stop()


def test_volatile_eviction_policies_are_accepted(apis: list[Api]) -> None:
    # They may evict only keys with an expiry: pending predictions, never a model.
    volatile = RedisServer("--maxmemory-policy", "volatile-lru").start()
    try:
        api = start(apis, volatile.url)
        assert api.http.get("/readyz").status_code == 200
        assert api.http.put("/models/m", json={"n_features": 3}).status_code == 201
    finally:
        volatile.stop()


@pytest.mark.parametrize("lost", ["snapshot", "log", "snapshot-and-log"])
def test_a_model_whose_keys_were_lost_is_never_served(
    server: RedisServer, apis: list[Api], lost: str, caplog: pytest.LogCaptureFixture
) -> None:
    api = start(apis, server.url, compact_every=20)
    api.http.put("/models/m", json={"n_features": 3})
    learn(api.http, "m", 300)
    with redis.Redis(port=server.port) as r:
        wait_until(lambda: int(r.hget("pcp:{m}:meta", "snapv") or 0) > 0, what="compaction")
        learn(api.http, "m", 50)  # updates past the snapshot, in the log
        assert r.llen("pcp:{m}:log") > 0
        pid = api.http.post("/predict", json={"model": "m", "features": [1, 0, 0]}).json()[
            "prediction_id"
        ]
        if "snapshot" in lost:
            r.delete("pcp:{m}:snap")
        if "log" in lost:
            r.delete("pcp:{m}:log")
    fresh = start(apis, server.url)  # a worker that has not loaded the model yet
    with caplog.at_level(logging.ERROR, logger="perceptron"):
        for method, path, body in [
            ("POST", "/predict", {"model": "m", "features": [1, 0, 0]}),
            ("POST", "/learn", {"model": "m", "features": [1, 0, 0], "label": 1}),
            ("GET", "/models/m/weights", None),
            ("GET", "/models/m/metrics", None),
            ("GET", "/models/m/export", None),
        ]:
            found = error(fresh.http.request(method, path, json=body), 503, "model_state_lost")
            assert "import" in found["detail"], found
    assert any("not served" in r.getMessage() for r in caplog.records)
    # A worker that still holds the whole model in memory extends no broken log either.
    if "log" in lost:
        for path, body in [
            ("/learn", {"model": "m", "features": [1, 0, 0], "label": 1}),
            ("/feedback", {"prediction_id": pid, "label": 1}),
        ]:
            error(api.http.post(path, json=body), 503, "model_state_lost")
    # What an admin can do about it: import a good export, or reset.
    assert fresh.http.post("/models/m/reset").status_code == 200
    assert (
        fresh.http.post("/predict", json={"model": "m", "features": [1, 0, 0]}).json()["version"]
        == 0
    )


def test_a_full_redis_answers_json_503_and_nothing_is_half_applied(
    server: RedisServer, apis: list[Api]
) -> None:
    api = start(apis, server.url)
    assert api.http.put("/models/m", json={"n_features": 3}).status_code == 201
    learn(api.http, "m", 20)
    p = api.http.post("/predict", json={"model": "m", "features": [1, 1, 1]}).json()
    before = api.http.get("/models/m").json()
    with redis.Redis(port=server.port) as r:
        # Full: a maxmemory below what it holds, with the default noeviction policy. (Far
        # below: what Redis holds moves by hundreds of kilobytes with its clients' buffers.)
        r.config_set("maxmemory", int(r.info("memory")["used_memory"]) // 2)
        try:
            for method, path, body in [
                ("POST", "/predict", {"model": "m", "features": [1, 2, 3]}),
                ("POST", "/predict/batch", {"model": "m", "features": [[1, 2, 3]]}),
                ("POST", "/learn", {"model": "m", "features": [1, 2, 3], "label": 1}),
                ("POST", "/feedback", {"prediction_id": p["prediction_id"], "label": -1}),
                ("PUT", "/models/other", {"n_features": 3}),
            ]:
                resp = api.http.request(method, path, json=body)
                error(resp, 503, "store_full")
                assert int(resp.headers["retry-after"]) >= 1
            body = error(api.http.get("/readyz"), 503, "store_full")
            assert "maxmemory" in body["detail"]
            # Reads still answer, and nothing changed.
            assert api.http.get("/models/m").json() == before
            assert [m["name"] for m in api.http.get("/models").json()["models"]] == ["m"]
            assert not r.exists("pcp:{other}:meta")
        finally:
            r.config_set("maxmemory", 0)
    wait_until(lambda: api.http.get("/readyz").status_code == 200, what="ready again")
    f = api.http.post("/feedback", json={"prediction_id": p["prediction_id"], "label": -1})
    assert f.status_code == 200 and not f.json()["duplicate"]
    assert api.http.put("/models/other", json={"n_features": 3}).status_code == 201


def hashed_model(http: httpx.Client, name: str, bits: int = 14) -> None:
    assert http.put(f"/models/{name}", json={"hash_bits": bits}).status_code == 201


def test_a_worker_keeps_at_most_its_memory_budget_of_models(
    server: RedisServer, apis: list[Api]
) -> None:
    budget = 1024 * 1024  # 2**14 weights of 8 bytes: 128 KiB a model, 8 models fit
    api = start(apis, server.url, replica_memory_bytes=budget)
    answers = {}
    for i in range(20):
        hashed_model(api.http, f"m{i}")
        api.http.post("/learn", json={"model": f"m{i}", "features": {f"f{i}": 1}, "label": 1})
        answers[i] = api.http.post("/predict", json={"model": f"m{i}", "features": {f"f{i}": 1}})
        assert api.worker.replicas.kept_bytes <= budget
    held = api.worker.replicas.kept_models()
    assert 1 < len(held) <= 8 and held[-1] == "m19"
    metrics = api.http.get("/metrics").text
    assert f"perceptron_worker_replica_bytes {float(api.worker.replicas.kept_bytes)}" in metrics
    assert "perceptron_worker_replica_evictions_total" in metrics
    # A model dropped from memory is read again, exactly, when used.
    again = api.http.post("/predict", json={"model": "m0", "features": {"f0": 1}}).json()
    assert again["score"] == answers[0].json()["score"] and again["version"] == 1
    assert api.worker.replicas.kept_models()[-1] == "m0"


def test_a_huge_model_is_still_served_with_a_smaller_budget(
    server: RedisServer, apis: list[Api]
) -> None:
    api = start(apis, server.url, replica_memory_bytes=1024 * 1024)
    hashed_model(api.http, "big", bits=18)  # 2 MiB of weights
    r = api.http.post("/learn", json={"model": "big", "features": {"a": 1}, "label": 1})
    assert r.status_code == 200
    assert api.worker.replicas.kept_models() == ["big"]


def test_models_deleted_or_reset_elsewhere_leave_every_worker(
    server: RedisServer, apis: list[Api]
) -> None:
    one, two = start(apis, server.url), start(apis, server.url)
    for name in ("gone", "reset", "kept"):
        hashed_model(one.http, name)
        for api in (one, two):
            api.http.post("/predict", json={"model": name, "features": {"a": 1}})
    assert sorted(two.worker.replicas.kept_models()) == ["gone", "kept", "reset"]
    assert one.http.delete("/models/gone").status_code == 204
    assert one.http.post("/models/reset/reset").status_code == 200
    wait_until(
        lambda: two.worker.replicas.kept_models() == ["kept"], what="worker two to forget them"
    )


def test_pending_predictions_of_one_model_are_capped(server: RedisServer, apis: list[Api]) -> None:
    api = start(apis, server.url, max_pending_bytes=20_000)
    api.http.put("/models/m", json={"n_features": 100})
    api.http.put("/models/other", json={"n_features": 100})
    x = {"model": "m", "features": [0.5] * 100}
    ids = []
    while True:
        r = api.http.post("/predict", json=x)
        if r.status_code != 200:
            break
        ids.append(r.json()["prediction_id"])
        assert len(ids) < 100, "no limit was applied"
    body = error(r, 429, "too_many_pending")
    assert "PERCEPTRON_MAX_PENDING_BYTES" in body["detail"]
    assert 1 <= int(r.headers["retry-after"]) <= 86_400 + 86_400 // 64 + 1  # ttl + a bucket
    assert len(ids) >= 10  # about 1 KB each
    # Another model is not held back by this one.
    assert api.http.post("/predict", json={**x, "model": "other"}).status_code == 200
    # Answered predictions no longer count: there is room again.
    for pid in ids[:5]:
        assert (
            api.http.post("/feedback", json={"prediction_id": pid, "label": 1}).status_code == 200
        )
    assert api.http.post("/predict", json=x).status_code == 200
    with redis.Redis(port=server.port) as rc:
        held = int(rc.hget("pcp:{m}:pend", "bytes") or 0)
    assert 0 < held <= 20_000


def test_examples_kept_for_the_metrics_are_bounded(server: RedisServer, apis: list[Api]) -> None:
    api = start(apis, server.url)
    api.http.put("/models/wide", json={"n_features": 2000})
    api.http.put("/models/narrow", json={"n_features": 3})
    for _ in range(3):
        api.http.post("/learn", json={"model": "wide", "features": [1.0] * 2000, "label": 1})
    learn(api.http, "narrow", 300)
    with redis.Redis(port=server.port) as r:
        assert r.llen("pcp:{wide}:recent") == 0  # 16 KB examples: not kept
        assert 100 <= r.llen("pcp:{narrow}:recent") <= 150
    metrics = api.http.get("/models/wide/metrics").json()
    assert metrics["mistake_bound"]["window"] == 0


# -- input that bites back -------------------------------------------------------------------


def test_a_model_name_with_a_final_newline_is_refused(server: RedisServer, apis: list[Api]) -> None:
    api = start(apis, server.url)
    error(api.http.put("/models/m1%0A", json={}), 422, "invalid_model_name")
    error(
        api.http.post("/predict", json={"model": "m1\n", "features": [1]}), 422, "validation_error"
    )
    with redis.Redis(port=server.port) as r:
        assert r.keys("*m1*") == []


@pytest.mark.parametrize(
    "field, value",
    [
        ("feedback_ttl_s", 9_223_372_036_854_775),
        ("feedback_ttl_s", 31 * 86_400),
        ("margin", 1e300),
        ("classes", [1, 2**60]),
        ("classes", ["a", "b" * 300]),
    ],
)
def test_every_configuration_number_is_bounded(
    server: RedisServer, apis: list[Api], field: str, value: Any
) -> None:
    api = start(apis, server.url)
    error(api.http.put("/models/m", json={field: value}), 422, "invalid_config")


def export_of(http: httpx.Client, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = http.get(f"/models/{name}/export").json()
    return doc


@pytest.mark.parametrize(
    "edit",
    [
        "unknown-cell",
        "cell-past-classes",
        "negative-counter",
        "huge-counter",
        "huge-version",
        "huge-seen",
        "mistakes-past-seen",
        "nan-weights",
        "huge-weights",
        "unknown-field",
        "bad-r2",
    ],
)
def test_a_hand_edited_export_is_refused_whole(
    server: RedisServer, apis: list[Api], edit: str
) -> None:
    api = start(apis, server.url)
    api.http.put("/models/m", json={"n_features": 3})
    learn(api.http, "m", 30)
    doc = export_of(api.http, "m")
    counters = dict(doc["counters"])
    w = np.frombuffer(base64.b64decode(doc["weights"]), dtype=np.float64).copy()
    edited: dict[str, Any] = {
        "unknown-cell": {**doc, "counters": {**counters, "cm:x:y": 1}},
        "cell-past-classes": {**doc, "counters": {**counters, "cm:5:0": 1}},
        "negative-counter": {**doc, "counters": {**counters, "feedback": -1}},
        "huge-counter": {**doc, "counters": {**counters, "predictions": 10**30}},
        "huge-version": {**doc, "version": 10**20},
        "huge-seen": {**doc, "seen": 2**63},
        "mistakes-past-seen": {**doc, "counters": {**counters, "mistakes": doc["seen"] + 1}},
        "nan-weights": with_weights(doc, np.where(np.arange(len(w)) == 0, np.nan, w)),
        "huge-weights": with_weights(doc, w + 1e300),
        "unknown-field": {**doc, "extra": 1},
        "bad-r2": {**doc, "counters": {**counters, "r2": "inf"}},
    }[edit]
    before = api.http.get("/models/m").json(), api.http.get("/models/m/weights").json()
    error(api.http.post("/models/m/import", json=edited), 422, "invalid_import")
    error(api.http.post("/models/new/import", json=edited), 422, "invalid_import")
    assert (api.http.get("/models/m").json(), api.http.get("/models/m/weights").json()) == before
    assert api.http.get("/models/new").status_code == 404


def test_no_model_breaks_the_metrics_of_the_others(server: RedisServer, apis: list[Api]) -> None:
    api = start(apis, server.url)
    for name in ("good", "odd"):
        api.http.put(f"/models/{name}", json={"n_features": 3})
        learn(api.http, name, 10)
    with redis.Redis(port=server.port) as rc:  # what a hand edit in Redis could leave
        rc.hset("pcp:{odd}:meta", mapping={"cm:x:y": 1, "cm:7:0": 3})
        r = api.http.get("/metrics")
        assert r.status_code == 200
        assert 'perceptron_model_seen_total{model="good"} 10.0' in r.text
        assert 'perceptron_model_seen_total{model="odd"} 10.0' in r.text
        odd = api.http.get("/models/odd/metrics")
        assert odd.status_code == 200 and sum(map(sum, odd.json()["confusion"]["matrix"])) == 10
        rc.hset("pcp:{odd}:meta", "predictions", "many")
        r = api.http.get("/metrics")
        assert r.status_code == 200
        assert 'perceptron_model_seen_total{model="good"} 10.0' in r.text
        # None of its figures read from its counters; its pending bytes are in another hash.
        assert {line.split("{")[0] for line in r.text.splitlines() if 'model="odd"' in line} == {
            "perceptron_model_pending_bytes",
            "perceptron_model_pending_max_bytes",
        }


def test_an_import_at_the_same_version_takes_effect_on_every_worker(
    server: RedisServer, apis: list[Api]
) -> None:
    one, two = start(apis, server.url), start(apis, server.url)
    one.http.put("/models/m", json={"n_features": 3})
    x = {"model": "m", "features": [1, 2, 3]}
    assert two.http.post("/predict", json=x).json()["score"] == 0.0  # two holds it, at 0
    doc = export_of(one.http, "m")
    assert doc["version"] == 0
    # A file made elsewhere at version 0, with weights: 1, 1, 1 and a bias of 0.5.
    made = with_weights(doc, np.array([1.0, 1.0, 1.0, 0.5]))
    r = one.http.post("/models/m/import", json=made)
    assert r.status_code == 200, r.text
    for api in (one, two):
        assert api.http.post("/predict", json=x).json()["score"] == 6.5
        assert api.http.get("/models/m/weights").json()["rows"][0]["weights"] == [1, 1, 1]


# -- the promises of docs/api.md --------------------------------------------------------------


def test_feedback_sent_again_is_a_duplicate_for_a_whole_ttl_after_its_answer(
    server: RedisServer, apis: list[Api]
) -> None:
    api = start(apis, server.url)
    api.http.put("/models/m", json={"n_features": 3, "feedback_ttl_s": 60})
    pid = api.http.post("/predict", json={"model": "m", "features": [1, 2, 3]}).json()[
        "prediction_id"
    ]
    key = f"pcp:{{m}}:p:{pid.split(':')[1]}"
    with redis.Redis(port=server.port) as r:
        r.pexpire(key, 300)  # as if the label came 59.7 s after the prediction
        first = api.http.post("/feedback", json={"prediction_id": pid, "label": 1}).json()
        assert r.pttl(key) > 55_000  # the answer is kept for the ttl from now
    again = api.http.post("/feedback", json={"prediction_id": pid, "label": 1}).json()
    assert again == {**first, "duplicate": True}


def test_a_deleted_default_model_stays_deleted_after_a_restart(
    server: RedisServer, apis: list[Api]
) -> None:
    first = start(apis, server.url, default_model=True)
    wait_until(lambda: first.http.get("/models/default").status_code == 200, what="default")
    assert first.http.delete("/models/default").status_code == 204
    first.close()
    apis.remove(first)
    second = start(apis, server.url, default_model=True)
    assert second.http.put("/models/mine", json={}).status_code == 201
    with redis.Redis(port=server.port) as r:
        wait_until(lambda: r.exists("pcp:default-made"), what="marker")
    assert second.http.get("/models/default").status_code == 404
    # A new store (flushed) gets its default model again.
    with redis.Redis(port=server.port) as r:
        r.flushall()
    third = start(apis, server.url, default_model=True)
    wait_until(lambda: third.http.get("/models/default").status_code == 200, what="default")


# -- the browser side --------------------------------------------------------------------------


def test_answers_carry_security_headers(server: RedisServer, apis: list[Api]) -> None:
    api = start(apis, server.url)
    page = api.http.get("/dashboard")
    csp = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp
    assert "unsafe-inline" not in csp
    for r in (page, api.http.get("/models"), api.http.get("/nope")):
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
    assert (
        api.http.get("/models").headers["content-security-policy"].startswith("default-src 'none'")
    )
