"""An event stream's answer (``api/streams.py``), in-process: it is counted off when it ends,
however it ends, even when the code that feeds it loses a cancellation (``asyncio.wait_for``
does on Python 3.11; redis-py sends each command through it under a socket timeout). Before,
such a stream kept its slot until ``PERCEPTRON_STREAM_MAX_S`` ran out, and its worker refused
every new stream with ``503 too_many_streams``.

And ``engine/tasks.cancel_all``, which the stream and every close of the service end their
tasks with."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, MutableMapping
from typing import Any

import pytest

from service.api.streams import EventStream, Streams, TooManyStreams
from service.engine.tasks import cancel_all

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Client:
    """The ASGI side of one connection: what the stream sent, and a way to leave."""

    def __init__(self) -> None:
        self.sent: list[MutableMapping[str, Any]] = []
        self.gone = asyncio.Event()
        self.asked = 0

    async def receive(self) -> dict[str, Any]:
        self.asked += 1
        if self.asked == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(message)

    def chunks(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


async def stubborn(lost: list[int]) -> AsyncGenerator[bytes, None]:
    """Events whose source swallows the first cancellation it gets (as a store call under
    Python 3.11's ``asyncio.wait_for`` may), then goes on polling."""
    yield b"first"
    while True:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            if lost:
                raise
            lost.append(1)


async def endless() -> AsyncGenerator[bytes, None]:
    while True:
        yield b"tick"
        await asyncio.sleep(0.05)


async def opened(streams: Streams, events: AsyncGenerator[bytes, None]) -> tuple[Any, Client]:
    streams.enter()
    client = Client()
    answer = asyncio.ensure_future(EventStream(events, streams)({}, client.receive, client.send))
    for _ in range(100):
        if client.chunks():
            break
        await asyncio.sleep(0.01)
    assert client.chunks(), "the stream sent nothing"
    return answer, client


async def test_a_stream_whose_events_lost_a_cancellation_is_still_counted_off() -> None:
    streams = Streams(most=1)
    lost: list[int] = []
    answer, client = await opened(streams, stubborn(lost))
    with pytest.raises(TooManyStreams):
        streams.enter()
    client.gone.set()
    await asyncio.wait_for(answer, 2)  # before: never ended, its slot taken
    assert lost == [1]  # the first cancellation was lost indeed
    assert streams.open == 0
    streams.enter()  # the next stream opens


async def test_a_stream_is_counted_off_when_its_client_leaves() -> None:
    streams = Streams(most=2)
    answer, client = await opened(streams, endless())
    assert streams.open == 1
    client.gone.set()
    await asyncio.wait_for(answer, 2)
    assert streams.open == 0
    assert client.sent[-1]["type"] == "http.response.body"
    assert client.sent[-1].get("more_body") is True  # nothing more is sent to one gone


async def test_every_stream_ends_when_the_worker_stops() -> None:
    streams = Streams(most=3)
    (a, client_a), (b, client_b) = [await opened(streams, endless()) for _ in range(2)]
    streams.stop()
    await asyncio.wait_for(asyncio.gather(a, b), 2)
    assert streams.open == 0
    for client in (client_a, client_b):
        assert client.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    with pytest.raises(TooManyStreams):
        streams.enter()  # stopping: no new stream


async def test_a_stream_ends_with_its_events() -> None:
    async def two() -> AsyncGenerator[bytes, None]:
        yield b"one"
        yield b"two"

    streams = Streams(most=1)
    answer, client = await opened(streams, two())
    await asyncio.wait_for(answer, 2)
    assert client.chunks() == [b"one", b"two", b""]
    assert streams.open == 0


async def test_a_stream_whose_events_fail_ends_and_is_counted_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def failing() -> AsyncGenerator[bytes, None]:
        yield b"one"
        raise RuntimeError("the store went away")

    streams = Streams(most=1)
    answer, client = await opened(streams, failing())
    await asyncio.wait_for(answer, 2)
    assert streams.open == 0
    assert client.chunks()[-1] == b""
    assert "an event stream ended: the store went away" in caplog.text


async def test_cancel_all_ends_tasks_that_lose_cancellations() -> None:
    lost: list[int] = []

    async def loses_two() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if len(lost) == 2:
                    raise
                lost.append(1)

    async def fails() -> None:
        raise ValueError("its own error")

    tasks = [asyncio.ensure_future(loses_two()), asyncio.ensure_future(fails())]
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_all(tasks), 2)
    assert lost == [1, 1]
    assert tasks[0].cancelled()
    assert isinstance(tasks[1].exception(), ValueError)  # left on the task, not raised


async def test_cancel_all_with_nothing_to_end() -> None:
    done = asyncio.ensure_future(asyncio.sleep(0))
    await done
    await asyncio.wait_for(cancel_all([done]), 1)
    await asyncio.wait_for(cancel_all([]), 1)
    assert done.done() and not done.cancelled()
