"""A Redis restart costs no request once Redis is back; a lost reply is never sent twice.

The pooled connections a worker holds all die with a Redis restart. Taking one of them
for a request, nothing of the request has been written yet, so the client reconnects
then and the request succeeds. A command whose bytes went out and whose reply never
came may have run, so it is not sent again: it stays a 503.

Each test has its own redis-server (append-only file on, the same port and folder across
a restart) and a service thread whose Redis calls time out after ``TIMEOUT`` seconds (the
restart tests: the service's default timeout).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from service.cli.loopback import wait_until
from service.settings import Settings
from service.store import ops
from service.store.connect import open_client

from .servers import RedisServer, ServiceThread
from .test_outages import TIMEOUT, pause

log = logging.getLogger("perceptron.tests")

HEALTH_CHECK_INTERVAL = 1.0  # of the service's Redis connections (service/store/connect.py)

# The first request after the restart, one of each kind: the probe, a read, a write.
FIRST: dict[str, tuple[str, str, Any]] = {
    "readyz": ("GET", "/readyz", None),
    "predict": ("POST", "/predict", {"model": "d", "features": [1, 2, 3]}),
    "learn": ("POST", "/learn", {"model": "d", "features": [1, -1, 0], "label": -1}),
}


@pytest.fixture
def timeout() -> float:
    """The service's PERCEPTRON_REDIS_TIMEOUT_S: short, for the tests of a lost reply."""
    return TIMEOUT


@pytest.fixture
def api(store: RedisServer, timeout: float) -> Iterator[httpx.Client]:
    service = ServiceThread(
        Settings(redis_url=store.url, auth=False, redis_timeout_s=timeout, default_model=False)
    ).start()
    try:
        with httpx.Client(base_url=service.url, timeout=30) as client:
            # Set-up, not a claim: a request that a busy machine stalled past the short timeout
            # (a 503, seen once from a fresh clone) is sent again; the tests count from here.
            model = {"n_features": 3}  # (200: the same model, made by a request that 503'd)
            made = (200, 201)
            wait_until(lambda: client.put("/models/d", json=model).status_code in made, 30)
            learn = {"model": "d", "features": [1, 2, 3], "label": 1}
            wait_until(lambda: client.post("/learn", json=learn).status_code == 200, 30)
            yield client
    finally:
        service.stop()


def open_connections(client: httpx.Client, n: int) -> None:
    """Have the worker's pool hold ``n`` connections (``n`` requests at once)."""
    with httpx.Client(base_url=str(client.base_url), timeout=30) as c:
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            codes = list(pool.map(lambda _: c.get("/models/d").status_code, range(n)))
    assert codes == [200] * n


# The service's own: a dead connection fails at once whatever the timeout, and a short one
# would fail a request that a busy machine stalls for a moment.
DEFAULT_TIMEOUT = Settings.model_fields["redis_timeout_s"].default


@pytest.mark.parametrize("timeout", [DEFAULT_TIMEOUT], ids=["default-timeout"])
@pytest.mark.parametrize("idle", [0.0, HEALTH_CHECK_INTERVAL + 0.3], ids=["at-once", "idle"])
@pytest.mark.parametrize("first", list(FIRST))
def test_the_first_request_after_a_redis_restart_succeeds(
    store: RedisServer, api: httpx.Client, first: str, idle: float
) -> None:
    """At once: the connection taken was closed by the server. Idle: past the health-check
    interval as well, so the connection is PINGed first, and that PING fails."""
    open_connections(api, 4)
    before = api.get("/models/d").json()

    store.stop()
    store.start()  # same port, same folder: the append-only file brings the data back
    time.sleep(idle)

    method, path, body = FIRST[first]
    started = time.monotonic()
    r = api.request(method, path, json=body)
    # (how long it took tells a store call's timeout from a connection that failed at once)
    took = f"{time.monotonic() - started:.3f} s"
    assert r.status_code == 200, (first, r.status_code, r.text, took)
    # And every kind of request after it.
    for method, path, body in FIRST.values():
        r = api.request(method, path, json=body)
        assert r.status_code == 200, (path, r.status_code, r.text)
    after = api.get("/models/d").json()
    assert after["counters"]["learned"] == before["counters"]["learned"] + 1 + (first == "learn")


def test_a_pooled_connection_whose_health_check_ping_fails_is_replaced(
    store: RedisServer,
) -> None:
    """The server closes an idle pooled connection and the client has not seen it yet (its
    event loop did not run meanwhile): the PING before the next command finds it dead."""

    async def main() -> None:
        client = open_client(Settings(redis_url=store.url, redis_timeout_s=TIMEOUT))
        try:
            assert await client.ping()
            pooled = await client.client_id()
            with redis.Redis(port=store.port) as other:  # blocks this loop: no EOF seen
                assert other.client_kill_filter(_id=pooled) == 1
            time.sleep(HEALTH_CHECK_INTERVAL + 0.1)
            assert await client.ping()  # the PING first, then a new connection
            assert await client.client_id() != pooled
        finally:
            await client.aclose()

    asyncio.run(main())


class ScriptWatch:
    """The scripts Redis runs while it is watched (MONITOR), counted by their digest: the
    writer's own loop (TAKE, every WAIT_S) runs beside a request's scripts."""

    def __init__(self, port: int) -> None:
        self._client = redis.Redis(port=port)
        self._monitor = self._client.monitor()  # type: ignore[no-untyped-call]
        self._monitor.__enter__()
        self.shas: list[str] = []
        self._stop = False
        self._thread = threading.Thread(target=self._watch)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop:
            command = self._monitor.next_command()["command"]
            if command.upper().startswith("EVALSHA "):
                self.shas.append(command.split()[1])

    def stop(self) -> None:
        self._stop = True
        with redis.Redis(port=self._client.connection_pool.connection_kwargs["port"]) as r:
            r.ping()  # a command for the watch to see: it then stops
        self._thread.join(10)
        self._client.close()

    def calls(self, *scripts: str) -> int:
        """How many times these scripts ran (their source)."""
        digests = {hashlib.sha1(script.encode()).hexdigest() for script in scripts}
        return sum(sha in digests for sha in self.shas)


def test_a_learn_whose_reply_is_lost_is_a_503_and_is_not_sent_again(
    store: RedisServer, api: httpx.Client
) -> None:
    """Redis stalls longer than the service's timeout while a /learn is in flight: the
    script was sent and its reply lost. Redis wakes before twice the timeout, so a client
    that sent it again on a new connection would see it run twice; this one must not. Nor
    may its answer invite the caller to: it says the outcome is unknown (it was a 503
    store_unavailable with Retry-After, and a client that followed it learned twice)."""
    before = api.get("/models/d").json()
    watch = ScriptWatch(store.port)
    sleeper = pause(store, TIMEOUT + 0.4)
    try:
        start = time.monotonic()
        learn = {"model": "d", "features": [0, 1, 1], "label": -1}
        resp = api.post("/learn", json=learn)
        took = time.monotonic() - start
        # In order, not against a clock: the service gave up while Redis still slept
        # (redis-cli's DEBUG SLEEP returns when Redis wakes), on a busy machine too.
        still_asleep = sleeper.poll() is None
    finally:
        sleeper.wait(10)
    assert resp.status_code == 503, resp.text
    assert resp.json()["code"] == "learn_outcome_unknown", resp.text
    assert "retry-after" not in resp.headers
    assert still_asleep, f"the 503 came after Redis woke ({took:.2f} s)"
    wait_until(lambda: api.get("/readyz").status_code == 200, timeout=10, what="readyz")
    # The scripts the stalled /learn sent (its learn, maybe a sync first): each once.
    watch.stop()
    scripts = (ops.learn.SCRIPT, ops.sync.SCRIPT, ops.handover.HANDOFF, ops.handover.WITHDRAW)
    calls = watch.calls(*(s.lua for s in scripts))
    after = api.get("/models/d").json()
    ran = after["counters"]["learned"] - before["counters"]["learned"]
    log.info("the learn whose reply was lost ran %d time(s); %d script call(s)", ran, calls)
    assert ran in (0, 1)
    assert calls <= 1
    assert after["version"] - before["version"] <= ran
    # And the service goes on.
    r2 = api.post("/learn", json={"model": "d", "features": [1, 1, 1], "label": 1})
    assert r2.status_code == 200, r2.text
