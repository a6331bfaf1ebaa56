"""The compose topology as real processes on loopback (deploy/topology.py), under load and faults.

redis-server with AOF (appendfsync always), two ``perceptron serve`` processes of two workers
each, nginx in front. Many concurrent clients send a mixed load of predict, feedback and learn
through nginx to a binary dense model with integer features, so every answered update can be
replayed exactly. Then: an API process is killed (-9, with its workers), and Redis is killed and
restarted on its AOF, and frozen (SIGSTOP) and thawed.

What a client may see, and what must hold:
- no fault: every request succeeds; the weights are exactly the sum of the answered updates,
  the mistake counter the number of answered mistakes.
- a fault: only requests in flight, or made while Redis is away, fail, each promptly and with a
  clear status (nginx's 502 for the requests the killed process held; the service's 503 while
  Redis is away). /feedback is retried by the clients until answered (the service makes it
  idempotent), so every feedback ends acknowledged. A failed /learn may or may not have been
  applied: the final model must be the answered updates plus some subset of those failed learns,
  and nothing answered may be missing.
"""

from __future__ import annotations

import random
import re
import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import pytest

from .servers import load_topology

pytestmark = pytest.mark.servers  # nginx, Redis and API processes

ROOT = Path(__file__).resolve().parents[1]
D = 5
REDIS_TIMEOUT_S = 2.0  # the service default
WORKERS = 2
# After Redis restarts, each idle connection a worker kept in its redis-py pool from before the
# crash fails once when next used ("Connection closed by server": the pool does not notice the
# dead socket before use), so that many requests after the restart still get a quick 503.


topology = load_topology()


@pytest.fixture(scope="module")
def topo() -> Iterator[Any]:
    t = topology.Topology(
        apis=2,
        workers=WORKERS,
        appendfsync="always",
        env={
            "PERCEPTRON_REDIS_TIMEOUT_S": str(REDIS_TIMEOUT_S),
            "PERCEPTRON_LOG_LEVEL": "warning",
            "PERCEPTRON_DEFAULT_MODEL": "false",
        },
    ).start()
    yield t
    t.stop()
    shutil.rmtree(t.workdir, ignore_errors=True)


@contextmanager
def logs_on_failure(topo: Any) -> Iterator[None]:
    try:
        yield
    except AssertionError as e:
        raise AssertionError(f"{e}\n\n{topo.logs(20)}") from e


def client(topo: Any, timeout: float = 15.0) -> httpx.Client:
    return httpx.Client(base_url=topo.url, headers=topo.headers, timeout=timeout)


def create_model(topo: Any, name: str) -> None:
    with client(topo) as c:
        r = c.put(f"/models/{name}", json={"classes": [-1, 1], "n_features": D})
        assert r.status_code == 201, r.text


# -- the load -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    op: str
    status: int | None  # None: no HTTP answer at all
    code: str | None
    started: float
    elapsed: float
    retry_after: str | None
    text: str


def met(f: Failure, start: float, end: float) -> bool:
    """Whether the failed request was in flight at some moment of [start, end)."""
    return f.started < end and f.started + f.elapsed > start


@dataclass(frozen=True)
class Answer:
    x: list[int]
    label: int
    body: dict[str, Any]
    at: float


@dataclass
class Load:
    """Clients in threads, each doing up to ``max_ops`` operations or until stopped."""

    url: str
    headers: dict[str, str]
    model: str
    clients: int = 10
    max_ops: int = 400
    learn_share: float = 0.4
    backoff_s: float = 0.3  # after a failed request, as a client honouring Retry-After would
    deadline_s: float = 45.0
    acked: list[Answer] = field(default_factory=list)
    ambiguous: list[tuple[list[int], int]] = field(default_factory=list)  # failed learns
    failures: list[Failure] = field(default_factory=list)
    # (started, elapsed) of each answered request: how slow this machine is under this load
    answered: list[tuple[float, float]] = field(default_factory=list)
    predicted: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        deadline = time.monotonic() + self.deadline_s
        self.threads = [
            threading.Thread(target=self._run, args=(seed, deadline), daemon=True)
            for seed in range(self.clients)
        ]
        for t in self.threads:
            t.start()
        return self

    def join(self, stop: bool = True) -> Load:
        if stop:
            self.stop.set()
        for t in self.threads:
            t.join(self.deadline_s + 30)
            assert not t.is_alive(), "a client thread did not finish"
        return self

    def wait_acked(self, n: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < n:
            assert time.monotonic() < deadline, f"only {len(self.acked)} answers in {timeout} s"
            time.sleep(0.02)

    def max_acked_version(self) -> int:
        with self.lock:
            return max((a.body["version"] for a in self.acked if a.body["updated"]), default=0)

    def _call(self, c: httpx.Client, op: str, body: dict[str, Any]) -> dict[str, Any] | None:
        started = time.monotonic()
        try:
            r = c.post(f"/{op}", json=body)
        except httpx.HTTPError as e:
            failure = Failure(op, None, None, started, time.monotonic() - started, None, repr(e))
        else:
            if r.status_code == 200:
                answer: dict[str, Any] = r.json()
                with self.lock:
                    self.answered.append((started, time.monotonic() - started))
                return answer
            try:
                code = r.json().get("code")
            except ValueError:
                code = None
            failure = Failure(
                op, r.status_code, code, started, time.monotonic() - started,
                r.headers.get("retry-after"), r.text[:300],
            )  # fmt: skip
        with self.lock:
            self.failures.append(failure)
        time.sleep(self.backoff_s)
        return None

    def _run(self, seed: int, deadline: float) -> None:
        rng = random.Random(f"{self.model}-{seed}")
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=15) as c:
            for _ in range(self.max_ops):
                if self.stop.is_set() or time.monotonic() > deadline:
                    return
                x = [rng.randint(-3, 3) for _ in range(D)]
                label = rng.choice([-1, 1])
                if rng.random() < self.learn_share:
                    answer = self._call(
                        c, "learn", {"model": self.model, "features": x, "label": label}
                    )
                    if answer is None:
                        with self.lock:
                            self.ambiguous.append((x, label))
                        continue
                else:
                    p = self._call(c, "predict", {"model": self.model, "features": x})
                    if p is None:
                        continue
                    with self.lock:
                        self.predicted += 1
                    # Feedback is idempotent: retried until answered, whatever happened.
                    answer = None
                    while answer is None and time.monotonic() < deadline:
                        answer = self._call(
                            c, "feedback", {"prediction_id": p["prediction_id"], "label": label}
                        )
                    assert answer is not None, "a feedback was never answered"
                with self.lock:
                    self.acked.append(Answer(x, label, answer, time.monotonic()))


# -- checking the model against the answers -------------------------------------------------


def update_vector(x: list[int], label: int) -> tuple[int, ...]:
    """What one update adds to (weights..., bias) of a binary model: y * (x, 1)."""
    y = 1 if label == 1 else -1
    return (*(y * v for v in x), y)


def subset_sum(vectors: list[tuple[int, ...]], k: int, target: tuple[int, ...]) -> bool:
    """Whether some ``k`` of ``vectors`` add up to ``target``."""
    zero = tuple(0 for _ in target)
    reach: list[set[tuple[int, ...]]] = [{zero}] + [set() for _ in range(k)]
    for v in vectors:
        for c in range(k - 1, -1, -1):
            reach[c + 1] |= {tuple(a + b for a, b in zip(s, v, strict=True)) for s in reach[c]}
        assert sum(map(len, reach)) < 3_000_000, "too many failed learns to search"
    return target in reach[k]


@dataclass(frozen=True)
class Model:
    version: int
    mistakes: int
    seen: int
    predictions: int
    vector: tuple[int, ...]  # weights..., bias


def read_model(topo: Any, name: str) -> Model:
    with client(topo) as c:
        info = c.get(f"/models/{name}")
        weights = c.get(f"/models/{name}/weights")
    assert info.status_code == 200 and weights.status_code == 200, (info.text, weights.text)
    rows = weights.json()["rows"]
    assert len(rows) == 1
    values = [*rows[0]["weights"], rows[0]["bias"]]
    assert all(float(v).is_integer() for v in values), values
    counters = info.json()["counters"]
    return Model(
        version=info.json()["version"],
        mistakes=counters["mistakes"],
        seen=counters["seen"],
        predictions=counters["predictions"],
        vector=tuple(int(v) for v in values),
    )


def check_nothing_acknowledged_is_lost(model: Model, load: Load) -> int:
    """The model is the answered updates plus some of the failed learns; returns how many."""
    answered = [a for a in load.acked if a.body["updated"]]
    versions = [a.body["version"] for a in answered]
    assert len(set(versions)) == len(versions), "two answered updates share a version"
    assert max(versions, default=0) <= model.version
    applied_unanswered = model.version - len(answered)
    assert 0 <= applied_unanswered <= len(load.ambiguous), (model.version, len(answered))
    expected = np.zeros(D + 1, dtype=np.int64)
    for a in answered:
        expected += update_vector(a.x, a.label)
    rest = tuple(int(v) for v in np.array(model.vector) - expected)
    candidates = [update_vector(x, label) for x, label in load.ambiguous]
    assert subset_sum(candidates, applied_unanswered, rest), (
        f"the weights are not the answered updates plus {applied_unanswered} of the "
        f"{len(candidates)} failed learns (difference {rest})"
    )
    mistakes = sum(a.body["mistake"] for a in load.acked)
    assert 0 <= model.mistakes - mistakes <= len(load.ambiguous)
    assert 0 <= model.seen - len(load.acked) <= len(load.ambiguous)
    return applied_unanswered


def living_in_group(pgid: int) -> list[int]:
    """PIDs of the process group ``pgid`` that are not zombies (from /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            pids.append(int(stat.parent.name))
    return pids


# -- the tests ------------------------------------------------------------------------------


def test_mixed_load_through_nginx_loses_nothing(topo: Any) -> None:
    with logs_on_failure(topo):
        create_model(topo, "steady")
        before = topo.upstream_counts()
        load = (
            Load(topo.url, topo.headers, "steady", clients=12, max_ops=40).start().join(stop=False)
        )

        assert load.failures == []
        assert len(load.acked) == 12 * 40
        model = read_model(topo, "steady")
        expected = np.zeros(D + 1, dtype=np.int64)
        for a in load.acked:
            if a.body["updated"]:
                expected += update_vector(a.x, a.label)
        assert model.vector == tuple(int(v) for v in expected)
        assert model.mistakes == sum(a.body["mistake"] for a in load.acked)
        assert model.version == sum(a.body["updated"] for a in load.acked)
        assert model.seen == len(load.acked)
        assert model.predictions == load.predicted
        versions = sorted(a.body["version"] for a in load.acked if a.body["updated"])
        assert versions == list(range(1, model.version + 1))
        assert check_nothing_acknowledged_is_lost(model, load) == 0
        # nginx spread the load over both API processes.
        after = topo.upstream_counts()
        for port in topo.api_ports:
            addr = f"127.0.0.1:{port}"
            assert after.get(addr, 0) - before.get(addr, 0) > 50, after


def upstream_connections(topo: Any) -> set[int]:
    """nginx's side (its port) of every connection established to an API process."""
    apis = set(topo.api_ports)
    return {
        c.raddr.port
        for c in psutil.net_connections(kind="tcp4")
        if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port in apis and c.raddr
    }


def test_nginx_opens_new_connections_to_the_apis_while_busy(topo: Any) -> None:
    """deploy/nginx.conf's keepalive_time: a connection to an API process that never idles is
    still replaced after 10 s, so that nginx's connections keep spreading over the workers."""
    with logs_on_failure(topo), client(topo) as c:
        create_model(topo, "steady-connections")
        body = {"model": "steady-connections", "features": [1] * D}

        def predict() -> None:
            assert c.post("/predict", json=body).status_code == 200

        for _ in range(20):
            predict()
        first = upstream_connections(topo)
        assert first
        end = time.monotonic() + 11.5  # keepalive_time, and a margin
        while time.monotonic() < end:  # one request after another: never idle for 4 s
            predict()
        assert first.isdisjoint(upstream_connections(topo))


def test_killing_an_api_process_under_load_loses_no_answered_update(
    topo: Any, record_property: Any
) -> None:
    with logs_on_failure(topo):
        create_model(topo, "crash")
        load = Load(topo.url, topo.headers, "crash", clients=10, max_ops=100_000).start()
        try:
            load.wait_acked(150)
            group = topo.apis[1].pid
            assert len(living_in_group(group)) >= 1 + WORKERS  # the process and its workers
            killed_at = time.monotonic()
            topo.kill_api(1)
            load.wait_acked(len(load.acked) + 300)
        finally:
            load.join()
        assert living_in_group(group) == [], "a process of the killed API lives on"

        # Only requests that the killed process held when it died failed: nginx's JSON 502, or,
        # when the process died between writing an answer's head and its body (uvicorn writes
        # them apart), the answer cut short: nginx had passed the head on already.
        failures = load.failures
        assert len(failures) <= load.clients, failures
        for f in failures:
            cut_short = f.status is None and "without sending complete message body" in f.text
            assert (f.status, f.code) == (502, "upstream_unavailable") or cut_short, f
            # (a margin for a loaded machine: the processes die a moment after the signal)
            assert f.started < killed_at + 5.0, f"a request made after the crash failed: {f}"
        # The survivor serves everything, reads through nginx included.
        with client(topo) as c:
            for _ in range(20):
                assert c.get("/readyz").status_code == 200
                assert c.get("/models/crash").status_code == 200
        assert topo.apis[0].alive()

        model = read_model(topo, "crash")
        applied = check_nothing_acknowledged_is_lost(model, load)
        record_property("answered", len(load.acked))
        record_property("failed", [(f.op, f.status, f.code) for f in failures])
        record_property("failed_learns_applied", applied)

        # Restarted on its port, the process gets traffic from nginx again by itself.
        topo.restart_api(1)
        addr = f"127.0.0.1:{topo.api_ports[1]}"
        before = topo.upstream_counts().get(addr, 0)
        deadline = time.monotonic() + 15
        with client(topo) as c:
            while topo.upstream_counts().get(addr, 0) <= before:
                assert time.monotonic() < deadline, "nginx never sent traffic to the restarted API"
                assert c.get("/models/crash").status_code == 200
                time.sleep(0.05)


def test_redis_killed_and_frozen_answers_503_then_recovers(topo: Any, record_property: Any) -> None:
    with logs_on_failure(topo):
        create_model(topo, "outage")
        pids = [api.pid for api in topo.apis]
        load = Load(topo.url, topo.headers, "outage", clients=8, max_ops=100_000).start()
        try:
            # 1. kill -9 Redis under load; restart it on the same port and AOF directory.
            load.wait_acked(100)
            acked_before = load.max_acked_version()
            killed_at = time.monotonic()
            topo.kill_redis()
            # Down: every API process alive (its container stays healthy), not ready; nginx
            # alive and routing, its own check passing.
            for i in range(len(topo.apis)):
                assert httpx.get(topo.api_url(i) + "/healthz", timeout=5).status_code == 200
                assert httpx.get(topo.api_url(i) + "/readyz", timeout=5).status_code == 503
            assert httpx.get(topo.url + "/nginx-health", timeout=5).status_code == 200
            assert httpx.get(topo.url + "/readyz", timeout=5).status_code == 503
            time.sleep(max(0.0, killed_at + 1.0 - time.monotonic()))
            topo.start_redis()
            back_at = time.monotonic()
            with client(topo) as c:
                r = c.get("/models/outage")
                while r.status_code == 503 and time.monotonic() < back_at + 5:
                    r = c.get("/models/outage")  # (a stale pooled connection: see above)
            assert r.status_code == 200, r.text
            assert r.json()["version"] >= acked_before, (
                "an update answered before the crash is gone"
            )
            # 2. freeze Redis (SIGSTOP): connections open, no answer. Then thaw it.
            load.wait_acked(len(load.acked) + 100)
            frozen_at = time.monotonic()
            topo.freeze_redis()
            time.sleep(REDIS_TIMEOUT_S + 1.5)
            topo.thaw_redis()
            thawed_at = time.monotonic()
            time.sleep(1.5)
            n = len(load.acked)
            load.wait_acked(n + 100)
        finally:
            topo.thaw_redis()
            load.join()

        # The API processes were never restarted: they recovered by themselves.
        assert [api.pid for api in topo.apis] == pids
        assert all(api.alive() for api in topo.apis)
        for i in range(len(topo.apis)):
            assert httpx.get(topo.api_url(i) + "/readyz", timeout=5).status_code == 200

        failures = load.failures
        assert failures, "no request failed: the outage was not exercised"
        # Every failure is the service's clear 503, never a hang, a 500 or a dropped request.
        # A learn whose commit or hand-over was sent before the store went away, its reply
        # lost, says its outcome is unknown, and invites no retry; every other failure was
        # not applied, and says to retry.
        unknown = [f for f in failures if f.code == "learn_outcome_unknown"]
        assert {(f.status, f.code) for f in failures} <= {
            (503, "store_unavailable"),
            (503, "learn_outcome_unknown"),
        }, failures
        assert (503, "store_unavailable") in {(f.status, f.code) for f in failures}
        assert all(f.op == "learn" and f.retry_after is None for f in unknown), unknown
        assert all(f.retry_after is not None for f in failures if f not in unknown)
        slowest = max(f.elapsed for f in failures)
        # Time limits hold on a busy machine: each adds the slowest answer this machine gave
        # under the same load before the outage (its own queueing, not the service's waiting).
        busy = max(elapsed for started, elapsed in load.answered if started < killed_at)
        grace = max(0.5, busy)
        record_property("slowest_answer_before_outage_s", round(busy, 3))
        # A store call times out after REDIS_TIMEOUT_S; a request opening a new connection may
        # wait for the connection's handshake, then for its command.
        assert slowest < 2 * REDIS_TIMEOUT_S + 1.0 + grace, f"a 503 took {slowest:.2f} s"
        down = [f for f in failures if killed_at <= f.started < back_at]
        frozen = [f for f in failures if frozen_at - 0.1 <= f.started < thawed_at]
        # A dead Redis fails requests at once (connection refused), well before any timeout;
        # a hung one after the timeout (some of those may be stale connections, failing fast).
        # In order: the dead store's 503s come sooner than the frozen store's timeouts.
        assert down and max(f.elapsed for f in down) < REDIS_TIMEOUT_S + grace, (
            "a dead Redis must fail fast"
        )
        assert statistics.median(f.elapsed for f in down) < REDIS_TIMEOUT_S / 2, down
        assert any(f.elapsed >= REDIS_TIMEOUT_S * 0.9 for f in frozen), "no timeout while frozen"
        # Outside the outages (plus one timeout's grace after the thaw), only the quick 503s
        # of connections pooled before the crash: at most one per connection a worker held.
        # A request still in flight when an outage began met it, whenever it started: a
        # hand-over that started before the freeze, its answer's wait then timed out, and the
        # withdrawal that settles it waited for the thaw (two calls, not one).
        outside = [
            f for f in failures
            if not met(f, killed_at - 0.1, back_at)
            and not met(f, frozen_at - 0.1, thawed_at + REDIS_TIMEOUT_S + 0.5)
        ]  # fmt: skip
        workers = len(topo.apis) * WORKERS
        assert len(outside) <= workers * (load.clients + 1), outside
        assert all(f.elapsed < REDIS_TIMEOUT_S + grace for f in outside), outside
        # After recovery requests succeed again.
        assert any(a.at > thawed_at + 1.0 for a in load.acked)

        model = read_model(topo, "outage")
        applied = check_nothing_acknowledged_is_lost(model, load)
        record_property("answered", len(load.acked))
        record_property("failed_while_down", len(down))
        record_property("failed_while_frozen", len(frozen))
        record_property(
            "failed_after_restart", [(f.op, round(f.started - back_at, 2)) for f in outside]
        )
        record_property("slowest_503_s", round(slowest, 3))
        record_property("failed_learns", len(load.ambiguous))
        record_property("failed_learns_applied", applied)


# -- the nginx files as shipped ---------------------------------------------------------------


def test_the_nginx_files_run_as_shipped_but_for_addresses_and_paths(topo: Any) -> None:
    """deploy/topology.py changes only what must differ on loopback: the upstream's address
    (and its `resolve`, which Debian's older nginx lacks: see topology.nginx_site), the listen
    address, the access log's path and the include's. Every other line runs as shipped."""
    allowed = [
        r"\s*server api:8000 resolve (?P<params>[^;]*);",
        r"\s*listen 8080;",
        r"\s*access_log /var/log/nginx/access\.log perceptron;",
        r"\s*include /etc/nginx/perceptron-locations\.conf;",
    ]
    shipped = (ROOT / "deploy" / "nginx.conf").read_text().splitlines()
    ran = (topo.workdir / "perceptron.conf").read_text().splitlines()
    changed = [line for line in shipped if line not in ran]
    assert len(changed) == len(allowed)
    for line, pattern in zip(changed, allowed, strict=True):
        m = re.fullmatch(pattern, line)
        assert m is not None, line
    added = [line for line in ran if line not in shipped]
    upstream = [line.strip() for line in added if line.strip().startswith("server ")]
    params = re.fullmatch(allowed[0], changed[0])
    assert params is not None
    assert upstream == [f"server 127.0.0.1:{p} {params['params']};" for p in topo.api_ports]
    assert len(added) == len(upstream) + 3
    # The locations file is included from where it is shipped, unchanged.
    assert f"include {ROOT / 'deploy' / 'nginx-locations.conf'};" in [a.strip() for a in added]


def test_https_with_a_certificate_from_files(tmp_path: Path) -> None:
    """deploy/nginx-tls.conf with a certificate and key from files (compose's secrets): the
    same API over TLS, HSTS sent, and nothing but the listen line and file paths changed."""
    import ssl

    import trustme

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    chain, key = tmp_path / "tls_certificate.pem", tmp_path / "tls_key.pem"
    server.private_key_pem.write_to_path(str(key))
    server.cert_chain_pems[0].write_to_path(str(chain))
    for pem in server.cert_chain_pems[1:]:
        pem.write_to_path(str(chain), append=True)
    t = topology.Topology(apis=1, workers=1, env={"PERCEPTRON_DEFAULT_MODEL": "false"},
                          tls=(chain, key)).start()  # fmt: skip
    try:
        context = ssl.create_default_context()
        ca.configure_trust(context)
        with httpx.Client(base_url=t.https_url, headers=t.headers, verify=context) as c:
            r = c.put("/models/tls", json={"classes": [-1, 1], "n_features": 2})
            assert r.status_code == 201, r.text
            assert r.headers["strict-transport-security"].startswith("max-age=")
            assert c.get("/readyz").status_code == 200
            assert c.get("/nginx-health").text == "ok\n"
        # An untrusted client is refused the handshake: this is TLS with that certificate.
        with pytest.raises(httpx.ConnectError):
            httpx.get(t.https_url + "/readyz", timeout=5)
        # Plain HTTP serves the same, from the same upstream.
        assert httpx.get(t.url + "/models/tls", headers=t.headers).status_code == 200
        shipped = (ROOT / "deploy" / "nginx-tls.conf").read_text().splitlines()
        ran = (t.workdir / "perceptron-tls.conf").read_text().splitlines()
        changed = [line.strip().split()[0] for line in shipped if line not in ran]
        assert changed == ["listen", "access_log", "ssl_certificate", "ssl_certificate_key",
                           "include"]  # fmt: skip
    finally:
        t.stop()
        shutil.rmtree(t.workdir, ignore_errors=True)
