"""What every request passes through on its way to a route and back, in that order.

1. **The HTTP protocol's bounds** (``BoundedHttpToolsProtocol``): what one connection may cost
   a worker of ``perceptron serve``, whether or not a proxy stands in front: uvicorn's httptools
   protocol with bounds on a request's head (its bytes, and the time its headers take), on the
   time its body takes, and on idle connections.

   - A head (request line and headers, up to and with the blank line that ends them) larger
     than ``max_header_bytes`` is answered 431 and the connection closed, as soon as more bytes
     came: a 200 MB header line is never read whole.
   - Headers not complete ``header_timeout_s`` after the connection opened (or after the
     request began, on a kept-alive connection) are answered 408 and the connection closed.
   - A body not complete ``body_timeout_s`` after its headers: the connection is closed (the
     handler, waiting for it, sees the client gone).
   - An idle kept-alive connection closes after ``KEEP_ALIVE_S`` (uvicorn's
     ``timeout_keep_alive``); past ``max_client_connections`` a worker answers 503
     ``too_many_connections`` with ``Retry-After`` (uvicorn's ``limit_concurrency``, whose
     plain-text answer is replaced here by the service's JSON error): ``cli/main.py`` sets both.

   The limits come from the settings (``PERCEPTRON_MAX_HEADER_BYTES``, ``..._HEADER_TIMEOUT_S``,
   ``..._BODY_TIMEOUT_S``), read once per process: uvicorn starts its worker processes with
   this class by reference, so it cannot carry values of its own.
2. **One ASGI middleware** (``Edge``): the body limit (``PERCEPTRON_MAX_BODY_BYTES``), the
   security headers on every answer, and the request's count and time for Prometheus, by its
   route template.
3. **The access log** (``QuietProbe``): the banner's own probe is kept out of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from functools import cache
from http import HTTPStatus
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.api.streams import stop_all
from service.errors import TooLarge
from service.settings import Settings

# -- the HTTP protocol's bounds --------------------------------------------------------

KEEP_ALIVE_S = 5  # an idle kept-alive connection is closed after this


@cache
def _limits() -> tuple[int, float, float]:
    s = Settings()
    return s.max_header_bytes, s.header_timeout_s, s.body_timeout_s


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._max_head, self._head_s, self._body_s = _limits()
        self._in_head = True  # whether the next bytes are a request's head
        self._head = 0  # bytes of the current request's head received so far
        self._tail = b""  # the last bytes of the head so far: its end may straddle two reads
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait(self._head_s, self._head_too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        # The server is shutting down (and asks each connection to): every event stream of
        # this process ends now, or the server would wait for them (api/streams.py).
        stop_all()
        super().shutdown()

    def data_received(self, data: bytes) -> None:
        # The head is counted before it is parsed, up to the blank line that ends it: a head
        # of max_head bytes is read, one of a byte more is refused, however it arrives.
        if self._in_head:
            seen = self._tail + data
            end = seen.find(b"\r\n\r\n")
            head = self._head + (len(data) if end < 0 else end + 4 - len(self._tail))
            if head > self._max_head:
                self._stop_waiting()
                self._refuse(431, code="header_too_large", detail="The headers are too large.")
                return
            self._head, self._tail = head, seen[-3:]
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._wait(self._head_s, self._head_too_slow)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._wait(self._body_s, self._body_too_slow)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._stop_waiting()
        self._in_head, self._head, self._tail = True, 0, b""
        super().on_message_complete()

    # -- timers --------------------------------------------------------------------------

    def _wait(self, seconds: float, then: Any) -> None:
        self._stop_waiting()
        self._timer = self.loop.call_later(seconds, then)

    def _stop_waiting(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_too_slow(self) -> None:
        if self._in_head and not self.transport.is_closing():
            self._stop_waiting()
            self._refuse(408, code="request_timeout", detail="Its headers took too long.")

    def _body_too_slow(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def _refuse(self, status: int, code: str, detail: str) -> None:
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # an answer to an earlier request is still being written
        else:
            _answer_and_close(self.transport, status, code, detail)


async def _too_many_connections(scope: Any, receive: Any, send: Any) -> None:
    """What a worker past its ``limit_concurrency`` answers: the service's JSON error."""
    code = "too_many_connections"
    body = _error_body(
        code,
        "This worker holds as many connections as it takes (PERCEPTRON_MAX_CLIENT_CONNECTIONS); "
        "retry shortly, or over fewer connections.",
    )
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# uvicorn's protocol answers with the app it names by this module global (no setting for it).
httptools_impl.service_unavailable = _too_many_connections  # type: ignore[attr-defined]


def _answer_and_close(transport: asyncio.Transport, status: int, code: str, detail: str) -> None:
    """Answer ``status`` with the service's JSON error body, and close the connection."""
    body = _error_body(code, detail)
    head = b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode())
    head += b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body)
    transport.write(head + b"connection: close\r\n\r\n" + body)
    transport.close()


def _error_body(code: str, detail: str) -> bytes:
    return json.dumps({"detail": detail, "code": code}).encode()


# -- the ASGI middleware -----------------------------------------------------------------

# The dashboard and Swagger UI (/docs) load their own scripts, style sheets and data from
# this origin only.
PAGES = ("/dashboard", "/docs")
PAGE_POLICY = (
    b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    b"form-action 'self'; frame-ancestors 'none'"
)
# ReDoc (/redoc) styles its page from script (styled-components) and runs its search in a
# worker it makes from a blob: inline styles and blob workers, but still no script, data or
# font from anywhere else.
REDOC = "/redoc"
_IMPORT = re.compile("/models/[^/]+/import/?")  # (routes/model_routes.py: its own body limit)
REDOC_POLICY = PAGE_POLICY + b"; style-src 'self' 'unsafe-inline'; worker-src blob:"
# JSON and text answers run nothing.
DATA_POLICY = b"default-src 'none'; frame-ancestors 'none'"
_ALWAYS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]
_HEADERS = {
    path: [*_ALWAYS, (b"content-security-policy", policy)]
    for path, policy in (("page", PAGE_POLICY), ("redoc", REDOC_POLICY), ("data", DATA_POLICY))
}


class BodyTooLarge(TooLarge):
    code = "body_too_large"

    def __init__(self, limit: int, imported: bool = False) -> None:
        super().__init__(
            f"The import is larger than {limit} bytes (PERCEPTRON_MAX_IMPORT_BYTES); export "
            "without its checkpoints, or raise it."
            if imported
            else f"The request body is larger than {limit} bytes (PERCEPTRON_MAX_BODY_BYTES); "
            "send smaller batches."
        )


class Edge:
    """Every HTTP request's body limit, security headers, count and time (a pure ASGI
    middleware: no body copied).

    The body limit refuses bodies over ``max_bytes`` (an import's: ``import_bytes``, an export
    file being larger than any batch): by Content-Length at once, else as they are read. A
    chunked body (no length given) is counted as the handler reads it, not read ahead: a
    handler that refuses the request first (no valid key) never has it read at all.
    Past the limit, reading raises ``BodyTooLarge``, which the app answers 413 (routes read
    bodies in ``FastJSONRoute``, which lets it through to the app's ServiceError handler).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, import_bytes: int) -> None:
        # Imported here, in a worker: ``perceptron serve`` imports this module for its HTTP
        # protocol before it sets the metrics' folder, where importing them makes their files.
        from service.metrics.prometheus import LATENCY, REQUESTS

        self.app = app
        self.max_bytes, self.import_bytes = max_bytes, import_bytes
        self._requests, self._latency = REQUESTS, LATENCY
        # Labelled children looked up once: ``labels(...)`` is a locked dict lookup per call.
        self._counts: dict[tuple[str, str, int], Any] = {}
        self._times: dict[tuple[str, str], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        path: str = scope["path"]
        extra = _HEADERS[
            "page" if path.startswith(PAGES) else "redoc" if path.startswith(REDOC) else "data"
        ]
        status = 0  # not started; 500 if the app raises before it starts an answer
        size = 0
        imported = scope["method"] == "POST" and _IMPORT.fullmatch(path) is not None
        limit = self.import_bytes if imported else self.max_bytes

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        async def counted() -> Message:
            nonlocal size
            message = await receive()
            size += len(message.get("body", b""))
            if size > limit:
                raise BodyTooLarge(limit, imported)  # the app's handler answers 413
            return message

        try:
            length = _content_length(scope)
            if length is not None and length > limit:
                await _refuse(sending, BodyTooLarge(limit, imported))
            else:
                try:
                    await self.app(scope, receive if length is not None else counted, sending)
                except BodyTooLarge as e:
                    if status:
                        raise
                    await _refuse(sending, e)  # an app that let it through
        finally:
            self._record(scope, status or 500, time.perf_counter() - start)

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        method = scope["method"]
        count = self._counts.get((route, method, status))
        if count is None:
            count = self._counts[route, method, status] = self._requests.labels(
                route, method, str(status)
            )
        timer = self._times.get((route, method))
        if timer is None:
            timer = self._times[route, method] = self._latency.labels(route, method)
        count.inc()
        timer.observe(seconds)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit():
            return int(value)
    return None


async def _refuse(send: Send, err: BodyTooLarge) -> None:
    body = json.dumps({"detail": err.message, "code": err.code}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# -- the access log ----------------------------------------------------------------------

# The request that tells the service is up (for ``perceptron serve``'s banner)
PROBE = "/healthz?from=perceptron-serve"


class QuietProbe(logging.Filter):
    """Drops the access log's line for ``PROBE``."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (isinstance(args, tuple) and len(args) > 2 and args[2] == PROBE)
