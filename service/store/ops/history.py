"""A model's history, its checkpoints and retained log, read with plain commands (ROLLBACK,
``rollback.py``, makes the model a restored state; FORGET, ``forget.py``, lets old history go,
as ``service/admin/retention.py`` decides).

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

from service.contract.store_protocol import Checkpoint, Meta, split_tail
from service.errors import ModelBusy, ModelNotFound
from service.store.keys import ModelKeys, keys_of
from service.store.ops import blobs
from service.store.script import Runner, raw, text

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
    seen: int | None = None  # a checkpoint's labelled examples (None: not a checkpoint)


# A model's history's layout, read first and again after its entries: the read is consistent
# when the epoch, the snapshot's version and the retained log's base did not change meanwhile
# (compaction only moves entries from the log to the retained log, and entries appended
# meanwhile come after those read).
_FIELDS = (
    Meta.EPOCH,
    Meta.CONFIG,
    Meta.VERSION,
    Meta.SNAP_VERSION,
    Meta.PAST_BASE,
    Meta.PAST_VERSION,
    Meta.PAST_IN,
)


def _state(name: str, got: list[Any], checkpoints: list[Checkpoint] | None = None) -> HistoryState:
    epoch, config, version, snapv, base, pastv, past_in = got
    if epoch is None:
        raise ModelNotFound(name)
    return HistoryState(
        epoch=text(epoch),
        config=text(config),
        version=int(version),
        snap_version=int(snapv),
        base=int(base) if base is not None else None,
        past_version=int(pastv) if pastv is not None else int(snapv),
        past_in=int(past_in or 0),
        checkpoints=checkpoints or [],
    )


def _same_layout(a: HistoryState, b: HistoryState) -> bool:
    return (a.epoch, a.snap_version, a.base) == (b.epoch, b.snap_version, b.base)


def _read_entries(pipe: Any, keys: ModelKeys, s: HistoryState, lo: int, hi: int) -> None:
    """Queue two reads: the kept entries of versions ``lo .. hi`` in the retained log (which
    holds ``first_version+1 .. snap_version``), then in the log (``snap_version+1 ..``)."""
    start, snapv = s.first_version, s.snap_version
    top = min(hi, snapv)  # (LRANGE 1 0 reads none)
    pipe.lrange(keys.past, *((lo - start - 1, top - start - 1) if lo <= top else (1, 0)))
    low = max(lo, snapv + 1)
    pipe.lrange(keys.log, *((low - snapv - 1, hi - snapv - 1) if low <= hi else (1, 0)))


async def read_history(store: Runner, name: str) -> HistoryState:
    keys = keys_of(name)
    async with store.client.pipeline(transaction=False) as pipe:
        pipe.hmget(keys.meta, *_FIELDS)
        pipe.hgetall(keys.checkpoint_info)
        got, infos = await pipe.execute()
    checkpoints = sorted(
        (Checkpoint.parse(int(k), text(v)) for k, v in infos.items()), key=lambda c: c.id
    )
    return _state(name, got, checkpoints)


async def read_sizes(store: Runner, name: str) -> tuple[int, int]:
    """The bytes of the model's snapshot and of its log (a checkpoint of the model as it is
    holds both)."""
    keys = keys_of(name)
    async with store.client.pipeline(transaction=False) as pipe:
        pipe.hget(keys.meta, Meta.SNAP_LENGTH)
        pipe.lrange(keys.log, 0, -1)
        snap, log = await pipe.execute()
    if snap is None:  # (written before its length was kept: a string)
        snap = await store.client.strlen(keys.snap)
    return int(snap), sum(len(e) for e in log)


async def read_kept(
    store: Runner, name: str, upto: int | None = None
) -> tuple[str, int, Restorable] | None:
    """What restores version ``upto`` of the model, with the epoch and version it was read
    at: the snapshot and log when ``upto`` is past the snapshot, else the retained log's
    checkpoint and entries; None when ``upto`` is not kept. ``upto`` None: everything kept,
    from the oldest kept weights through the model's version."""
    keys = keys_of(name)
    for _ in range(READ_ATTEMPTS):
        s = _state(name, await store.client.hmget(keys.meta, *_FIELDS))
        hi = s.version if upto is None else upto
        from_snap = s.base is None or (upto is not None and upto >= s.snap_version)
        start = s.snap_version if from_snap else s.past_version
        if not start <= hi <= s.version:
            return None
        # The weights in chunks (blobs.py): the snapshot, or the retained log's checkpoint
        at = keys.snap if from_snap else keys.checkpoint_weights(s.base or 0)
        held = await blobs.shape_of(store.client, at)
        legacy = None if from_snap or held.kind != "none" else await _legacy(store, keys, s.base)
        async with store.client.pipeline(transaction=False) as pipe:
            n = blobs.queue_read(pipe, at, held)
            _read_entries(pipe, keys, s, start + 1, hi)
            pipe.hmget(keys.meta, *_FIELDS)
            blobs.queue_shape(pipe, at)
            replies = await pipe.execute(raise_on_error=False)
        parts, (past, log, again), after = replies[:n], replies[n : n + 3], replies[n + 3 :]
        for reply in (*parts, past, log, again):
            if isinstance(reply, Exception):
                raise reply
        if _same_layout(s, _state(name, again)) and blobs.shape(after) == held:
            entries = [*past, *log]
            if len(entries) != hi - start:
                raise ModelBusy(f"Model {name!r}'s kept updates do not add up; retry shortly.")
            weights = legacy if legacy is not None else await blobs.joined(parts)
            kept = Restorable(s.config, start, weights, entries, not from_snap)
            return s.epoch, s.version, kept
    raise ModelBusy(f"Model {name!r} was compacted under every read of its history; retry.")


async def _legacy(store: Runner, keys: ModelKeys, checkpoint: int | None) -> bytes | None:
    """A checkpoint's weights as kept before they had a key of their own (None: not so)."""
    if checkpoint is None:
        return None
    found = await store.client.hget(keys.checkpoints, str(checkpoint))
    return None if found is None else raw(found)


async def read_checkpoint(store: Runner, name: str, id: int) -> Restorable | None:
    """What restores checkpoint ``id``: its weights (read in chunks) and tail; None when it is
    not kept."""
    keys = keys_of(name)
    weights = await blobs.read(store.client, keys.checkpoint_weights(id))
    if weights is None:  # zeros, or kept before they had a key of their own
        weights = await _legacy(store, keys, id) or b""
    async with store.client.pipeline(transaction=False) as pipe:  # (written together)
        pipe.hget(keys.checkpoint_info, str(id))
        pipe.hget(keys.checkpoint_tails, str(id))
        info, tail = await pipe.execute()
    if info is None:
        return None  # not kept, or let go meanwhile
    c = Checkpoint.parse(id, text(info))
    return Restorable(c.config, c.base, weights, split_tail(raw(tail or b"")), seen=c.seen)


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
    keys = keys_of(name)
    for _ in range(READ_ATTEMPTS):
        s = _state(name, await store.client.hmget(keys.meta, *_FIELDS))
        lo = max(s.first_version + 1, s.version - limit + 1 if first is None else first)
        hi = min(s.version, lo + limit - 1)
        async with store.client.pipeline(transaction=False) as pipe:
            _read_entries(pipe, keys, s, lo, hi)
            pipe.hmget(keys.meta, *_FIELDS)
            past, log, again = await pipe.execute()
        if _same_layout(s, _state(name, again)):
            return KeptUpdates(s.config, s.version, s.first_version + 1, lo, [*past, *log])
    raise ModelBusy(f"Model {name!r} was compacted under every read of its updates; retry.")
