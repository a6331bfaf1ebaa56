"""COMPACT: replace a model's log up to a version with its packed weights at that version;
the entries it replaces go to the retained log, and a checkpoint is made when one is due."""

from __future__ import annotations

from service.contract.store_protocol import Meta, Status
from service.store.keys import keys_of
from service.store.ops import blobs, parts
from service.store.script import Runner, Script

# STAGE holds the packed weights at VERSION, LENGTH bytes in CHUNKS chunks (blobs.py), which
# become the snapshot. KEEP '1': the entries replaced go to ``past`` (the retained log; the
# snapshot they followed is kept first, as the checkpoint ``past`` starts from, when there is
# none yet), and
# a checkpoint of the weights is made when EVERY updates or EVERY_MS ms have passed since the
# last one a compaction made, from STAGE_COPY (a second copy, staged when the caller found one
# due; without it, the next compaction makes it). Returns {DONE} when the snapshot replaced the
# log up to VERSION, {UNCHANGED} when it was not newer (or the model is another epoch's),
# {NOT_STAGED} when STAGE is not whole. The staged keys are let go whatever happens.
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
        "stage",
        "stage_copy",
    ),  # fmt: skip
    args=("epoch", "version#", "length#", "chunks#", "now_ms", "keep", "every#", "every_ms#"),
    parts=(parts.WEIGHTS, parts.CHECKPOINT, parts.RETAINED),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SNAP_VERSION,
  META_CHECKPOINT_VERSION, META_CHECKPOINT_MS)
local snapv = tonumber(st[3])
local refused = nil
if st[1] ~= EPOCH or VERSION <= snapv or VERSION > tonumber(st[2]) then refused = UNCHANGED
elseif not staged(STAGE, CHUNKS) then refused = NOT_STAGED end
if refused then
  let_go(STAGE)
  let_go(STAGE_COPY)
  return {refused}
end
if KEEP == '1' then
  retained_base(META, LOG, SNAP, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING, NOW_MS)
  retain(META, LOG, PAST, VERSION - snapv)
else
  redis.call('LTRIM', LOG, VERSION - snapv, -1)
end
move_weights(STAGE, SNAP)
redis.call('HSET', META, META_SNAP_VERSION, VERSION, META_SNAP_LENGTH, LENGTH)
if KEEP == '1' and (VERSION - tonumber(st[4] or '0') >= EVERY
    or tonumber(NOW_MS) - tonumber(st[5] or '0') >= EVERY_MS)
    and staged(STAGE_COPY, CHUNKS) then
  checkpoint(META, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING, STAGE_COPY, LENGTH,
    {}, VERSION, VERSION, NOW_MS, REASON_SCHEDULED, seen_before(META, LOG))
  redis.call('HSET', META, META_CHECKPOINT_VERSION, VERSION, META_CHECKPOINT_MS, NOW_MS)
end
let_go(STAGE_COPY)
return {DONE}
""",
)


async def compact(
    store: Runner,
    name: str,
    *,
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
    keys = keys_of(name)
    due = False
    if keep:
        last_version, last_ms = await store.client.hmget(
            keys.meta, Meta.CHECKPOINT_VERSION, Meta.CHECKPOINT_MS
        )
        due = version - int(last_version or 0) >= every or now_ms - int(last_ms or 0) >= every_ms
    stage, copy = await blobs.stage(store.client, keys, data, data if due else b"")
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(keys, {"stage": stage, "stage_copy": copy}),
        SCRIPT.arg_list(
            epoch=epoch,
            version=version,
            length=len(data),
            chunks=blobs.chunks(len(data)),
            now_ms=now_ms,
            keep="1" if keep else "0",
            every=every,
            every_ms=every_ms,
        ),
    )
    return int(reply[0]) == Status.DONE
