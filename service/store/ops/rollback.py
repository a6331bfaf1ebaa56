"""ROLLBACK: make a model a state of its history at once (``service/history.py``)."""

from __future__ import annotations

from ..keys import ModelKeys
from ..script import Script
from . import parts
from .history import HISTORY_KEYS
from .runner import Runner

# Make the model its state at VERSION (WEIGHTS, packed; CONFIG), once its epoch is still
# EPOCH: first a checkpoint of the model as it is (its snapshot and its whole log), then a new
# epoch, so that every worker reloads it and pending predictions lapse. With KEEP '1' (a
# version of this line, restored by its number) the retained log stays up to VERSION (a model
# with none yet starts one at its snapshot, as a compaction would), its bytes then KEPT_BYTES
# when it is cut (-1: it is not, the log's entries up to VERSION join it), and the
# checkpoints made after VERSION on this line are marked as left; else it starts again from
# the restored weights. Counters and metrics stay. Returns {DONE, the id of the checkpoint
# made first}.
SCRIPT = Script(
    "rollback",
    keys=("meta", "snap", "log", *HISTORY_KEYS, "ring"),
    args=(
        "epoch",
        "new_epoch",
        "version#",
        "weights",
        "config",
        "now_ms",
        "keep",
        "kept_bytes#",
    ),
    parts=(parts.CHECKPOINT,),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SNAP_VERSION,
  META_PAST_BASE, META_PAST_VERSION)
if not st[1] then return {NO_MODEL} end
if st[1] ~= EPOCH then return {STALE_EPOCH} end
local before = checkpoint(META, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING,
  redis.call('GET', SNAP) or '', redis.call('LRANGE', LOG, 0, -1), st[3], st[2], NOW_MS,
  REASON_BEFORE_ROLLBACK)
local snapv = tonumber(st[3])
if KEEP == '1' and not st[4] and VERSION >= snapv then
  st[4], st[5] = retained_base(META, SNAP, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING,
    NOW_MS)
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
if WEIGHTS == '' then redis.call('DEL', SNAP) else redis.call('SET', SNAP, WEIGHTS) end
redis.call('HSET', META, META_EPOCH, NEW_EPOCH, META_CONFIG, CONFIG, META_VERSION, VERSION,
  META_SNAP_VERSION, VERSION, META_SNAP_LENGTH, #WEIGHTS, META_CHECKPOINT_VERSION, VERSION)
return {DONE, before}
""",
)


async def rollback(
    store: Runner,
    name: str,
    epoch: str,
    new_epoch: str,
    version: int,
    weights: bytes,
    config: str,
    now_ms: int,
    keep: bool,
    kept_bytes: int,
) -> int:
    """Make the model this state at once; the id of the checkpoint of what it was before."""
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(ModelKeys(name)),
        SCRIPT.arg_list(
            epoch=epoch,
            new_epoch=new_epoch,
            version=version,
            weights=weights,
            config=config,
            now_ms=now_ms,
            keep="1" if keep else "0",
            kept_bytes=kept_bytes,
        ),
    )
    store.check(name, reply)
    return int(reply[1])
