"""Keep-alive connections are recycled once old, so that they spread over the workers; a
model's writer sheds its own when asked to (PERCEPTRON_WRITER_SHEDS_FROM_WORKERS), where each
worker has a core."""

from __future__ import annotations

import asyncio
import http.client
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

import service.app
from service.api.connections import RecycleConnections, ShedWhileWriting, usable_cores
from service.app import create_app
from service.settings import Settings

from .servers import ServiceProcess, running

JSON = {"content-type": "application/json"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    headers = [(b"content-type", b"text/plain"), (b"connection", b"keep-alive")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


def respond(
    mw: RecycleConnections | ShedWhileWriting, port: int, state: Any = None
) -> list[tuple[bytes, bytes]]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: dict[str, Any] = {"type": "http", "client": ("127.0.0.1", port), "headers": []}
    scope["app"] = SimpleNamespace(state=state or SimpleNamespace())
    asyncio.run(mw(scope, receive, send))
    headers: list[tuple[bytes, bytes]] = sent[0]["headers"]
    return headers


def closes(headers: list[tuple[bytes, bytes]]) -> bool:
    values = [v for k, v in headers if k == b"connection"]
    assert len(values) == 1  # never two answers to one question
    return values == [b"close"]


def test_a_connection_is_asked_to_close_once_it_is_max_age_old() -> None:
    clock = Clock()
    mw = RecycleConnections(app, max_age_s=2.0, clock=clock)
    assert not closes(respond(mw, 5000))
    clock.now += 1.0
    assert not closes(respond(mw, 5001))  # another client: its own age
    clock.now += 0.99
    assert not closes(respond(mw, 5000))
    clock.now += 0.01
    assert closes(respond(mw, 5000))
    # The next connection from that port starts afresh; the other is not old yet.
    assert not closes(respond(mw, 5000))
    assert not closes(respond(mw, 5001))
    clock.now += 1.0
    assert closes(respond(mw, 5001))


def test_max_age_zero_never_closes() -> None:
    clock = Clock()
    mw = RecycleConnections(app, max_age_s=0, clock=clock)
    for _ in range(3):
        assert not closes(respond(mw, 5000))
        clock.now += 1000


def test_forgotten_connections_do_not_pile_up() -> None:
    clock = Clock()
    mw = RecycleConnections(app, max_age_s=1.0, clock=clock)
    for port in range(5000):  # clients that each made one request and went away
        respond(mw, port)
        clock.now += 0.001
    assert len(mw._opened) < 4200


def test_connections_are_kept_by_default(redis_url: str) -> None:
    with running(ServiceProcess(redis_url)) as service:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            conn.request("GET", "/healthz")
            r = conn.getresponse()
            r.read()
            assert r.status == 200 and r.getheader("connection") != "close"
        assert conn.sock is not None
        conn.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_clients_reconnect_and_lose_nothing(redis_url: str, workers: int) -> None:
    """A real client on a real service: told to close, it reconnects; every request answers."""
    service = ServiceProcess(redis_url, workers=workers, PERCEPTRON_CONNECTION_MAX_AGE_S="0.2")
    with running(service):
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
        sockets, answered, closed = set(), 0, 0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            if conn.sock is None:
                conn.connect()
            sockets.add(conn.sock.getsockname())
            conn.request("POST", "/predict", body=b'{"features": {"a": 1}}', headers=JSON)
            r = conn.getresponse()
            assert r.status == 200, r.read()
            r.read()
            answered += 1
            if r.getheader("connection") == "close":
                closed += 1
                conn.close()
        conn.close()
    assert answered > 20
    assert closed >= 3 and len(sockets) == closed + 1  # one new connection after each close


def test_a_fed_writer_sheds_each_connection() -> None:
    fed = [False]
    writers = SimpleNamespace(fed=lambda: fed[0])
    state = SimpleNamespace(worker=SimpleNamespace(learning=SimpleNamespace(writers=writers)))
    mw = ShedWhileWriting(app)
    assert not closes(respond(mw, 5000, state))
    assert not closes(respond(mw, 5000))  # (no worker yet: starting up)
    fed[0] = True
    assert closes(respond(mw, 5000, state))
    assert closes(respond(mw, 5001, state))  # every client, each answer
    fed[0] = False  # no other worker hands it requests now: it keeps its connections again
    assert not closes(respond(mw, 5000, state))


@pytest.mark.parametrize(
    ("workers", "shed_from", "cores", "sheds"),
    [
        (4, 4, 16, True),
        (3, 4, 16, False),
        (8, 0, 16, False),
        (1, 1, 1, True),
        (12, 4, 12, True),  # a core each, at the edge
        (13, 4, 12, False),  # one worker more than the cores
        (8, 4, 2, False),  # eight workers on two cores: no core to spare for what is shed
    ],
)
def test_a_writer_sheds_from_so_many_workers_with_a_core_each(
    workers: int, shed_from: int, cores: int, sheds: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service.app, "usable_cores", lambda: cores)
    settings = Settings(writer_sheds_from_workers=shed_from, auth=False)
    app = create_app(settings, workers=workers, warn_auth_off=False)
    installed = [getattr(m.cls, "__name__", "") for m in app.user_middleware]
    assert (ShedWhileWriting.__name__ in installed) is sheds


@pytest.mark.parametrize(
    ("cpu_max", "most"),
    [
        ("max 100000\n", None),  # no quota: the affinity alone
        ("200000 100000\n", 2),  # a container's cpus: 2
        ("150000 100000\n", 2),  # 1.5 cores: rounded up
        ("50000 100000\n", 1),
        ("not a quota\n", None),
        (None, None),  # no such file (no cgroup v2)
    ],
)
def test_usable_cores_are_the_affinity_within_the_cgroup_quota(
    cpu_max: str | None, most: int | None, tmp_path: Path
) -> None:
    path = tmp_path / "cpu.max"
    if cpu_max is not None:
        path.write_text(cpu_max)
    affinity = len(os.sched_getaffinity(0))
    assert usable_cores(path) == (affinity if most is None else min(affinity, most))


def learn_from(
    services: list[ServiceProcess], connections: int, seconds: float
) -> tuple[list[int], list[int], int]:
    """/learn of one example to the default model from ``connections`` keep-alive clients of
    each service at once, each reconnecting when told to close, for ``seconds``: per service,
    requests answered and answers that said ``Connection: close``; and the model's count of
    examples learned."""
    answered, closed = [0] * len(services), [0] * len(services)
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(s: int, c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", services[s].port, timeout=10)
        i = 0
        while time.monotonic() < stop:
            if conn.sock is None:
                conn.connect()
            i += 1
            body = b'{"features": {"a": %d, "c%d": 1}, "label": %d}' % (i % 7, c, 1 - 2 * (i % 2))
            conn.request("POST", "/learn", body=body, headers=JSON)
            r = conn.getresponse()
            assert r.status == 200, r.read()
            r.read()
            close = r.getheader("connection") == "close"
            with lock:
                answered[s] += 1
                closed[s] += close
            if close:
                conn.close()
        conn.close()

    with ThreadPoolExecutor(len(services) * connections) as pool:
        clients = [
            pool.submit(client, s, c) for s in range(len(services)) for c in range(connections)
        ]
    for done in clients:
        done.result()  # (a client's failed assertion fails the test)
    model = httpx.get(services[0].url + "/models/default", timeout=10).json()
    return answered, closed, int(model["counters"]["learned"])


def test_a_writer_fed_by_other_workers_sheds_its_connections(redis_url: str) -> None:
    """Two one-worker replicas of the service, told to shed from one worker: the first /learn
    makes the first's worker the model's writer; while the second hands it requests, it
    answers its own clients ``Connection: close``, and they reconnect. Every request is
    answered and learned once. (One worker a replica: the writer then holds every connection
    of its replica. With more, the kernel may give them all to the others, which is what
    shedding is for; that a replica of N workers sheds from N is checked above.)"""
    env = {"PERCEPTRON_WRITER_SHEDS_FROM_WORKERS": "1"}
    with ExitStack() as both:
        first, second = (
            both.enter_context(running(ServiceProcess(redis_url, 1, **env))) for _ in range(2)
        )
        before, _, _ = learn_from([first], connections=1, seconds=0.01)  # (it writes the model)
        answered, closed, learned = learn_from([first, second], connections=4, seconds=1.5)
    # By the first's writer (or the second's, had a stall of 0.4 s on a loaded machine moved
    # the lease to it)
    assert closed[0] > 0 or closed[1] > 0
    assert learned == sum(answered) + before[0]


def test_a_writer_keeps_its_connections_below_the_workers_to_shed_from(redis_url: str) -> None:
    with running(ServiceProcess(redis_url, workers=2)) as service:  # (default: from 4)
        answered, closed, learned = learn_from([service], connections=16, seconds=1.0)
    assert closed == [0] and [learned] == answered != [0]


def test_a_writer_fed_by_nobody_keeps_its_connection(redis_url: str) -> None:
    """One client: its worker writes the model, and no other worker hands it anything, so
    its connection stays (shedding it would only make the client reconnect to it)."""
    env = {"PERCEPTRON_WRITER_SHEDS_FROM_WORKERS": "2"}
    with running(ServiceProcess(redis_url, workers=2, **env)) as service:
        answered, closed, learned = learn_from([service], connections=1, seconds=1.0)
    assert closed == [0] and [learned] == answered != [0]


def test_without_one_writer_nothing_is_shed(redis_url: str) -> None:
    env = {"PERCEPTRON_WRITER_SHEDS_FROM_WORKERS": "2", "PERCEPTRON_ONE_WRITER": "false"}
    with running(ServiceProcess(redis_url, workers=2, **env)) as service:
        answered, closed, learned = learn_from([service], connections=16, seconds=1.0)
    assert closed == [0] and [learned] == answered != [0]
