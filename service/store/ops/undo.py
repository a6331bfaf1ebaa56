"""UNDO: leave some kept updates out of a model, rebuilt without them
(``service/admin/retention.py`` picks them: one API key's, or a time range's)."""

from __future__ import annotations

from service.contract.store_protocol import Status
from service.errors import ModelBusy
from service.store.keys import keys_of
from service.store.ops import blobs, parts
from service.store.ops.history import HISTORY_KEYS
from service.store.script import Arg, Runner, Script, status_of

# The model was read at version EXPECT, its kept updates starting after version START (the
# drops count from there). Once it is still EPOCH with its kept updates starting there: first
# a checkpoint of it as it is (its snapshot, moved, and its log); then the kept updates listed
# after the fixed arguments (0-based, counted from the retained log's start through the log,
# ascending, all of versions up to EXPECT) go, the rest up to EXPECT become the retained log,
# and the packed weights staged at STAGE (LENGTH bytes in CHUNKS chunks, blobs.py: the oldest
# kept weights with every other kept update up to EXPECT applied, at VERSION) the snapshot,
# under a new epoch (its pending predictions lapse; ``deadlines`` goes). The updates learned
# since EXPECT stay, in order, as the log after that
# snapshot: every worker applies them to it as logged, so that learning during an undo is
# never lost nor starves it. A model with no retained log yet starts one at its snapshot, from
# the copy of it staged at STAGE_START (START_LENGTH bytes in START_CHUNKS chunks).
# KEPT_BYTES: the bytes of the updates up to EXPECT that stay. The checkpoints made from
# version LEFT_FROM on, which hold updates that went, are marked as left. Returns {DONE, the
# id of the checkpoint made first, the version now}, {UNCHANGED} when its kept updates start
# elsewhere now (nothing done), or {NOT_STAGED}. The staged keys are let go whatever happens.
SCRIPT = Script(
    "undo",
    keys=("meta", "snap", "log", *HISTORY_KEYS, "ring", "deadlines", "stage", "stage_start"),
    args=(
        "epoch",
        "new_epoch",
        "expect#",
        "start#",
        "version#",
        "length#",
        "chunks#",
        "start_length#",
        "start_chunks#",
        "now_ms",
        "kept_bytes#",
        "left_from#",
    ),
    rest_args="drops",
    parts=(parts.WEIGHTS, parts.CHECKPOINT, parts.RETAINED),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SNAP_VERSION,
  META_PAST_BASE, META_PAST_VERSION, META_SNAP_LENGTH)
local refused = nil
if not st[1] then refused = NO_MODEL
elseif st[1] ~= EPOCH then refused = STALE_EPOCH
elseif tonumber(redis.call('HGET', META, META_CHALLENGERS) or '0') > 0 then
  refused = HAS_CHALLENGERS
elseif (st[4] and tonumber(st[5]) or tonumber(st[3])) ~= START
    or tonumber(st[2]) < EXPECT then refused = UNCHANGED
elseif not restore_staged(STAGE, CHUNKS, not st[4], STAGE_START, START_CHUNKS, START_LENGTH,
    SNAP, st[6]) then
  refused = NOT_STAGED
end
if refused then
  let_go(STAGE)
  let_go(STAGE_START)
  return {refused}
end
local snapv, later = tonumber(st[3]), tonumber(st[2]) - EXPECT
local before = checkpoint(META, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING, SNAP,
  weights_bytes(SNAP, st[6]), redis.call('LRANGE', LOG, 0, -1), st[3], st[2], NOW_MS,
  REASON_BEFORE_UNDO)
local base = retained_base(META, LOG, STAGE_START, CHECKPOINTS, CHECKPOINT_INFO,
  CHECKPOINT_TAILS, RING, NOW_MS)
-- Updates learned since EXPECT that a compaction moved to the retained log go back to the
-- head of the log, in order.
if snapv > EXPECT then
  local moved = redis.call('LRANGE', PAST, EXPECT - snapv, -1)
  redis.call('LTRIM', PAST, 0, EXPECT - snapv - 1)
  for i = #moved, 1, -1 do redis.call('LPUSH', LOG, moved[i]) end
  snapv = EXPECT
end
local in_past = snapv - START
for i = DROPS_AT, #ARGV do  -- marked empty (no entry is), then removed together
  local at = tonumber(ARGV[i])
  if at < in_past then redis.call('LSET', PAST, at, '')
  else redis.call('LSET', LOG, at - in_past, '') end
end
redis.call('LREM', PAST, 0, '')
redis.call('LREM', LOG, 0, '')
retain(META, LOG, PAST, redis.call('LLEN', LOG) - later)
move_weights(STAGE, SNAP)
let_go(STAGE_START)
local start_in = tonumber(record_field(redis.call('HGET', CHECKPOINT_INFO, base), CK_PAST_IN))
redis.call('DEL', DEADLINES)  -- its pending predictions lapse: none awaits a default
redis.call('HDEL', META, META_PREV_EPOCH)  -- no prediction from before stays
redis.call('HSET', META, META_EPOCH, NEW_EPOCH, META_VERSION, VERSION + later,
  META_SNAP_VERSION, VERSION, META_SNAP_LENGTH, LENGTH, META_PAST_IN, start_in + KEPT_BYTES)
left_behind(CHECKPOINT_INFO, base, before, LEFT_FROM)
return {DONE, before, VERSION + later}
""",
)


async def undo_updates(
    store: Runner,
    name: str,
    *,
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
    snapshot: bytes | None = None,
) -> tuple[int, int] | None:
    """Leave the kept updates at ``drops`` (counted after version ``start``, all up to version
    ``expect``, where the model was read) out: (the checkpoint of the model as it was, its
    version now: the updates learned since ``expect`` stay after the rebuilt weights, at
    ``version``); None when its kept
    updates start elsewhere now (nothing was done). ``snapshot``: the model's snapshot as
    read, for the retained log to start from when it has none yet."""
    keys = keys_of(name)
    snapshot = snapshot or b""
    stage, copy = await blobs.stage(store.client, keys, weights, snapshot)
    rest: list[Arg] = [str(i) for i in drops]
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(keys, {"stage": stage, "stage_start": copy}),
        SCRIPT.arg_list(
            rest,
            epoch=epoch,
            new_epoch=new_epoch,
            expect=expect,
            start=start,
            version=version,
            length=len(weights),
            chunks=blobs.chunks(len(weights)),
            start_length=len(snapshot),
            start_chunks=blobs.chunks(len(snapshot)),
            now_ms=now_ms,
            kept_bytes=kept_bytes,
            left_from=left_from,
        ),
    )
    status = status_of(store, name, reply)
    if status == Status.UNCHANGED:
        return None
    if status == Status.NOT_STAGED:
        raise ModelBusy(f"Model {name!r}'s rebuilt weights were not all written; retry.")
    return int(reply[1]), int(reply[2])
