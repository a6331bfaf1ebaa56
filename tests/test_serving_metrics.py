"""/metrics' serving figures (service/metrics/readiness.py), which the alert rules of
deploy/alerts.yml read: readiness, Redis's memory and maxmemory, each model's pending bytes
and their cap. Each is checked against what it stands for: /readyz's answer, Redis's INFO,
and the bytes the predict script itself counts against the cap."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import fakeredis
import httpx
import pytest
import redis

from service.settings import Settings

from .inprocess import Clock, InProcessService, clock_the_store
from .test_prometheus import samples

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(api: httpx.Client) -> Samples:
    r = api.get("/metrics")
    assert r.status_code == 200, r.text
    return samples(r.text)


def value(s: Samples, name: str, **labels: str) -> float:
    return s[(name, tuple(sorted(labels.items())))]


def names(s: Samples) -> set[str]:
    return {name for name, _ in s}


def predict(api: httpx.Client, model: str, n: int = 1) -> list[str]:
    ids = []
    for _ in range(n):
        r = api.post("/predict", json={"model": model, "features": [1, 0, 2]})
        assert r.status_code == 200, r.text
        ids.append(r.json()["prediction_id"])
    return ids


# -- in-process: the store's INFO and time are the test's ----------------------------------


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    clock_the_store(c, monkeypatch)
    return c


@pytest.fixture
def start(fake_redis: fakeredis.FakeServer, clock: Clock) -> Iterator[Any]:
    """Start a worker on the test's store (not embedded: it checks the store's INFO)."""
    started: list[InProcessService] = []

    def make(**overrides: Any) -> InProcessService:
        settings = Settings(**{"auth": False, "default_model": False, **overrides})
        service = InProcessService(settings, fake_redis, clock, embedded=False).start()
        started.append(service)
        return service

    yield make
    for service in started:
        service.stop()


def test_ready_is_what_readyz_answers(start: Any, fake_redis: fakeredis.FakeServer) -> None:
    service = start()
    api = service.client()
    api.put("/models/m", json={"n_features": 3})
    s = scrape(api)
    assert api.get("/readyz").status_code == 200
    assert value(s, "perceptron_ready") == 1
    assert value(s, "perceptron_model_seen_total", model="m") == 0

    # A policy that may evict a model's keys: not ready, and no model is read from it.
    service.redis_info.update(maxmemory_policy="allkeys-lru", maxmemory=1000, used_memory=10)
    assert api.get("/readyz").json()["code"] == "store_evicts_keys"
    s = scrape(api)
    assert value(s, "perceptron_ready") == 0
    assert "perceptron_model_seen_total" not in names(s)
    assert "perceptron_model_pending_bytes" not in names(s)
    assert "perceptron_redis_maxmemory_bytes" in names(s)  # Redis itself is read

    # Full: not ready (writes are refused), though the figures can still be read.
    service.redis_info.update(maxmemory_policy="noeviction", maxmemory=100, used_memory=100)
    assert api.get("/readyz").json()["code"] == "store_full"
    s = scrape(api)
    assert value(s, "perceptron_ready") == 0
    assert value(s, "perceptron_model_seen_total", model="m") == 0

    # Away: the scrape still answers, with the HTTP figures and nothing read from Redis.
    fake_redis.connected = False
    try:
        assert api.get("/readyz").json()["code"] == "store_unavailable"
        s = scrape(api)
    finally:
        fake_redis.connected = True
    assert value(s, "perceptron_ready") == 0
    assert "perceptron_http_requests_total" in names(s)
    assert not {n for n in names(s) if n.startswith(("perceptron_model_", "perceptron_redis_"))}

    service.redis_info["used_memory"] = 10
    assert api.get("/readyz").status_code == 200
    assert value(scrape(api), "perceptron_ready") == 1


def test_redis_memory_is_what_its_info_says(start: Any) -> None:
    service = start()
    service.redis_info.update(maxmemory=1000, used_memory=901)
    s = scrape(service.client())
    (used,) = [(k, v) for k, v in s.items() if k[0] == "perceptron_redis_memory_used_bytes"]
    (limit,) = [(k, v) for k, v in s.items() if k[0] == "perceptron_redis_maxmemory_bytes"]
    assert used[1] == 901 and limit[1] == 1000
    assert used[0][1] == limit[0][1] and used[0][1][0][0] == "node"  # the same node
    service.redis_info["maxmemory"] = 0  # no limit: said so, as 0
    assert [v for k, v in scrape(service.client()).items() if "maxmemory" in k[0]] == [0]


def test_the_embedded_store_has_no_redis_memory(fake_redis: fakeredis.FakeServer) -> None:
    service = InProcessService(Settings(auth=False, default_model=False), fake_redis).start()
    try:
        s = scrape(service.client())
    finally:
        service.stop()
    assert value(s, "perceptron_ready") == 1
    assert not {n for n in names(s) if n.startswith("perceptron_redis_")}


def test_pending_bytes_follow_predictions_feedback_and_time(
    start: Any, fake_redis: fakeredis.FakeServer, clock: Clock
) -> None:
    api = start(max_pending_bytes=10_000).client()
    api.put("/models/p", json={"n_features": 3, "feedback_ttl_s": 64})  # buckets of 1 s
    api.put("/models/q", json={"n_features": 3})
    s = scrape(api)
    assert value(s, "perceptron_model_pending_bytes", model="p") == 0
    assert value(s, "perceptron_model_pending_max_bytes", model="p") == 10_000
    assert value(s, "perceptron_model_pending_max_bytes", model="q") == 10_000

    ids = predict(api, "p", 3)
    keys = fakeredis.FakeRedis(server=fake_redis)
    counted = int(keys.hget("pcp:{p}:pend", "bytes") or 0)  # what the scripts keep
    assert counted > 0
    assert value(scrape(api), "perceptron_model_pending_bytes", model="p") == counted
    assert value(scrape(api), "perceptron_model_pending_bytes", model="q") == 0
    # An answered prediction no longer counts.
    assert api.post("/feedback", json={"prediction_id": ids[0], "label": 1}).status_code == 200
    left = value(scrape(api), "perceptron_model_pending_bytes", model="p")
    assert 0 < left < counted and left == int(keys.hget("pcp:{p}:pend", "bytes") or 0)
    # Once they lapse they no longer count either, though the stored sum still says so
    # until the next prediction makes the script drop them.
    clock.advance(64 + 2)
    assert value(scrape(api), "perceptron_model_pending_bytes", model="p") == 0
    assert int(keys.hget("pcp:{p}:pend", "bytes") or 0) == left
    keys.close()


def test_no_limit_is_exported_as_zero(start: Any) -> None:
    api = start(max_pending_bytes=0).client()
    api.put("/models/p", json={"n_features": 3})
    predict(api, "p")
    s = scrape(api)
    assert value(s, "perceptron_model_pending_max_bytes", model="p") == 0
    assert value(s, "perceptron_model_pending_bytes", model="p") > 0


HELD = re.compile(r"holds (\d+) bytes of predictions")


def test_pending_bytes_are_what_the_cap_counts_as_they_lapse(start: Any, clock: Clock) -> None:
    """The scrape's reading (Python) against the predict script's (Lua), second by second
    while predictions made at different times lapse: a worker whose cap refuses every
    prediction reports the script's count in its 429."""
    # The moments are the test's steps: a bucket that lapsed between the scrape and the script
    # by the real time they took would make them differ.
    clock.stop()
    api = start(max_pending_bytes=1_000_000).client()
    refusing = start(max_pending_bytes=1).client()
    api.put("/models/p", json={"n_features": 3, "feedback_ttl_s": 100})  # buckets of 2 s

    def script_count() -> int:
        r = refusing.post("/predict", json={"model": "p", "features": [1, 0, 2]})
        assert r.status_code == 429, r.text
        m = HELD.search(r.json()["detail"])
        assert m is not None, r.text
        return int(m[1])

    for _ in range(6):  # predictions in several buckets
        predict(api, "p", 2)
        clock.advance(1.5)
    readings = []
    for _ in range(2 * 110):
        scraped = value(scrape(api), "perceptron_model_pending_bytes", model="p")
        assert scraped == script_count(), f"{clock.skipped} s skipped"
        readings.append(scraped)
        clock.advance(0.5)
    assert readings[0] > 0 and readings[-1] == 0
    assert len(set(readings)) > 4  # they lapsed bucket by bucket, not all at once


# -- on the service in-process and on the real one ------------------------------------------


@pytest.mark.in_process
def test_pending_bytes_count_each_prediction_until_answered(
    client: httpx.Client, redis_client: redis.Redis
) -> None:
    client.put("/models/p", json={"n_features": 3})
    ids = predict(client, "p", 4)
    stored = int(redis_client.hget("pcp:{p}:pend", "bytes") or 0)
    assert stored > 0
    assert value(scrape(client), "perceptron_model_pending_bytes", model="p") == stored
    for pid in ids:
        assert client.post("/feedback", json={"prediction_id": pid, "label": 1}).status_code == 200
    s = scrape(client)
    assert value(s, "perceptron_model_pending_bytes", model="p") == 0
    assert value(s, "perceptron_model_pending_max_bytes", model="p") == (
        Settings.model_fields["max_pending_bytes"].default
    )
    assert value(s, "perceptron_ready") == 1


# -- a real Redis -------------------------------------------------------------------------------


def test_redis_memory_figures_are_the_servers_own(
    client: httpx.Client, redis_url: str, redis_server: Any
) -> None:
    with redis.Redis.from_url(redis_url) as r:
        before = r.config_get("maxmemory")["maxmemory"]
        r.config_set("maxmemory", str(512 * 1024 * 1024))
        try:
            s = scrape(client)
            used = int(r.info("memory")["used_memory"])
        finally:
            r.config_set("maxmemory", before)
    node = f"127.0.0.1:{redis_server.port}"
    assert value(s, "perceptron_redis_maxmemory_bytes", node=node) == 512 * 1024 * 1024
    scraped = value(s, "perceptron_redis_memory_used_bytes", node=node)
    assert 0 < scraped and abs(scraped - used) < 1024 * 1024, (scraped, used)
