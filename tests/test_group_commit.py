"""Group commit: queued requests share a commit, each gets its own results, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.engine.batcher import Batcher, Span
from service.engine.learn_commits import Learned, LearnedRows, columns
from service.learner import Label

Commit = Callable[[list[int], list[Span]], Awaitable[list[int]]]


class Committed:
    """A batcher with its commit loop written as the engine writes its own (learning.py)."""

    def __init__(self, run: Commit, limit: int, concurrency: int = 1) -> None:
        self.run = run
        self.batcher: Batcher[list[int], int] = Batcher(limit, concurrency)

    def enqueue(
        self, items: list[int], spans: Sequence[Span] = ()
    ) -> asyncio.Future[Sequence[int]]:
        done = self.batcher.put(items, spans)
        if self.batcher.needs_committer():
            self.batcher.add_committer(asyncio.create_task(self._commit_queued()))
        return done

    async def submit(self, items: list[int], spans: Sequence[Span] = ()) -> list[int]:
        return list(await self.enqueue(items, spans))

    async def _commit_queued(self) -> None:
        with self.batcher.committing():
            while batch := self.batcher.next_batch():
                with batch:
                    batch.results = await self.run(batch.items, batch.spans)

    @property
    def idle(self) -> bool:
        return self.batcher.idle

    @property
    def waiting(self) -> tuple[int, int]:
        return self.batcher.waiting


def test_requests_arriving_during_a_commit_share_the_next_one() -> None:
    calls: list[list[int]] = []

    async def run(items: list[int], _: list[Span]) -> list[int]:
        calls.append(list(items))
        await asyncio.sleep(0.01)
        return [i * 10 for i in items]

    async def main() -> list[list[int]]:
        c = Committed(run, limit=100)
        first = asyncio.ensure_future(c.submit([0, 100]))
        await asyncio.sleep(0.001)  # its commit is in flight now
        rest = [asyncio.ensure_future(c.submit([i, i + 100])) for i in range(1, 5)]
        return [await first] + [await r for r in rest]

    results = asyncio.run(main())
    assert results == [[i * 10, (i + 100) * 10] for i in range(5)]
    assert calls[0] == [0, 100]  # the first goes at once, alone
    assert calls[1] == [1, 101, 2, 102, 3, 103, 4, 104]  # the rest waited and went together


def test_a_commit_never_exceeds_the_limit() -> None:
    sizes: list[int] = []

    async def run(items: list[int], _: list[Span]) -> list[int]:
        sizes.append(len(items))
        await asyncio.sleep(0)
        return items

    async def main() -> None:
        c = Committed(run, limit=3)
        out = await asyncio.gather(*(c.submit([i]) for i in range(10)))
        assert [o[0] for o in out] == list(range(10))

    asyncio.run(main())
    assert max(sizes) <= 3 and sum(sizes) == 10


def test_an_error_reaches_every_request_of_its_commit_only() -> None:
    async def run(items: list[int], _: list[Span]) -> list[int]:
        await asyncio.sleep(0.01)
        if -1 in items:
            raise ValueError("bad batch")
        return items

    async def main() -> None:
        c = Committed(run, limit=2)
        first = asyncio.ensure_future(c.submit([1]))
        await asyncio.sleep(0)
        bad = [asyncio.ensure_future(c.submit([-1])), asyncio.ensure_future(c.submit([2]))]
        later = asyncio.ensure_future(c.submit([3]))
        assert await first == [1]
        for f in bad:
            with pytest.raises(ValueError, match="bad batch"):
                await f
        assert await later == [3]
        assert c.idle

    asyncio.run(main())


def test_a_run_knows_where_each_tagged_request_lies() -> None:
    seen: list[list[Span]] = []

    async def run(items: list[int], spans: list[Span]) -> list[int]:
        seen.append(spans)
        await asyncio.sleep(0.01)
        return items

    async def main() -> None:
        c = Committed(run, limit=100)
        first = asyncio.ensure_future(c.submit([0], [("a", 0, 1)]))
        await asyncio.sleep(0.001)
        rest = [
            asyncio.ensure_future(c.submit([1, 2])),
            asyncio.ensure_future(c.submit([3, 4, 5], [("b", 0, 3)])),
            asyncio.ensure_future(c.submit([6], [("c", 0, 1)])),
        ]
        assert await first == [0]
        assert [await r for r in rest] == [[1, 2], [3, 4, 5], [6]]

    asyncio.run(main())
    assert seen == [[("a", 0, 1)], [("b", 2, 5), ("c", 5, 6)]]


def test_with_concurrency_several_runs_go_at_once_and_none_is_left_behind() -> None:
    running: list[int] = []
    most = [0]

    async def run(items: list[int], _: list[Span]) -> list[int]:
        running.append(1)
        most[0] = max(most[0], len(running))
        await asyncio.sleep(0.005)
        running.pop()
        return items

    async def main() -> None:
        c = Committed(run, limit=1, concurrency=3)
        for _ in range(3):  # waves: a request that arrives as a run ends starts a new one
            out = await asyncio.gather(*(c.submit([i]) for i in range(10)))
            assert [o[0] for o in out] == list(range(10))
            assert c.idle

    asyncio.run(main())
    assert most[0] == 3


def test_waiting_counts_what_queues_behind_the_run_in_flight() -> None:
    """A model's writer takes more requests while its commit runs, until the next commit is
    full (service/engine/writer.py): what waits is what is queued, not what the run holds."""
    release = asyncio.Event()

    async def run(items: list[int], _: list[Span]) -> list[int]:
        await release.wait()
        return items

    async def main() -> None:
        c = Committed(run, limit=100)
        assert c.waiting == (0, 0)
        first = c.enqueue([1, 2, 3])
        await asyncio.sleep(0)  # its run starts with it
        assert c.waiting == (0, 0) and not c.idle
        later = [c.enqueue([4, 5]), c.enqueue([6])]
        assert c.waiting == (2, 3)
        release.set()
        assert await first == [1, 2, 3]
        assert [await f for f in later] == [[4, 5], [6]]
        assert c.waiting == (0, 0)

    asyncio.run(main())


def test_a_cancelled_committer_leaves_no_request_waiting_and_the_next_starts_anew() -> None:
    """A committer cancelled mid-commit: its requests and those queued behind it are cancelled
    (nothing would commit them), and a request queued after that starts a new committer."""
    started = asyncio.Event()

    async def run(items: list[int], _: list[Span]) -> list[int]:
        started.set()
        await asyncio.sleep(10 if items == [1] else 0)
        return items

    async def main() -> None:
        c = Committed(run, limit=1)
        first = c.enqueue([1])
        behind = c.enqueue([2])
        await started.wait()
        (committer,) = c.batcher._committers
        committer.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert first.cancelled() and behind.cancelled()
        assert c.idle
        assert await c.submit([3]) == [3]

    asyncio.run(main())


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.booleans()), max_size=30))
def test_learned_rows_answer_as_the_tuples_they_stand_for(
    rows: list[tuple[int, int, bool]],
) -> None:
    """A commit's results kept as columns read, whole and sliced per request, as the tuples
    made one by one: the label served, the mistake, the update, the version after it."""
    classes: list[Label] = ["a", 7, "c"]
    served, ts, updated = [s for s, _, _ in rows], [t for _, t, _ in rows], [u for *_, u in rows]
    got = LearnedRows.after(classes, served, ts, updated, version=4)
    version, want = 4, list[Learned]()
    for s, t, u in rows:
        version += u
        want.append((classes[s], s != t, u, version))
    assert list(got) == want and [got[i] for i in range(len(got))] == want
    for a in range(len(rows) + 1):
        assert list(got[a:]) == want[a:] and list(got[:a]) == want[:a]
    if rows:
        assert columns(got) == columns(want) == tuple(map(list, zip(*want, strict=True)))
