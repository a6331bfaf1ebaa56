"""COMPACT: replace a model's log up to a version with its packed weights at that version;
the entries it replaces go to the retained log, and a checkpoint is made when one is due."""

from __future__ import annotations

from ...protocol import Status
from ..keys import ModelKeys
from ..script import Script
from . import parts
from .runner import Runner

# KEEP '1': the entries replaced go to ``past`` (the retained log; the snapshot they followed
# is kept first, as the checkpoint ``past`` starts from, when there is none yet), and a
# checkpoint of WEIGHTS is made when EVERY updates or EVERY_MS ms have passed since the last
# one a compaction made. Returns {DONE} when the snapshot replaced the log up to VERSION,
# {UNCHANGED} when it was not newer (or the model is another epoch's).
SCRIPT = Script(
    "compact",
    keys=(
        "meta",
        "snap",
        "log",
        "past",
        "checkpoints",
        "checkpoint_info",
        "checkpoint_tails",
        "ring",
    ),  # fmt: skip
    args=("epoch", "version#", "weights", "now_ms", "keep", "every#", "every_ms#"),
    parts=(parts.CHECKPOINT,),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SNAP_VERSION,
  META_CHECKPOINT_VERSION, META_CHECKPOINT_MS)
if st[1] ~= EPOCH then return {UNCHANGED} end
local snapv = tonumber(st[3])
if VERSION <= snapv or VERSION > tonumber(st[2]) then return {UNCHANGED} end
if KEEP == '1' then
  retained_base(META, SNAP, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING, NOW_MS)
  retain(META, LOG, PAST, VERSION - snapv)
else
  redis.call('LTRIM', LOG, VERSION - snapv, -1)
end
redis.call('SET', SNAP, WEIGHTS)
redis.call('HSET', META, META_SNAP_VERSION, VERSION, META_SNAP_LENGTH, #WEIGHTS)
if KEEP == '1' and (VERSION - tonumber(st[4] or '0') >= EVERY
    or tonumber(NOW_MS) - tonumber(st[5] or '0') >= EVERY_MS) then
  checkpoint(META, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING, WEIGHTS, {}, VERSION,
    VERSION, NOW_MS, REASON_SCHEDULED)
  redis.call('HSET', META, META_CHECKPOINT_VERSION, VERSION, META_CHECKPOINT_MS, NOW_MS)
end
return {DONE}
""",
)


async def compact(
    store: Runner,
    name: str,
    epoch: str,
    version: int,
    data: bytes,
    now_ms: int,
    keep: bool,
    every: int,
    every_ms: int,
) -> bool:
    """Whether the snapshot replaced the log up to ``version``; with ``keep``, the entries
    it replaced are retained, and a checkpoint is made when ``every`` updates or
    ``every_ms`` ms have passed since the last scheduled one."""
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(ModelKeys(name)),
        SCRIPT.arg_list(
            epoch=epoch,
            version=version,
            weights=data,
            now_ms=now_ms,
            keep="1" if keep else "0",
            every=every,
            every_ms=every_ms,
        ),
    )
    return int(reply[0]) == Status.DONE
