"""GET /models/{name}/events, the dashboard's push, on real servers: ``perceptron serve`` with
two workers on a real redis-server, and nginx in front as deploy/ ships it.

* A label applied through the other worker than the one holding the stream arrives as an
  event within a second (the worker each connection landed on is read from the processes'
  sockets).
* A model with a drift detector pushes ``drift`` (the body of ``GET .../drift``, its
  challengers' detectors too) at once and at each warning and drift, and only then.
* With keys on the stream needs the ``predict`` role on the model: in a header, or in the
  cookie ``perceptron_key`` (what a browser's EventSource sends); no key, a wrong key or a key
  for other models is refused with the API's JSON errors.
* ``PERCEPTRON_MAX_STREAMS`` per worker: at the limit every stream opens, one past it is
  ``503 too_many_streams``; once one closes a new one opens.
* ``perceptron serve`` stops promptly with a stream open (uvicorn would wait 10 s for it).
* Through nginx the events are passed on at once, not buffered (deploy/nginx-locations.conf).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from service.settings import Settings

from .servers import RedisServer, ServiceProcess, load_topology, running

pytestmark = pytest.mark.servers

ROOT = Path(__file__).resolve().parents[1]
MODEL = {"classes": [-1, 1], "n_features": 2}
ADMIN = "admin-key-0123456789"
READER = "reader-key-0123456789"
OTHERS = "others-key-0123456789"  # predict, but only on the model "other"


class Stream:
    """One event stream read on a socket of its own: its events as they come, with the time
    each came."""

    def __init__(self, port: int, path: str, headers: dict[str, str] | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Accept: text/event-stream"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.file = self.sock.makefile("rb")
        self.status = int(self.file.readline().split()[1])
        self.headers: dict[str, str] = {}
        while (line := self.file.readline().decode().strip()) != "":
            name, _, value = line.partition(":")
            self.headers[name.lower()] = value.strip()
        self.events: list[tuple[float, str, Any]] = []
        self.comments = 0
        self.ended = threading.Event()
        self.body = b""
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()
        else:
            self.body = self.file.read(int(self.headers.get("content-length", "0")))

    @property
    def local_port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _read(self) -> None:
        kind, data = "message", ""
        try:
            for raw in self.file:
                line = raw.decode().rstrip("\r\n")
                if line == "0":
                    break  # the last chunk: the answer ended
                if re.fullmatch(r"[0-9a-f]+", line) or line.startswith("retry:"):
                    continue  # (a chunk's size; the reconnection delay)
                if line.startswith(":"):
                    self.comments += 1
                elif line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif line == "" and data:
                    self.events.append((time.monotonic(), kind, json.loads(data)))
                    kind, data = "message", ""
        except (OSError, ValueError):  # (closed by the test)
            pass
        self.ended.set()

    def wait_for(self, test: Any, timeout: float) -> tuple[float, str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in list(self.events):
                if test(e[1], e[2]):
                    return e
            time.sleep(0.01)
        raise AssertionError(f"no such event in {timeout} s; got {[e[1:] for e in self.events]}")

    def close(self) -> None:
        with suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.file.close()
        self.sock.close()


def worker_of(server: ServiceProcess, client_port: int) -> int:
    """The worker process holding the connection whose client side is ``client_port``."""
    assert server.proc is not None
    for _ in range(100):
        for child in psutil.Process(server.proc.pid).children():
            try:
                conns = child.net_connections(kind="tcp")
            except psutil.NoSuchProcess:
                continue
            if any(c.raddr and c.raddr.port == client_port for c in conns):
                return child.pid
        time.sleep(0.02)
    raise AssertionError(f"no worker holds the connection from port {client_port}")


def client_port(client: httpx.Client) -> int:
    """The local port of the connection ``client`` keeps alive (after one request)."""
    r = client.get("/healthz")
    stream = r.extensions["network_stream"]
    return int(stream.get_extra_info("client_addr")[1])


@pytest.fixture(scope="module")
def keyed(redis_server: RedisServer) -> Iterator[ServiceProcess]:
    """One worker, keys on, at most 2 streams."""
    keys = f"admin:{ADMIN},predict:{READER},predict:{OTHERS}:other"
    service = ServiceProcess(
        redis_server.url,
        workers=1,
        PERCEPTRON_AUTH="true",
        PERCEPTRON_API_KEYS=keys,
        PERCEPTRON_MAX_STREAMS="2",
        PERCEPTRON_STREAM_KEEPALIVE_S="0.5",
    ).start()
    with httpx.Client(base_url=service.url, headers={"authorization": f"Bearer {ADMIN}"}) as c:
        assert c.put("/models/keyed", json=MODEL).status_code in (200, 201)
    yield service
    service.stop()


def test_a_label_applied_by_the_other_worker_arrives_within_a_second(
    two_workers: ServiceProcess,
) -> None:
    base = two_workers.url
    with httpx.Client(base_url=base, timeout=10) as c:
        assert c.put("/models/pushed", json=MODEL).status_code in (200, 201)
    stream = Stream(two_workers.port, "/models/pushed/events")
    try:
        assert stream.status == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert stream.headers["x-accel-buffering"] == "no"
        first = stream.wait_for(lambda k, b: k == "metrics", 5)[2]
        stream.wait_for(lambda k, b: k == "checkpoints", 5)
        seen = first["counters"]["seen"]
        holder = worker_of(two_workers, stream.local_port)
        # A connection on the other worker (new ones go to whichever accepts first).
        clients = []
        for _ in range(50):
            c = httpx.Client(base_url=base, timeout=10)
            clients.append(c)
            if worker_of(two_workers, client_port(c)) != holder:
                break
        else:
            raise AssertionError("every connection landed on the stream's worker")
        for label in (1, -1, 1):
            sent = time.monotonic()
            r = c.post("/learn", json={"model": "pushed", "features": [1, 2], "label": label})
            assert r.status_code == 200, r.text
            seen += 1
            got, _, body = stream.wait_for(
                lambda k, b, n=seen: k == "metrics" and b["counters"]["seen"] == n, 1.0
            )
            assert got - sent < 1.0
            assert body["version"] == r.json()["version"]
        # The pushed body is the metrics' answer.
        expected = c.get("/models/pushed/metrics").json()
        assert stream.events[-1][2] == expected
        for c in clients:
            c.close()
        # Deleted: the stream says so, and ends.
        with httpx.Client(base_url=base, timeout=10) as admin:
            assert admin.delete("/models/pushed").status_code == 204
        gone = stream.wait_for(lambda k, b: k == "gone", 2)[2]
        assert gone["code"] == "model_not_found"
        assert stream.ended.wait(2)
    finally:
        stream.close()


def test_a_detectors_events_are_pushed_as_they_come(two_workers: ServiceProcess) -> None:
    drift = {"detector": "ddm", "warm_start": 10, "warning_threshold": 1.2}
    with httpx.Client(base_url=two_workers.url, timeout=10) as c:
        assert c.put("/models/drifting", json={**MODEL, "drift": drift}).status_code == 201
        assert c.put("/models/still", json=MODEL).status_code == 201
        quiet = Stream(two_workers.port, "/models/still/events")
        stream = Stream(two_workers.port, "/models/drifting/events")
        try:
            first = stream.wait_for(lambda k, b: k == "drift", 5)[2]
            assert first == c.get("/models/drifting/drift").json() and first["events"] == []
            # Right of x0 = 0 is 1, then -1: the perceptron errs until it turns.
            for label in (1, -1):
                body = {"model": "drifting", "features": [[1, 0]] * 60, "labels": [label] * 60}
                assert c.post("/learn/batch", json=body).status_code == 200
                c.post("/learn", json={"model": "still", "features": [1, 0], "label": label})
            answer = c.get("/models/drifting/drift").json()
            assert answer["events"], answer  # (the stream did warn and detect)
            stream.wait_for(lambda k, b: k == "drift" and b == answer, 2)
            kinds = [k for _, k, _ in stream.events]
            assert kinds.count("drift") <= 3, kinds  # (at once, then once per batch at most)
            assert kinds.count("metrics") >= 2
            quiet.wait_for(lambda k, b: k == "metrics" and b["counters"]["seen"] == 2, 2)
            assert all(k != "drift" for _, k, _ in quiet.events)  # (no detector, no event)
        finally:
            stream.close()
            quiet.close()


def test_a_challengers_detector_is_in_the_pushed_drift_event(two_workers: ServiceProcess) -> None:
    """The drift event is the body of GET .../drift whole: each challenger's state and events
    too, pushed when its own detector flags (its labels move the model)."""
    drift = {"detector": "ddm", "warm_start": 10, "warning_threshold": 1.2}
    with httpx.Client(base_url=two_workers.url, timeout=10) as c:
        assert c.put("/models/watched", json={**MODEL, "drift": drift}).status_code == 201
        assert c.put("/models/watched/challengers/avg", json={"averaged": True}).status_code == 201
        stream = Stream(two_workers.port, "/models/watched/events")
        try:
            first = stream.wait_for(lambda k, b: k == "drift", 5)[2]
            assert [one["learner"] for one in first["learners"]] == ["served", "avg"]
            for label in (1, -1):
                body = {"model": "watched", "features": [[1, 0]] * 60, "labels": [label] * 60}
                assert c.post("/learn/batch", json=body).status_code == 200
            answer = c.get("/models/watched/drift").json()
            assert {e["learner"] for e in answer["events"]} == {"served", "avg"}, answer
            stream.wait_for(lambda k, b: k == "drift" and b == answer, 2)
            kinds = [k for _, k, _ in stream.events]
            assert kinds.count("drift") <= 3, kinds  # (at once, then once per batch at most)
            # the last challenger gone, its detector leaves the pushed drift event too
            assert c.delete("/models/watched/challengers/avg").status_code == 204
            alone = c.get("/models/watched/drift").json()
            assert [one["learner"] for one in alone["learners"]] == ["served"]
            stream.wait_for(lambda k, b: k == "drift" and b == alone, 3)
        finally:
            stream.close()


def test_the_stream_needs_the_predict_role_on_the_model(keyed: ServiceProcess) -> None:
    path = "/models/keyed/events"

    def refused(headers: dict[str, str] | None, status: int, code: str) -> None:
        s = Stream(keyed.port, path, headers)
        s.close()
        assert (s.status, json.loads(s.body)["code"]) == (status, code), s.body

    refused(None, 401, "unauthorized")
    refused({"Authorization": "Bearer not-a-key-0123456789"}, 401, "unauthorized")
    refused({"Cookie": "perceptron_key=not-a-key-0123456789"}, 401, "unauthorized")
    refused({"Authorization": f"Bearer {OTHERS}"}, 403, "forbidden")
    refused({"Cookie": f"perceptron_key={OTHERS}"}, 403, "forbidden")
    for headers in ({"Authorization": f"Bearer {READER}"}, {"Cookie": f"perceptron_key={READER}"}):
        s = Stream(keyed.port, path, headers)
        try:
            assert s.status == 200
            s.wait_for(lambda k, b: k == "metrics", 5)
        finally:
            s.close()


def test_streams_past_the_workers_limit_are_refused(keyed: ServiceProcess) -> None:
    auth = {"Authorization": f"Bearer {READER}"}
    path = "/models/keyed/events"
    opened = [Stream(keyed.port, path, auth) for _ in range(2)]  # the limit: each opens
    try:
        assert [s.status for s in opened] == [200, 200]
        for s in opened:
            s.wait_for(lambda k, b: k == "metrics", 5)
        # A stream with nothing new keeps its proxies awake with comments.
        time.sleep(1.2)
        assert all(s.comments >= 1 for s in opened)
        past = Stream(keyed.port, path, auth)
        past.close()
        assert past.status == 503
        assert json.loads(past.body)["code"] == "too_many_streams"
        assert past.headers["retry-after"] == "1"
        # Other requests go on.
        assert httpx.get(keyed.url + "/models/keyed", headers=auth).status_code == 200
        # One closes: the worker sees it go, and the next opens.
        opened.pop().close()
        deadline = time.monotonic() + 5
        while True:
            again = Stream(keyed.port, path, auth)
            if again.status == 200:
                opened.append(again)
                break
            again.close()
            assert time.monotonic() < deadline, "the closed stream was never counted off"
            time.sleep(0.1)
    finally:
        for s in opened:
            s.close()


def test_a_stream_ends_after_its_longest_life(redis_url: str) -> None:
    """PERCEPTRON_STREAM_MAX_S (3 s here): the stream ends, its events sent; a client connects
    again (an EventSource does by itself)."""
    with running(ServiceProcess(redis_url, workers=1, PERCEPTRON_STREAM_MAX_S="3")) as service:
        with httpx.Client(base_url=service.url, timeout=10) as c:
            assert c.put("/models/brief", json=MODEL).status_code in (200, 201)
        stream = Stream(service.port, "/models/brief/events")
        try:
            assert stream.status == 200
            stream.wait_for(lambda k, b: k == "metrics", 5)
            assert not stream.ended.wait(2.0)  # still open before its time
            assert stream.ended.wait(5.0), "the stream outlived PERCEPTRON_STREAM_MAX_S"
        finally:
            stream.close()


def test_serve_stops_promptly_with_a_stream_open(redis_url: str) -> None:
    service = ServiceProcess(redis_url, workers=2).start()
    try:
        with httpx.Client(base_url=service.url) as c:
            assert c.put("/models/open", json=MODEL).status_code in (200, 201)
        stream = Stream(service.port, "/models/open/events")
        stream.wait_for(lambda k, b: k == "metrics", 5)
        assert service.proc is not None
        started = time.monotonic()
        service.proc.send_signal(signal.SIGTERM)
        service.proc.wait(30)
        took = time.monotonic() - started
        assert stream.ended.wait(1)  # the stream ended, cleanly
        stream.close()
        # (uvicorn waits up to 10 s, timeout_graceful_shutdown, for answers still open)
        assert took < 5, f"perceptron serve took {took:.1f} s to stop with a stream open"
        assert service.proc.returncode == 0
    finally:
        service.stop()


# -- nginx in front --------------------------------------------------------------------------


def events_location() -> str:
    text = (ROOT / "deploy" / "nginx-locations.conf").read_text()
    m = re.search(r"location ~ \^/models/\[\^/\]\+/events\$ \{(?P<body>[^}]*)\}", text)
    assert m is not None, "deploy/nginx-locations.conf has no location for the event streams"
    return m["body"]


def test_nginx_passes_the_streams_unbuffered_and_holds_them_open() -> None:
    body = events_location()
    assert re.search(r"^\s*proxy_pass http://perceptron_api;", body, re.M)
    assert re.search(r"^\s*proxy_buffering off;", body, re.M)
    timeout = re.search(r"^\s*proxy_read_timeout (\d+)([smh]?);", body, re.M)
    assert timeout is not None
    seconds = int(timeout[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[timeout[2]]
    # Well past the keep-alive comments, so that a quiet stream is never cut.
    assert seconds >= 4 * Settings().stream_keepalive_s
    assert re.fullmatch(r"/models/[^/]+/events", "/models/m.1/events")


def test_through_nginx_a_label_arrives_within_a_second() -> None:
    topology = load_topology()
    t = topology.Topology(apis=1, workers=1, env={"PERCEPTRON_DEFAULT_MODEL": "false"}).start()
    try:
        with httpx.Client(base_url=t.url, headers=t.headers, timeout=10) as c:
            assert c.put("/models/edge", json=MODEL).status_code == 201
            stream = Stream(t.http_port, "/models/edge/events", t.headers)
            try:
                assert stream.status == 200
                stream.wait_for(lambda k, b: k == "metrics", 5)
                for n in (1, 2, 3):
                    sent = time.monotonic()
                    r = c.post("/learn", json={"model": "edge", "features": [1, 2], "label": 1})
                    assert r.status_code == 200, r.text
                    got = stream.wait_for(
                        lambda k, b, n=n: k == "metrics" and b["counters"]["seen"] == n, 1.0
                    )
                    assert got[0] - sent < 1.0
            finally:
                stream.close()
    finally:
        t.stop()
        shutil.rmtree(t.workdir, ignore_errors=True)
