"""SYNC: what a worker's copy of a model (at a version) lacks."""

from __future__ import annotations

from typing import Any

from service.contract.store_protocol import Meta
from service.contract.store_values import SyncData
from service.errors import ModelBusy, ModelNotFound, StaleModel
from service.store.keys import ModelKeys, keys_of
from service.store.ops import blobs, parts
from service.store.script import Runner, Script, state_lost, status_of, text

# returns {NO_MODEL} without the model, else the sync reply (parts.SYNC)
SCRIPT = Script(
    "sync",
    keys=("meta", "snap", "log"),
    args=("from_version#",),  # the version the caller holds (-1 for none)
    parts=(parts.SYNC,),
    body="""
if redis.call('EXISTS', META) == 0 then return {NO_MODEL} end
return sync(META, SNAP, LOG, FROM_VERSION)
""",
)


async def sync(store: Runner, name: str, from_version: int) -> SyncData:
    keys = keys_of(name)
    reply = await store.run(
        SCRIPT, SCRIPT.key_list(keys), SCRIPT.arg_list(from_version=from_version)
    )
    status_of(store, name, reply)
    return await store.sync_data(keys, reply, from_version)


READ_ATTEMPTS = 3  # reads of a log that compaction may move meanwhile; the last one cannot
_READ_FIELDS = [Meta.EPOCH, Meta.VERSION, Meta.SEEN, Meta.SNAP_VERSION, Meta.SNAP_LENGTH]
_READ_FIELDS.append(Meta.SEEN_OFFSET)  # (the served learner's count: SEEN minus it)


async def sync_data(
    store: Runner, keys: ModelKeys, reply: list[Any], from_version: int
) -> SyncData:
    """A script's sync reply: the entries themselves, or where to read them (parts.SYNC)."""
    _, epoch, version, seen, base, read_yourself, entries = reply
    if int(read_yourself):
        return await read_log(store, keys, from_version, int(base))
    return SyncData(
        epoch=text(epoch),
        version=int(version),
        seen=int(seen),
        base=int(base),
        snapshot=None,
        entries=list(entries),
    )


async def read_log(store: Runner, keys: ModelKeys, from_version: int, snapv: int) -> SyncData:
    """What a copy at ``from_version`` lacks, read with plain commands, not a script.

    Log indices count from the snapshot's version ``snapv``, and compaction moves the
    snapshot and trims the log in one step: a read is consistent when ``snapv`` is the
    same just before and just after it. Entries appended meanwhile may come too; they
    are the next ones in order. A read that compaction moved is read again from where the
    log starts now; the last try reads the snapshot and the whole log in one transaction,
    which nothing comes between, so a worker catches up even when compaction runs as
    often as it reads (many workers learning fast).
    """
    held: blobs.Shape | None = None  # how the snapshot was held when last looked at
    for attempt in range(READ_ATTEMPTS + READ_ATTEMPTS):
        last = attempt >= READ_ATTEMPTS - 1
        # The snapshot, then the whole log: when the copy needs it, and at the last try.
        # The snapshot in chunks (ops/blobs.py), as it was held just before: read again
        # when that changed meanwhile (the last tries, transactions, only for that).
        whole = last or from_version < snapv
        if whole and held is None:
            held = await blobs.shape_of(store.client, keys.snap)
        read = held if whole else None
        replies, n = await _read_once(store, keys, (from_version, snapv), read, last)
        (epoch, version, seen, before, snaplen, offset), last = replies[0], replies[-1]
        after, epoch_after = last
        if epoch is None or after is None:
            raise ModelNotFound(keys.name)
        if epoch_after != epoch:
            raise StaleModel(keys.name)
        snapshot = None
        if whole:
            now = blobs.shape(replies[1 + n : 4 + n])
            if now != held:
                held = now  # (a new snapshot meanwhile)
                continue
            snapshot = await blobs.joined(replies[1 : 1 + n])
        if int(before) == int(after) and (whole or int(before) == snapv):
            base = int(before) if whole else from_version
            entries = list(replies[-2])
            # Entries appended meanwhile may come too, never fewer than the version says.
            if len(entries) < int(version) - base:
                raise state_lost(store, keys.name, "its update log is incomplete")
            if snapshot is not None and (
                len(snapshot) != int(snaplen)
                if snaplen is not None
                else base > 0 and not snapshot  # written before snaplen was kept
            ):
                raise state_lost(store, keys.name, "its weights snapshot is missing")
            return SyncData(
                epoch=text(epoch),
                version=int(version),
                seen=int(seen) - int(offset or 0),  # (the served learner's own count)
                base=base,
                snapshot=snapshot,
                entries=entries,
            )
        snapv, held = int(after), None
    raise ModelBusy(
        f"Model {keys.name!r} was compacted under every one of {READ_ATTEMPTS} reads of "
        "its log; retry shortly."
    )


async def _read_once(
    store: Runner,
    keys: ModelKeys,
    versions: tuple[int, int],
    snapshot: blobs.Shape | None,
    transaction: bool,
) -> tuple[list[Any], int]:
    """``read_log``'s one read (``versions``: the copy's and the snapshot's): the meta, the
    snapshot held as ``snapshot`` (None: not read) and how it is held after, the log, the
    meta again; and the snapshot's chunks."""
    from_version, snapv = versions
    n = 0
    async with store.client.pipeline(transaction=transaction) as pipe:
        pipe.hmget(keys.meta, _READ_FIELDS)
        if snapshot is not None:
            n = blobs.queue_read(pipe, keys.snap, snapshot)
            blobs.queue_shape(pipe, keys.snap)  # (LLEN or STRLEN fails, by its kind)
        pipe.lrange(keys.log, 0 if snapshot is not None else from_version - snapv, -1)
        pipe.hmget(keys.meta, Meta.SNAP_VERSION, Meta.EPOCH)
        replies = await pipe.execute(raise_on_error=False)
    for reply in (replies[0], *replies[1 : 1 + n], *replies[-2:]):
        if isinstance(reply, Exception):
            raise reply
    return replies, n
