"""Group commit: requests for one model that arrive while its commit is in flight share the next.

A worker runs at most one commit per model and operation at a time (or a few, where an
operation's commits may overlap). Whatever arrives in the meantime waits and goes, in arrival
order, into the next commit: one Redis round trip for many requests when busy, no added delay
when idle. Every item keeps its own place in the sequence, so the result is the one the same
requests would get one after another. A request may hold tagged requests (handed-off learns,
by their tokens; several queued as one by a writer's take): a batch tells, beside its items,
where each tagged request's items lie. A request's items are a list, or columns of them
(``join`` puts a commit's requests end to end: learns keep a packed batch one matrix).

A ``Batcher`` holds the queue only; each operation writes its own commit loop, where a reader
sees what runs::

    done = batcher.put(items)                     # queued at once, in this turn of the loop
    if batcher.needs_committer():                 # none running: start one
        batcher.add_committer(asyncio.create_task(commit_queued(batcher)))
    return await done

    async def commit_queued(batcher):
        with batcher.committing():                # while requests are queued
            while batch := batcher.next_batch():  # the oldest, and those that fit after it
                with batch:                       # each request gets its results, or the error
                    batch.results = await commit(batch.items, batch.spans)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence, Sized
from types import TracebackType
from typing import Any, Generic, TypeVar, cast

Part = TypeVar("Part", bound=Sized)  # one request's items (a list, or columns of them)
Result = TypeVar("Result")
# A tagged request in one batch: (its tag, where its items start, where they stop).
Span = tuple[str, int, int]
# Items (examples) one group commit (or one hand-over) may hold: several requests of up to
# PERCEPTRON_MAX_BATCH each, while a commit stays a few milliseconds of Redis time.
GROUP_MOST = 10_000


def chain(parts: Sequence[Sequence[Any]]) -> list[Any]:
    """Lists of items end to end: how a batch joins its requests' items, unless told."""
    return [item for items in parts for item in items]


class Batcher(Generic[Part, Result]):
    """Requests queued for the next commit: at most ``limit`` items a commit (one request
    alone may exceed it) and ``committers`` commits at a time (one, for a commit that must
    see the one before); ``join`` puts the items of a commit's requests end to end."""

    def __init__(
        self, limit: int, committers: int = 1, join: Callable[[list[Part]], Part] | None = None
    ) -> None:
        self._limit = limit
        self._most = committers
        self._join: Callable[[list[Part]], Part] = join or cast(Any, chain)
        # (items, where its tagged requests lie in them, its future)
        self._queue: list[tuple[Part, Sequence[Span], asyncio.Future[Sequence[Result]]]] = []
        self._committers: set[asyncio.Task[None]] = set()

    @property
    def idle(self) -> bool:
        return not self._committers and not self._queue

    @property
    def waiting(self) -> tuple[int, int]:
        """Requests queued for a later commit (not those of the commits in flight), and their
        items; several queued as one count one each."""
        return (
            sum(max(1, len(spans)) for _, spans, _ in self._queue),
            sum(len(items) for items, _, _ in self._queue),
        )

    def put(self, items: Part, spans: Sequence[Span] = ()) -> asyncio.Future[Sequence[Result]]:
        """Queue a request at once (in the caller's turn of the event loop); its results come
        in the future returned. ``spans``: the tagged requests it holds (tag, start, stop in
        ``items``), queued as one: they go in one commit, and its error reaches them all."""
        future: asyncio.Future[Sequence[Result]] = asyncio.get_running_loop().create_future()
        self._queue.append((items, spans, future))
        return future

    def needs_committer(self) -> bool:
        """Whether a request just queued needs another committer started for it."""
        return len(self._committers) < self._most

    def add_committer(self, task: asyncio.Task[None]) -> None:
        """Count ``task`` among the committers from now on (it runs ``committing()``)."""
        self._committers.add(task)

    def committing(self) -> _Committing:
        """The span of a committer's loop: once it ends, a request queued starts a new
        committer; a committer cancelled leaves none behind (their requests are cancelled)."""
        return _Committing(self)

    def next_batch(self) -> Batch[Part, Result] | None:
        """The requests of the next commit, off the queue: the oldest, and those after it that
        keep the commit within the limit of items; None when none waits."""
        if not self._queue:
            return None
        taken, size = 0, 0
        while taken < len(self._queue) and (
            taken == 0 or size + len(self._queue[taken][0]) <= self._limit
        ):
            size += len(self._queue[taken][0])
            taken += 1
        requests, self._queue = self._queue[:taken], self._queue[taken:]
        return Batch(requests, self._join)


class _Committing:
    def __init__(self, batcher: Batcher[Any, Any]) -> None:
        self._batcher = batcher

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        b = self._batcher
        # At once, as the loop ends: a request queued from now on starts a new committer.
        task = asyncio.current_task()
        if task is not None:
            b._committers.discard(task)
        if kind is not None:  # cancelled: nothing will commit the requests still queued
            for _items, _spans, future in b._queue:
                future.cancel()
            b._queue.clear()


class Batch(Generic[Part, Result]):
    """The requests of one commit: ``items`` end to end, ``spans`` where the tagged requests
    lie in them. Used as ``with batch:``, around the commit that sets ``results`` (one per
    item): each request gets its own, or the commit's error (which the block then swallows,
    so that the committer goes on to the next batch; not a cancellation)."""

    __slots__ = ("_requests", "items", "spans", "results")

    def __init__(
        self,
        requests: list[tuple[Part, Sequence[Span], asyncio.Future[Sequence[Result]]]],
        join: Callable[[list[Part]], Part],
    ) -> None:
        self._requests = requests
        self.items: Part = join([items for items, _, _ in requests])
        self.spans: list[Span] = []
        start = 0
        for items, tagged, _ in requests:
            self.spans += [(tag, start + a, start + b) for tag, a, b in tagged]
            start += len(items)
        self.results: Sequence[Result] = []

    def __enter__(self) -> Batch[Part, Result]:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> bool:
        if error is not None:  # every request of the commit gets its error
            cancelled = isinstance(error, asyncio.CancelledError)
            for _items, _spans, future in self._requests:
                if future.done():
                    continue
                if cancelled:
                    future.cancel()
                else:
                    future.set_exception(error)
            return not cancelled
        start = 0
        for items, _spans, future in self._requests:
            if not future.done():  # a client may have gone away meanwhile
                future.set_result(self.results[start : start + len(items)])
            start += len(items)
        return False


def batcher_of(
    queues: dict[str, Any],
    op: str,
    max_batch: int,
    committers: int = 1,
    join: Callable[[list[Any]], Any] = chain,
) -> Batcher[Any, Any]:
    """The group-commit queue of one operation in ``queues`` (a replica's), made at its first
    use: a commit holds GROUP_MOST items, or one request of up to ``max_batch``."""
    queue: Batcher[Any, Any] | None = queues.get(op)
    if queue is None:
        queue = queues[op] = Batcher(max(max_batch, GROUP_MOST), committers, join)
    return queue
