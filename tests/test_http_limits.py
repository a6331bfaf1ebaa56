"""What one connection may cost ``perceptron serve`` itself, with no proxy in front: a head too
large, headers or a body too slow, a connection that sends nothing, more connections than a
worker takes (``service/api/edge.py``). On loopback, with raw sockets."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from .servers import ServiceProcess

pytestmark = pytest.mark.servers  # perceptron serve as a process

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.5
MAX_HEADER_BYTES = 16_384
MAX_CONNECTIONS = 8


@pytest.fixture(scope="module")
def service() -> Iterator[ServiceProcess]:
    served = ServiceProcess(
        None,
        PERCEPTRON_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
        PERCEPTRON_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        PERCEPTRON_MAX_HEADER_BYTES=str(MAX_HEADER_BYTES),
        PERCEPTRON_MAX_CLIENT_CONNECTIONS=str(MAX_CONNECTIONS),
    ).start()
    yield served
    served.stop()


def connect(service: ServiceProcess) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", service.port), timeout=10)
    return s


def read_all(s: socket.socket) -> bytes:
    """Everything the service sends until it closes the connection."""
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def status_and_code(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["code"]


def test_a_head_past_its_limit_is_refused_before_it_is_read_whole(
    service: ServiceProcess,
) -> None:
    """A 200 MB header line with no key was read whole (RSS 76 -> 472 MiB) and answered 200."""
    with connect(service) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sent = 0
        try:
            while sent < 50 * 1024 * 1024:  # the service closes long before this
                s.sendall(b"a" * 65536)
                sent += 65536
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = read_all(s) if sent < 50 * 1024 * 1024 else b""
    assert sent < 4 * 1024 * 1024, f"{sent} bytes of one header were taken"
    if answer:  # (a reset may come before the answer is read)
        assert status_and_code(answer) == (431, "header_too_large")
    # At the limit it is served.
    ok = httpx.get(service.url + "/healthz", headers={"X-Big": "a" * (MAX_HEADER_BYTES - 200)})
    assert ok.status_code == 200


def test_headers_too_slow_are_answered_408_and_closed(service: ServiceProcess) -> None:
    """A half-sent header was answered 200 after 40 s."""
    with connect(service) as s:
        started = time.monotonic()
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # no end of headers
        answer = read_all(s)
        waited = time.monotonic() - started
    assert status_and_code(answer) == (408, "request_timeout")
    assert HEADER_TIMEOUT_S * 0.9 <= waited < HEADER_TIMEOUT_S * 10, waited


def test_a_connection_that_sends_nothing_is_closed(service: ServiceProcess) -> None:
    """3,000 idle connections stayed open."""
    with connect(service) as s:
        started = time.monotonic()
        read_all(s)  # returns once the service closes it
        waited = time.monotonic() - started
    assert HEADER_TIMEOUT_S * 0.9 <= waited < HEADER_TIMEOUT_S * 10, waited


def test_a_body_too_slow_closes_the_connection(service: ServiceProcess) -> None:
    with connect(service) as s:
        s.sendall(
            b"POST /predict HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b'content-length: 100\r\n\r\n{"features":'
        )
        started = time.monotonic()
        answer = read_all(s)
        waited = time.monotonic() - started
    assert BODY_TIMEOUT_S * 0.9 <= waited < BODY_TIMEOUT_S * 10, (waited, answer)
    # A body sent in time on a kept-alive connection, twice, is answered twice.
    with httpx.Client(base_url=service.url) as c:
        for _ in range(2):
            assert c.post("/predict", json={"features": {"a": 1.0}}).status_code == 200


def test_connections_past_a_workers_limit_are_answered_503(service: ServiceProcess) -> None:
    held = [connect(service) for _ in range(MAX_CONNECTIONS)]
    try:
        r = httpx.get(service.url + "/healthz")
        assert r.status_code == 503, r.text  # was plain text, uvicorn's own
        assert r.json()["code"] == "too_many_connections"
        assert r.headers["retry-after"] == "1"
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    assert httpx.get(service.url + "/healthz").status_code == 200


def test_pipelined_requests_are_not_taken_for_one_large_head(service: ServiceProcess) -> None:
    """A read that ended one request's body and began the next one's head was counted whole
    as head: a tiny head could be answered 431."""
    body = b'{"features": {"a": 1.0}}' + b" " * (4 * MAX_HEADER_BYTES)
    first = (
        b"POST /predict HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(body)
    )
    second = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with connect(service) as s:
        s.sendall(first[:20])
        time.sleep(0.1)
        s.sendall(first[20:] + body + second[:10])  # head, body, and the next head's start
        time.sleep(0.1)
        s.sendall(second[10:])
        answer = read_all(s)
    assert answer.count(b"HTTP/1.1 200 OK") == 2, answer[:400]
