"""What a worker's copy lacks, read from a real Redis: inline from a script, or read directly."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio

from service.contract.store_protocol import SYNC_INLINE
from service.contract.store_values import Bucket, LearnBatch, Made, SyncData
from service.store import ModelKeys, Store

EPOCH = "0123456789abcdef"


async def compact(store: Store, version: int, data: bytes, keep: bool = True) -> bool:
    """Model "m"'s log compacted up to ``version`` into ``data`` (a checkpoint every 10
    updates or second, kept with ``keep``)."""
    return await store.compact(
        "m", epoch=EPOCH, version=version, data=data, now_ms=0, keep=keep, every=10,
        every_ms=1000,
    )  # fmt: skip


def entry(version: int) -> bytes:
    return b"0|1|entry-%d" % version + bytes(800)  # the size of a d=100 entry


def run(redis_url: str, body: Callable[[Store], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            store = Store(client)
            await store.create_model("m", '{"n_features": 1}', EPOCH)
            return await body(store)
        finally:
            await client.aclose()

    return asyncio.run(go())


async def learn(store: Store, version: int, n: int) -> int:
    """Log ``n`` updates on top of ``version``; returns the new version."""
    entries = [entry(version + i + 1) for i in range(n)]
    batch = LearnBatch(n, 0, b"0" * n, {"cm:1:1": n}, entries, [])
    result = await store.commit_learn(
        "m", epoch=EPOCH, made=Made(version, ""), when=Bucket(1, 10), batch=batch
    )
    assert not isinstance(result, SyncData)
    return version + n


def expect(data: SyncData, base: int, version: int, snapshot: bytes | None) -> None:
    assert (data.epoch, data.version, data.base, data.snapshot) == (EPOCH, version, base, snapshot)
    assert data.entries == [entry(v) for v in range(base + 1, version + 1)]


@pytest.mark.parametrize("behind", [0, 1, SYNC_INLINE, SYNC_INLINE + 1, 300])
def test_sync_sends_what_a_copy_lacks_inline_or_read_directly(redis_url: str, behind: int) -> None:
    async def body(store: Store) -> None:
        version = await learn(store, 0, 400)
        expect(await store.sync("m", version - behind), version - behind, version, None)
        # A copy with nothing gets the snapshot (none yet: empty) and the whole log.
        expect(await store.sync("m", -1), 0, version, b"")

    run(redis_url, body)


def test_sync_after_compaction_sends_the_snapshot_only_to_copies_behind_it(
    redis_url: str,
) -> None:
    async def body(store: Store) -> None:
        version = await learn(store, 0, 300)
        assert await compact(store, 200, b"weights@200")
        version = await learn(store, version, 10)
        expect(await store.sync("m", 150), 200, version, b"weights@200")
        expect(await store.sync("m", 200), 200, version, None)
        expect(await store.sync("m", 290), 290, version, None)
        expect(await store.sync("m", 20), 200, version, b"weights@200")
        # A prediction made on a stale copy is refused with the same answer.
        stale = await store.commit_predictions(
            "m", epoch=EPOCH, made=Made(100, ""), tokens=["a" * 16], records=[b"P"], ttl_s=60
        )
        assert stale is not None
        expect(stale, 200, version, b"weights@200")

    run(redis_url, body)


def test_a_read_that_compaction_moved_is_read_again(redis_url: str) -> None:
    """``read_log`` is told where the log starts; when that moved, it reads again."""

    async def body(store: Store) -> None:
        version = await learn(store, 0, 300)
        assert await compact(store, 250, b"weights@250", keep=False)
        keys = ModelKeys("m")
        # As if the snapshot had been at 0 when the script answered.
        expect(await store.read_log(keys, 100, 0), 250, version, b"weights@250")
        expect(await store.read_log(keys, 260, 0), 260, version, None)
        expect(await store.read_log(keys, 260, 250), 260, version, None)

    run(redis_url, body)


def test_a_read_under_a_compaction_before_every_read_catches_up(redis_url: str) -> None:
    """Compaction as often as a worker reads (many workers learning fast, each compacting): a
    read that it moved is read again, and the last try reads the snapshot and the whole log in
    one transaction, which nothing comes between. It answered ModelBusy after 20 reads before
    (seen with 12 workers and 27,000 feedback updates a second)."""

    async def body(store: Store) -> None:
        state = {"version": await learn(store, 0, 300), "snap": 0, "reads": 0}
        real = store.client.pipeline

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = real(*args, **kwargs)
            execute = pipe.execute

            async def compacted_first(*a: Any, **k: Any) -> Any:
                if state.get("compacting"):  # (the compaction's own pipeline: staging)
                    return await execute(*a, **k)
                state["compacting"] = 1
                try:
                    await compact_once()
                finally:
                    state["compacting"] = 0
                return await execute(*a, **k)

            async def compact_once() -> None:
                state["version"] = await learn(store, state["version"], 1)
                state["snap"] += 1
                weights = b"weights@%d" % state["snap"]
                assert await compact(store, state["snap"], weights, keep=False)
                state["reads"] += 1

            pipe.execute = compacted_first  # type: ignore[method-assign]
            return pipe

        store.client.pipeline = pipeline  # type: ignore[method-assign]
        try:
            data = await store.read_log(ModelKeys("m"), 100, 0)
        finally:
            del store.client.pipeline
        snap = state["snap"]
        # two reads moved, the snapshot's shape (its chunks: store/ops/blobs.py), and the
        # transaction
        assert state["reads"] == snap == 4
        expect(data, snap, state["version"], b"weights@%d" % snap)

    run(redis_url, body)


def test_an_undo_counted_from_where_the_kept_updates_no_longer_start_changes_nothing(
    redis_url: str,
) -> None:
    """The updates an undo leaves out are counted from the start of the kept updates it read:
    when that start moved meanwhile (old history let go), it does nothing, and is read again."""

    async def body(store: Store) -> None:
        version = await learn(store, 0, 300)
        assert await compact(store, 200, b"weights@200")
        keys = ModelKeys("m")
        past = await store.client.lrange(keys.past, 0, -1)
        assert past == [entry(v) for v in range(1, 201)]  # kept from version 0 on
        moved = await store.undo_updates(
            "m",
            epoch=EPOCH,
            new_epoch="f" * 16,
            expect=version,
            start=7,
            drops=[0],
            weights=b"",
            version=299,
            kept_bytes=0,
            left_from=1,
            now_ms=0,
        )
        assert moved is None
        assert await store.client.lrange(keys.past, 0, -1) == past
        assert int(await store.client.hget(keys.meta, "version") or -1) == version
        before = await store.undo_updates(
            "m",
            epoch=EPOCH,
            new_epoch="f" * 16,
            expect=version,
            start=0,
            drops=[0, 250],
            weights=b"",
            version=298,
            kept_bytes=0,
            left_from=1,
            now_ms=0,
        )
        assert before is not None
        kept = [entry(v) for v in range(2, 301) if v != 251]
        assert await store.client.lrange(keys.past, 0, -1) == kept
        assert await store.client.llen(keys.log) == 0

    run(redis_url, body)
