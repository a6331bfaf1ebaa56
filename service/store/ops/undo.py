"""UNDO: leave some kept updates out of a model, rebuilt without them (``service/history.py``
picks them: one API key's, or a time range's)."""

from __future__ import annotations

from ...protocol import Status
from ..keys import ModelKeys
from ..script import Arg, Script
from . import parts
from .history import HISTORY_KEYS
from .runner import Runner

# Once the model is still EPOCH at version EXPECT, its kept updates starting after version
# START (the drops count from there): first a checkpoint of it as it is (its
# snapshot and log); then the kept updates listed after the fixed arguments (0-based, counted
# from the retained log's start through the log, ascending) go, the rest become the retained
# log, and WEIGHTS (packed: the oldest kept weights with every other kept update applied, at
# VERSION) the snapshot, under a new epoch. KEPT_BYTES: the bytes of the updates that stay.
# The checkpoints made from version LEFT_FROM on, which hold updates that went, are marked as
# left. Returns {DONE, the id of the checkpoint made first}, or {UNCHANGED} when the model is
# at another version (nothing done).
SCRIPT = Script(
    "undo",
    keys=("meta", "snap", "log", *HISTORY_KEYS, "ring"),
    args=(
        "epoch",
        "new_epoch",
        "expect#",
        "start#",
        "version#",
        "weights",
        "now_ms",
        "kept_bytes#",
        "left_from#",
    ),
    rest_args="drops",
    parts=(parts.CHECKPOINT,),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SNAP_VERSION,
  META_PAST_BASE, META_PAST_VERSION)
if not st[1] then return {NO_MODEL} end
if st[1] ~= EPOCH then return {STALE_EPOCH} end
if tonumber(st[2]) ~= EXPECT then return {UNCHANGED} end
local first = st[4] and tonumber(st[5]) or tonumber(st[3])
if first ~= START then return {UNCHANGED} end
local before = checkpoint(META, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING,
  redis.call('GET', SNAP) or '', redis.call('LRANGE', LOG, 0, -1), st[3], st[2], NOW_MS,
  REASON_BEFORE_UNDO)
local base = retained_base(META, SNAP, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING,
  NOW_MS)
local in_past = tonumber(st[3]) - START
for i = DROPS_AT, #ARGV do  -- marked empty (no entry is), then removed together
  local at = tonumber(ARGV[i])
  if at < in_past then redis.call('LSET', PAST, at, '')
  else redis.call('LSET', LOG, at - in_past, '') end
end
redis.call('LREM', PAST, 0, '')
redis.call('LREM', LOG, 0, '')
retain(META, LOG, PAST, redis.call('LLEN', LOG))
if WEIGHTS == '' then redis.call('DEL', SNAP) else redis.call('SET', SNAP, WEIGHTS) end
local start_in = tonumber(record_field(redis.call('HGET', CHECKPOINT_INFO, base), CK_PAST_IN))
redis.call('HSET', META, META_EPOCH, NEW_EPOCH, META_VERSION, VERSION, META_SNAP_VERSION,
  VERSION, META_SNAP_LENGTH, #WEIGHTS, META_PAST_IN, start_in + KEPT_BYTES)
left_behind(CHECKPOINT_INFO, base, before, LEFT_FROM)
return {DONE, before}
""",
)


async def undo(
    store: Runner,
    name: str,
    epoch: str,
    new_epoch: str,
    expect: int,
    start: int,
    drops: list[int],
    weights: bytes,
    version: int,
    kept_bytes: int,
    left_from: int,
    now_ms: int,
) -> int | None:
    """Leave the kept updates at ``drops`` (counted after version ``start``) out; the id of
    the checkpoint of the model as it was (None: it was not at version ``expect``, or its
    kept updates start elsewhere now: nothing was done)."""
    rest: list[Arg] = [str(i) for i in drops]
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(ModelKeys(name)),
        SCRIPT.arg_list(
            rest,
            epoch=epoch,
            new_epoch=new_epoch,
            expect=expect,
            start=start,
            version=version,
            weights=weights,
            now_ms=now_ms,
            kept_bytes=kept_bytes,
            left_from=left_from,
        ),
    )
    if store.check(name, reply) == Status.UNCHANGED:
        return None
    return int(reply[1])
