"""Redis down or slow: the service answers 503 at once, never hangs, and heals by itself.

Each test has its own redis-server (append-only file on, same port and folder across a
restart, so the data survives like a real deployment's) and a service thread whose Redis
calls time out after ``TIMEOUT`` seconds.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from service.cli.loopback import wait_until
from service.settings import Settings

from .servers import RedisServer, ServiceThread

log = logging.getLogger("perceptron.tests")  # shown with --log-cli-level=INFO

TIMEOUT = 0.5  # PERCEPTRON_REDIS_TIMEOUT_S of the service under test
QUICK = TIMEOUT + 1.0  # the longest a request may take while the store is away

# Every endpoint that needs the store, with a body that would succeed when it is up.
STORE_CALLS: list[tuple[str, str, Any]] = [
    ("GET", "/models", None),
    ("GET", "/models/d", None),
    ("PUT", "/models/other", {"n_features": 2}),
    ("DELETE", "/models/gone", None),
    ("GET", "/models/d/weights", None),
    ("GET", "/models/d/metrics", None),
    ("GET", "/models/d/export", None),
    ("POST", "/models/gone/reset", None),
    ("POST", "/predict", {"model": "d", "features": [1, 2, 3]}),
    ("POST", "/predict/batch", {"model": "d", "features": [[1, 2, 3], [0, 1, 0]]}),
    ("POST", "/feedback", {"prediction_id": "d:AAAAAAAAAAAAAAAAAAAA", "label": 1}),
    (
        "POST",
        "/feedback/batch",
        {"feedback": [{"prediction_id": "d:AAAAAAAAAAAAAAAAAAAA", "label": 1}]},
    ),
    ("POST", "/learn", {"model": "d", "features": [1, 2, 3], "label": 1}),
    ("POST", "/learn/batch", {"model": "d", "features": [[1, 2, 3]], "labels": [1]}),
]


@pytest.fixture
def api(store: RedisServer) -> Iterator[httpx.Client]:
    service = ServiceThread(
        Settings(redis_url=store.url, auth=False, redis_timeout_s=TIMEOUT, default_model=False)
    ).start()
    with httpx.Client(base_url=service.url, timeout=30) as client:
        assert client.put("/models/d", json={"n_features": 3}).status_code == 201
        yield client
    service.stop()


def timed(
    client: httpx.Client, method: str, path: str, body: Any = None
) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    r = client.request(method, path, json=body)
    return r, time.monotonic() - start


def assert_unavailable(r: httpx.Response, took: float, what: str) -> None:
    assert r.status_code == 503, (what, r.status_code, r.text)
    assert r.json()["code"] == "store_unavailable", (what, r.text)
    assert int(r.headers["retry-after"]) >= 1, what
    log.info(f"{what}: 503 in {took:.2f} s")
    assert took < QUICK, f"{what} took {took:.2f} s with the store away"


def assert_scraped_not_ready(r: httpx.Response, took: float) -> None:
    """/metrics with the store away: answered at once, with the HTTP figures and
    ``perceptron_ready 0`` instead of the models' figures (deploy/MONITORING.md)."""
    assert r.status_code == 200 and took < QUICK, (r.status_code, took, r.text)
    lines = r.text.splitlines()
    assert "perceptron_ready 0.0" in lines
    assert any(line.startswith("perceptron_http_requests_total{") for line in lines)
    assert not any(line.startswith("perceptron_model_") for line in lines)


def train(client: httpx.Client, n: int) -> list[dict[str, Any]]:
    """``n`` acknowledged updates: predictions of 0 that were wrong, then their feedback."""
    answers = []
    for i in range(n):
        p = client.post("/predict", json={"model": "d", "features": [1, i % 3, -1]})
        assert p.status_code == 200, p.text
        label = -1 if p.json()["label"] == 1 else 1
        f = client.post(
            "/feedback", json={"prediction_id": p.json()["prediction_id"], "label": label}
        )
        assert f.status_code == 200, f.text
        answers.append(f.json())
    return answers


def test_redis_down_gives_fast_503s_and_the_service_recovers_by_itself(
    store: RedisServer, api: httpx.Client
) -> None:
    acknowledged = train(api, 20)
    assert all(a["updated"] for a in acknowledged)
    weights_before = api.get("/models/d/weights").json()
    assert weights_before["version"] == 20
    pending = api.post("/predict", json={"model": "d", "features": [2, 2, 2]}).json()

    store.stop()
    assert api.get("/healthz").status_code == 200
    r, took = timed(api, "GET", "/readyz")
    assert_unavailable(r, took, "/readyz")
    for method, path, body in STORE_CALLS:
        r, took = timed(api, method, path, body)
        assert_unavailable(r, took, f"{method} {path}")
    assert api.get("/healthz").status_code == 200
    r, took = timed(api, "GET", "/metrics")
    assert_scraped_not_ready(r, took)

    store.start()  # same port, same folder: the append-only file brings the data back
    wait_until(lambda: api.get("/readyz").status_code == 200, timeout=10, what="readyz")
    scrape = api.get("/metrics").text.splitlines()
    assert "perceptron_ready 1.0" in scrape
    assert 'perceptron_model_seen_total{model="d"} 20.0' in scrape
    # Updates acknowledged before the outage are all there, and so is the pending prediction.
    assert api.get("/models/d/weights").json() == weights_before
    f = api.post("/feedback", json={"prediction_id": pending["prediction_id"], "label": 1})
    assert f.status_code == 200 and f.json()["duplicate"] is False
    after = train(api, 5)
    assert after[-1]["version"] == 20 + int(f.json()["updated"]) + 5
    info = api.get("/models/d").json()
    assert info["version"] == after[-1]["version"]
    assert info["counters"]["feedback"] == 20 + 1 + 5


def pause(store: RedisServer, seconds: float) -> subprocess.Popen[bytes]:
    """Make the redis-server unresponsive for ``seconds`` (it blocks in DEBUG SLEEP)."""
    proc = subprocess.Popen(
        ["redis-cli", "-p", str(store.port), "DEBUG", "SLEEP", str(seconds)],
        stdout=subprocess.DEVNULL,
    )
    probe = redis.Redis(port=store.port, socket_timeout=0.05, retry=Retry(NoBackoff(), 0))
    with probe:
        wait_until(lambda: _stalled(probe), timeout=5, what="redis to stall")
    return proc


def _stalled(probe: redis.Redis) -> bool:
    try:
        probe.ping()
    except redis.TimeoutError:
        return True
    return False


def test_slow_redis_gives_503_within_the_timeout_and_never_hangs(
    store: RedisServer, api: httpx.Client
) -> None:
    p = api.post("/predict", json={"model": "d", "features": [1, 1, 1]}).json()
    sleeper = pause(store, 2)
    try:
        results: dict[str, tuple[httpx.Response, float]] = {}

        def call(key: str, method: str, path: str, body: Any) -> None:
            with httpx.Client(base_url=str(api.base_url), timeout=30) as c:
                results[key] = timed(c, method, path, body)

        calls = {
            "learn": ("POST", "/learn", {"model": "d", "features": [1, 0, 0], "label": 1}),
            "feedback": ("POST", "/feedback", {"prediction_id": p["prediction_id"], "label": 1}),
            "predict": ("POST", "/predict", {"model": "d", "features": [0, 1, 0]}),
            "read": ("GET", "/models/d", None),
            "ready": ("GET", "/readyz", None),
            "scrape": ("GET", "/metrics", None),
        }
        threads = [threading.Thread(target=call, args=(k, *c)) for k, c in calls.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert set(results) == set(calls), "a request never came back"
        for key, (r, took) in results.items():
            if key == "scrape":
                assert_scraped_not_ready(r, took)
                continue
            if key == "learn" and r.status_code == 503 and r.json()["code"] != "store_unavailable":
                # its commit was sent before Redis stalled: whether it ran cannot be known,
                # and the answer says so, inviting no retry
                assert r.json()["code"] == "learn_outcome_unknown", r.text
                assert "retry-after" not in r.headers and took < QUICK, (r.headers, took)
                continue
            assert_unavailable(r, took, key)
        assert api.get("/healthz").status_code == 200
    finally:
        sleeper.wait(10)
    wait_until(lambda: api.get("/readyz").status_code == 200, timeout=10, what="readyz")
    # A write that timed out may still have run once Redis woke up (the script was sent):
    # at most once, so the feedback again is either the first application or a duplicate.
    info = api.get("/models/d").json()
    assert info["counters"]["learned"] <= 1
    # Sent again, it may itself time out on a loaded machine (Redis still runs the scripts
    # queued while it slept, each fsynced): then it is sent again, and only the totals count.
    tries = 0
    while tries < 5:
        tries += 1
        f = api.post("/feedback", json={"prediction_id": p["prediction_id"], "label": 1})
        if f.status_code != 503 or f.json()["code"] != "store_unavailable":
            break
    assert f.status_code == 200, f.text
    if tries == 1:
        assert info["counters"]["feedback"] == int(f.json()["duplicate"])
    after = api.get("/models/d").json()
    log.info(
        "after the 503s: the timed-out learn ran %d time(s), the feedback sent again was %s",
        info["counters"]["learned"],
        "a duplicate (it had run)" if f.json()["duplicate"] else "applied now (it had not run)",
    )
    assert after["counters"]["feedback"] == 1  # applied once, however often it was sent
    if tries == 1:
        assert after["version"] == info["version"] + (
            0 if f.json()["duplicate"] else int(f.json()["updated"])
        )
    # And it works again.
    assert (
        api.post("/learn", json={"model": "d", "features": [1, 0, 0], "label": 1}).status_code
        == 200
    )
