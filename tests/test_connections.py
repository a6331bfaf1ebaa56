"""Keep-alive connections are recycled once old, so that they spread over the workers."""

from __future__ import annotations

import asyncio
import http.client
import time
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from service.api.connections import RecycleConnections

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


def respond(mw: RecycleConnections, port: int) -> list[tuple[bytes, bytes]]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: dict[str, Any] = {"type": "http", "client": ("127.0.0.1", port), "headers": []}
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
