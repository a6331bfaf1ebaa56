"""Server-Sent Events: a worker's open streams, bounded, and the answer that carries one.

``Streams`` counts the streams one worker holds open (at most ``PERCEPTRON_MAX_STREAMS``; past
it ``503 too_many_streams``) and tells them to end when the server shuts down. ``EventStream``
is the answer: it sends what its events give, and ends as soon as the client goes away, the
server shuts down, or the events end, whichever comes first; its stream is then counted off.

Graceful shutdown must not wait on a stream that would never end by itself: uvicorn stops
accepting, asks each connection to shut down (``edge.BoundedHttpToolsProtocol.shutdown``, which
calls ``stop_all``) and then waits for the answers in flight. ``stop_all`` ends every stream of
this process, so that wait is over in milliseconds, not after ``timeout_graceful_shutdown``.

Light on purpose (asyncio, ``engine/tasks.py`` and the errors alone): ``perceptron serve``
imports edge.py, and so this module, before any worker starts.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncGenerator
from contextlib import suppress

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from service.engine.tasks import cancel_all
from service.errors import Unavailable

log = logging.getLogger("perceptron")

EVENT_STREAM = "text/event-stream"


class TooManyStreams(Unavailable):
    code = "too_many_streams"

    def __init__(self, most: int) -> None:
        super().__init__(
            f"This worker holds as many event streams open as it may ({most}, "
            "PERCEPTRON_MAX_STREAMS); retry shortly, or read GET /models/{name}/metrics."
        )


class Streams:
    """The event streams one worker holds open: at most ``most``; all told to end at
    shutdown."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.open = 0
        self.stopping = asyncio.Event()
        _ALL.add(self)

    def enter(self) -> None:
        """Count one more stream open, or refuse it (TooManyStreams; also once stopping)."""
        if self.open >= self.most or self.stopping.is_set():
            raise TooManyStreams(self.most)
        self.open += 1

    def leave(self) -> None:
        self.open -= 1

    def stop(self) -> None:
        self.stopping.set()


_ALL: weakref.WeakSet[Streams] = weakref.WeakSet()


def stop_all() -> None:
    """End every event stream of this process: the server is shutting down."""
    for streams in list(_ALL):
        streams.stop()


class EventStream(StreamingResponse):
    """An answer of ``text/event-stream``: each chunk ``events`` gives, sent as it comes.

    Made once its stream was counted (``Streams.enter``): it counts it off when it ends, how
    ever it ends. A failure of ``events`` (the store gone) ends the stream, logged; the client
    (an ``EventSource``) connects again by itself.
    """

    def __init__(self, events: AsyncGenerator[bytes, None], streams: Streams) -> None:
        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}  # nginx: no buffering
        super().__init__(events, headers=headers, media_type=EVENT_STREAM)
        self.events = events
        self.streams = streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._run(receive, send)
        finally:
            self.streams.leave()

    async def _run(self, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
        await send(start)

        async def pump() -> None:
            async for chunk in self.events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async def gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        tasks: list[asyncio.Future[object]] = [
            asyncio.ensure_future(pump()),
            asyncio.ensure_future(gone()),
            asyncio.ensure_future(self.streams.stopping.wait()),
        ]
        done: set[asyncio.Future[object]] = set()
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_all(tasks)  # (one that lost its cancellation is cancelled again)
            with suppress(Exception):
                await self.events.aclose()
        failed = tasks[0].exception() if tasks[0] in done else None
        if failed is not None and not isinstance(failed, OSError):
            log.warning("an event stream ended: %s", failed)
        if tasks[1] in done or isinstance(failed, OSError):
            return  # the client left: nothing more to send
        with suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
