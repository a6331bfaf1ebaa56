"""A model's history, its checkpoints and retained log, read with plain commands (ROLLBACK,
``rollback.py``, makes the model a restored state; FORGET, ``forget.py``, lets old history go,
as ``service/history.py`` decides).

Keys (``ModelKeys.history``): ``past`` holds the update entries older than the snapshot,
for versions ``pastv+1 .. snapv``, after the checkpoint ``pastck`` (its weights are those at
``pastv``); ``ck`` the checkpoints' packed weights by id; ``ckinfo`` their records
(``protocol.Checkpoint``); ``cktail`` the log entries some add to their weights (a checkpoint
made before a reset, an import or a rollback holds the snapshot and the log as they were).
COMPACT (``compact.py``) moves entries to ``past`` and makes the scheduled checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ModelBusy, ModelNotFound
from ...protocol import Checkpoint, Meta, split_tail
from ..keys import ModelKeys
from .runner import Runner, raw, text

HISTORY_KEYS = ("past", "checkpoints", "checkpoint_info", "checkpoint_tails")
READ_ATTEMPTS = 20


@dataclass(frozen=True, slots=True)
class HistoryState:
    """A model's history as read at one moment."""

    epoch: str
    config: str
    version: int
    snap_version: int
    base: int | None  # the checkpoint the retained log starts from (None: none yet)
    past_version: int  # the version of the base (the snapshot's when there is none)
    past_in: int  # bytes ever added to the retained log
    checkpoints: list[Checkpoint]

    @property
    def bytes(self) -> int:
        """The checkpoints' bytes and the retained log's."""
        start = next((c.past_in for c in self.checkpoints if c.id == self.base), self.past_in)
        return sum(c.bytes for c in self.checkpoints) + self.past_in - start

    @property
    def first_version(self) -> int:
        """The oldest version that can be restored by its number."""
        return self.past_version if self.base is not None else self.snap_version


@dataclass(frozen=True, slots=True)
class Restorable:
    """Packed weights at ``base`` (b"": zeros) and the entries after them, in order."""

    config: str
    base: int
    weights: bytes
    entries: list[bytes]
    past: bool = False  # read from the retained log (not the snapshot and log)


async def read_history(store: Runner, name: str) -> HistoryState:
    keys = ModelKeys(name)
    async with store.client.pipeline(transaction=False) as pipe:
        pipe.hmget(
            keys.meta,
            Meta.EPOCH,
            Meta.CONFIG,
            Meta.VERSION,
            Meta.SNAP_VERSION,
            Meta.PAST_BASE,
            Meta.PAST_VERSION,
            Meta.PAST_IN,
        )
        pipe.hgetall(keys.checkpoint_info)
        (epoch, config, version, snapv, base, pastv, past_in), infos = await pipe.execute()
    if epoch is None:
        raise ModelNotFound(name)
    checkpoints = sorted(
        (Checkpoint.parse(int(k), text(v)) for k, v in infos.items()), key=lambda c: c.id
    )
    return HistoryState(
        epoch=text(epoch),
        config=text(config),
        version=int(version),
        snap_version=int(snapv),
        base=int(base) if base is not None else None,
        past_version=int(pastv) if pastv is not None else int(snapv),
        past_in=int(past_in or 0),
        checkpoints=checkpoints,
    )


async def read_version(store: Runner, name: str, version: int) -> tuple[str, Restorable] | None:
    """What restores the model's ``version``, with the epoch it was read at: the retained
    log's checkpoint and entries, or the snapshot and log; None when ``version`` is not kept.
    Read with plain commands; consistent when the epoch, the snapshot's version and the
    retained log's base are the same before and after the read (compaction only moves
    entries from the log to the retained log, so entries appended meanwhile change nothing
    before ``version``)."""
    keys = ModelKeys(name)
    fields = (Meta.EPOCH, Meta.VERSION, Meta.SNAP_VERSION, Meta.PAST_BASE, Meta.PAST_VERSION)
    for _ in range(READ_ATTEMPTS):
        got: list[Any] = await store.client.hmget(keys.meta, *fields)
        epoch, now, snapv_, base_, pastv_ = got
        if epoch is None:
            raise ModelNotFound(name)
        snapv = int(snapv_)
        from_past = base_ is not None and version < snapv
        if version > int(now) or (version < snapv and not from_past):
            return None
        async with store.client.pipeline(transaction=False) as pipe:
            if from_past:
                pastv = int(pastv_)
                if version < pastv:
                    return None
                start = pastv
                pipe.hget(keys.checkpoints, text(base_))
            else:
                start = snapv
                pipe.get(keys.snap)
            n = version - start  # (LRANGE 1 0: none; 0 -1 would be all)
            pipe.lrange(keys.past if from_past else keys.log, 0 if n else 1, n - 1)
            pipe.hmget(keys.meta, *fields)
            pipe.hget(keys.meta, Meta.CONFIG)
            weights, entries, again, config = await pipe.execute()
        if again[0] == epoch and again[2] == snapv_ and again[3] == base_:
            if len(entries) != n:
                return None
            return text(epoch), Restorable(
                text(config), start, raw(weights or b""), entries, from_past
            )
    return None


async def read_kept(store: Runner, name: str) -> tuple[str, int, Restorable]:
    """Everything kept, with the epoch and version it was read at: the oldest kept weights
    (the retained log's checkpoint, or the snapshot) and every entry after them up to that
    version."""
    keys = ModelKeys(name)
    fields = (Meta.EPOCH, Meta.VERSION, Meta.SNAP_VERSION, Meta.PAST_BASE, Meta.PAST_VERSION)
    for _ in range(READ_ATTEMPTS):
        got: list[Any] = await store.client.hmget(keys.meta, *fields)
        epoch, _, snapv_, base_, pastv_ = got
        if epoch is None:
            raise ModelNotFound(name)
        async with store.client.pipeline(transaction=False) as pipe:
            if base_ is not None:
                pipe.hget(keys.checkpoints, text(base_))
                pipe.lrange(keys.past, 0, -1)
            else:
                pipe.get(keys.snap)
                pipe.lrange(keys.past, 1, 0)  # (none)
            pipe.lrange(keys.log, 0, -1)
            pipe.hmget(keys.meta, *fields)
            pipe.hget(keys.meta, Meta.CONFIG)
            weights, past, log, again, config = await pipe.execute()
        if again[0] == epoch and again[2] == snapv_ and again[3] == base_:
            start = int(pastv_) if base_ is not None else int(snapv_)
            version = int(again[1])
            entries = [*past, *log][: version - start]
            if len(entries) != version - start:
                raise ModelBusy(f"Model {name!r}'s kept updates do not add up; retry shortly.")
            restorable = Restorable(text(config), start, raw(weights or b""), entries, True)
            return text(epoch), version, restorable
    raise ModelBusy(f"Model {name!r} was compacted under every read of its history; retry.")


async def read_checkpoint(store: Runner, name: str, id: int) -> Restorable | None:
    """What restores checkpoint ``id``: its weights and tail; None when it is not kept."""
    keys = ModelKeys(name)
    async with store.client.pipeline(transaction=False) as pipe:  # (written together)
        pipe.hget(keys.checkpoint_info, str(id))
        pipe.hget(keys.checkpoints, str(id))
        pipe.hget(keys.checkpoint_tails, str(id))
        info, weights, tail = await pipe.execute()
    if info is None or weights is None:
        return None
    c = Checkpoint.parse(id, text(info))
    return Restorable(c.config, c.base, raw(weights), split_tail(raw(tail or b"")))


@dataclass(frozen=True, slots=True)
class KeptUpdates:
    """Log entries of versions ``first .. first + len(entries) - 1``, read at one moment."""

    config: str
    version: int  # the model's version then
    first_kept: int  # the oldest version kept (restorable_from + 1)
    first: int
    entries: list[bytes]


async def read_updates(store: Runner, name: str, first: int | None, limit: int) -> KeptUpdates:
    """Up to ``limit`` kept updates from version ``first`` on (None: the last ``limit``)."""
    keys = ModelKeys(name)
    fields = (Meta.EPOCH, Meta.VERSION, Meta.SNAP_VERSION, Meta.PAST_BASE, Meta.PAST_VERSION)
    for _ in range(READ_ATTEMPTS):
        got: list[Any] = await store.client.hmget(keys.meta, *fields)
        epoch, version_, snapv_, base_, pastv_ = got
        if epoch is None:
            raise ModelNotFound(name)
        version, snapv = int(version_), int(snapv_)
        start = int(pastv_) if base_ is not None else snapv  # the version before the first kept
        lo = max(start + 1, version - limit + 1 if first is None else first)
        hi = min(version, lo + limit - 1)
        async with store.client.pipeline(transaction=False) as pipe:
            # past holds start+1 .. snapv (at 0 ..), the log snapv+1 .. version (at 0 ..)
            if lo <= min(hi, snapv):
                pipe.lrange(keys.past, lo - start - 1, min(hi, snapv) - start - 1)
            if hi > snapv and hi >= lo:
                pipe.lrange(keys.log, max(lo, snapv + 1) - snapv - 1, hi - snapv - 1)
            pipe.hmget(keys.meta, Meta.EPOCH, Meta.SNAP_VERSION, Meta.PAST_BASE, Meta.CONFIG)
            *parts, again = await pipe.execute()
        if again[:3] == [epoch, snapv_, base_]:
            entries = [e for part in parts for e in part]
            kept = entries[: max(0, hi - lo + 1)]
            return KeptUpdates(text(again[3]), version, start + 1, lo, kept)
    raise ModelBusy(f"Model {name!r} was compacted under every read of its updates; retry.")
