"""ROLLBACK: make a model a state of its history at once (``service/admin/retention.py``)."""

from __future__ import annotations

from service.contract.store_protocol import Status
from service.errors import ModelBusy
from service.store.keys import keys_of
from service.store.ops import blobs, parts
from service.store.ops.history import HISTORY_KEYS
from service.store.script import Runner, Script, status_of

# Make the model its state at VERSION (packed weights staged at STAGE, LENGTH bytes in CHUNKS
# chunks, blobs.py; CONFIG), once its epoch is still EPOCH: first a checkpoint of the model as it
# is (its snapshot, moved, and its whole log), then a new epoch, so that every worker reloads it
# and pending predictions lapse (none awaits a default any more: ``deadlines`` goes). With KEEP
# '1' (a version of this line, restored by its number) the retained log stays up to VERSION (a
# model with none yet starts one at its snapshot, as a compaction would, from the copy of it
# staged at STAGE_START, START_LENGTH bytes in START_CHUNKS chunks), its bytes then KEPT_BYTES
# when it is cut (-1: it is not, the log's entries up to VERSION join it), and the checkpoints
# made after VERSION on this line are marked as left; else it starts again from the restored
# weights. The drift detector starts afresh (and a retraining's background learner), its events
# stay. Counters, metrics and the last
# outcomes stay what was counted; SEEN ('': it stays), an averaged learner's count of labelled
# examples, which its mean divides by, is kept apart from them (Meta.SEEN_OFFSET). Returns
# {DONE, the id of the checkpoint made first}, or {NOT_STAGED} when a staged key is not whole
# (nothing done).
# The staged keys are let go whatever happens.
SCRIPT = Script(
    "rollback",
    keys=(
        "meta",
        "snap",
        "log",
        *HISTORY_KEYS,
        "ring",
        "deadlines",
        "stage",
        "stage_start",
        "blog",
    ),
    args=(
        "epoch",
        "new_epoch",
        "version#",
        "length#",
        "chunks#",
        "start_length#",
        "start_chunks#",
        "config",
        "now_ms",
        "keep",
        "kept_bytes#",
        "seen",
    ),
    parts=(parts.WEIGHTS, parts.CHECKPOINT, parts.RETAINED),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SNAP_VERSION,
  META_PAST_BASE, META_PAST_VERSION, META_SNAP_LENGTH)
local snapv = tonumber(st[3])
local starts = KEEP == '1' and not st[4] and VERSION >= (snapv or 0)
local refused = nil
if not st[1] then refused = NO_MODEL
elseif st[1] ~= EPOCH then refused = STALE_EPOCH
elseif tonumber(redis.call('HGET', META, META_CHALLENGERS) or '0') > 0 then
  refused = HAS_CHALLENGERS
elseif not restore_staged(STAGE, CHUNKS, starts, STAGE_START, START_CHUNKS, START_LENGTH, SNAP,
    st[6]) then
  refused = NOT_STAGED
end
if refused then
  let_go(STAGE)
  let_go(STAGE_START)
  return {refused}
end
local before = checkpoint(META, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING, SNAP,
  weights_bytes(SNAP, st[6]), redis.call('LRANGE', LOG, 0, -1), st[3], st[2], NOW_MS,
  REASON_BEFORE_ROLLBACK)
if starts then
  st[4], st[5] = retained_base(META, LOG, STAGE_START, CHECKPOINTS, CHECKPOINT_INFO,
    CHECKPOINT_TAILS, RING, NOW_MS)
end
if KEEP == '1' and st[4] and VERSION >= tonumber(st[5]) then
  local base = tonumber(st[4])
  if VERSION <= snapv then
    if VERSION == tonumber(st[5]) then redis.call('DEL', PAST)
    else redis.call('LTRIM', PAST, 0, VERSION - tonumber(st[5]) - 1) end
    if KEPT_BYTES >= 0 then
      local info = redis.call('HGET', CHECKPOINT_INFO, base)
      redis.call('HSET', META, META_PAST_IN, tonumber(record_field(info, CK_PAST_IN)) + KEPT_BYTES)
    end
  else
    retain(META, LOG, PAST, VERSION - snapv)
  end
  left_behind(CHECKPOINT_INFO, base, before, VERSION + 1)
else
  redis.call('DEL', PAST)
  redis.call('HDEL', META, META_PAST_BASE, META_PAST_VERSION, META_PAST_IN)
end
redis.call('DEL', LOG)
move_weights(STAGE, SNAP)
let_go(STAGE_START)
redis.call('DEL', DEADLINES)  -- its pending predictions lapse: none awaits a default
redis.call('HDEL', META, META_PREV_EPOCH)  -- no prediction from before stays
redis.call('HDEL', META, META_DRIFT_STATE)  -- (the learner its detector watched is gone)
redis.call('DEL', BLOG)  -- (and the background learner it trained)
redis.call('HDEL', META, META_BLOG_BYTES)
redis.call('HSET', META, META_EPOCH, NEW_EPOCH, META_CONFIG, CONFIG, META_VERSION, VERSION,
  META_SNAP_VERSION, VERSION, META_SNAP_LENGTH, LENGTH, META_CHECKPOINT_VERSION, VERSION)
if SEEN ~= '' then
  -- An averaged learner's count restored with its sums: the counters (and the last outcomes)
  -- stay what was counted, the learner's own count is apart (Meta.SEEN_OFFSET).
  local counted = tonumber(redis.call('HGET', META, META_SEEN) or '0')
  if counted == tonumber(SEEN) then redis.call('HDEL', META, META_SEEN_OFFSET)
  else
    redis.call('HSET', META, META_SEEN_OFFSET, string.format('%d', counted - tonumber(SEEN)))
  end
end
return {DONE, before}
""",
)


async def rollback(
    store: Runner,
    name: str,
    *,
    epoch: str,
    new_epoch: str,
    version: int,
    weights: bytes,
    config: str,
    now_ms: int,
    keep: bool,
    kept_bytes: int,
    snapshot: bytes | None = None,
    seen: int | None = None,
) -> int:
    """Make the model this state at once; the id of the checkpoint of what it was before.
    ``snapshot``: the model's snapshot as read, for the retained log to start from when it
    has none yet (None: not read); ``seen``: the labelled examples an averaged learner's mean
    divides by, restored with its sums (None: the count stays)."""
    keys = keys_of(name)
    snapshot = snapshot or b""
    stage, start = await blobs.stage(store.client, keys, weights, snapshot)
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(keys, {"stage": stage, "stage_start": start}),
        SCRIPT.arg_list(
            epoch=epoch,
            new_epoch=new_epoch,
            version=version,
            length=len(weights),
            chunks=blobs.chunks(len(weights)),
            start_length=len(snapshot),
            start_chunks=blobs.chunks(len(snapshot)),
            config=config,
            now_ms=now_ms,
            keep="1" if keep else "0",
            kept_bytes=kept_bytes,
            seen="" if seen is None else str(seen),
        ),
    )
    if status_of(store, name, reply) == Status.NOT_STAGED:
        raise ModelBusy(f"Model {name!r}'s restored weights were not all written; retry.")
    return int(reply[1])
