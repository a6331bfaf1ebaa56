"""Group commit: requests for one model that arrive while its commit is in flight share the next.

A worker runs at most one commit per model and operation at a time. Whatever arrives in the
meantime waits and goes, in arrival order, into the next commit: one Redis round trip for
many requests when busy, no added delay when idle. Every item keeps its own place in the
sequence, so the result is the one the same requests would get one after another. A request
may hold tagged requests (handed-off learns, by their tokens; several queued as one by a
writer's take): the run gets, beside the items, where each tagged request's items lie.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")
# A tagged request in one run: (its tag, where its items start, where they stop).
Span = tuple[str, int, int]


class Coalescer(Generic[Item, Result]):
    """Runs ``run(items, spans)`` for queued requests, at most ``limit`` items a call and
    ``concurrency`` calls at a time (one, for a commit)."""

    def __init__(
        self,
        run: Callable[[list[Item], list[Span]], Awaitable[list[Result]]],
        limit: int,
        concurrency: int = 1,
    ) -> None:
        self._run = run
        self._limit = limit
        self._concurrency = concurrency
        # (items, where its tagged requests lie in them, its future)
        self._queue: list[tuple[list[Item], Sequence[Span], asyncio.Future[list[Result]]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def idle(self) -> bool:
        return not self._tasks and not self._queue

    @property
    def waiting(self) -> tuple[int, int]:
        """Requests queued for a later run (not those of the runs in flight), and their items;
        several queued as one count one each."""
        return (
            sum(max(1, len(spans)) for _, spans, _ in self._queue),
            sum(len(items) for items, _, _ in self._queue),
        )

    async def submit(self, items: list[Item], spans: Sequence[Span] = ()) -> list[Result]:
        return await self.enqueue(items, spans)

    def enqueue(
        self, items: list[Item], spans: Sequence[Span] = ()
    ) -> asyncio.Future[list[Result]]:
        """Queue a request at once (in the caller's turn of the event loop); its results
        come in the future returned. ``spans``: the tagged requests it holds (tag, start,
        stop in ``items``), queued as one: they go in one run, and its error reaches them
        all."""
        future: asyncio.Future[list[Result]] = asyncio.get_running_loop().create_future()
        self._queue.append((items, spans, future))
        if len(self._tasks) < self._concurrency:
            self._tasks.add(asyncio.create_task(self._drain()))
        return future

    def _take(self) -> list[tuple[list[Item], Sequence[Span], asyncio.Future[list[Result]]]]:
        """The requests of the next commit, off the queue: the oldest, and those after it that
        keep the commit within the limit of items (one request alone may exceed it)."""
        taken, size = 0, 0
        while taken < len(self._queue) and (
            taken == 0 or size + len(self._queue[taken][0]) <= self._limit
        ):
            size += len(self._queue[taken][0])
            taken += 1
        batch, self._queue = self._queue[:taken], self._queue[taken:]
        return batch

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._take()
                flat = [item for items, _, _ in batch for item in items]
                spans: list[Span] = []
                start = 0
                for items, tagged, _ in batch:
                    spans += [(tag, start + a, start + b) for tag, a, b in tagged]
                    start += len(items)
                try:
                    results = await self._run(flat, spans)
                except BaseException as e:  # every request of the commit gets its error
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(e)
                    if isinstance(e, asyncio.CancelledError):
                        raise
                    continue
                start = 0
                for items, _, future in batch:
                    if not future.done():  # a client may have gone away meanwhile
                        future.set_result(results[start : start + len(items)])
                    start += len(items)
        finally:
            # At once, not in a done callback: a request queued from now on starts a new run.
            self._tasks.discard(asyncio.current_task())
            for _, _, future in self._queue:  # only when cancelled: nothing will run them now
                if not future.done():
                    future.cancel()
            self._queue.clear()
