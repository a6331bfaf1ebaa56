"""COMPACT: replace a model's log up to a version with its packed weights at that version."""

from __future__ import annotations

from ...protocol import Status
from ..keys import ModelKeys
from ..script import Script
from .runner import Runner

# returns {DONE} when the snapshot replaced the log up to VERSION, {UNCHANGED} when it was
# not newer (or the model is another epoch's)
SCRIPT = Script(
    "compact",
    keys=("meta", "snap", "log"),
    args=("epoch", "version#", "weights"),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SNAP_VERSION)
if st[1] ~= EPOCH then return {UNCHANGED} end
local snapv = tonumber(st[3])
if VERSION <= snapv or VERSION > tonumber(st[2]) then return {UNCHANGED} end
redis.call('SET', SNAP, WEIGHTS)
redis.call('LTRIM', LOG, VERSION - snapv, -1)
redis.call('HSET', META, META_SNAP_VERSION, VERSION, META_SNAP_LENGTH, #WEIGHTS)
return {DONE}
""",
)


async def compact(store: Runner, name: str, epoch: str, version: int, data: bytes) -> bool:
    """Whether the snapshot replaced the log up to ``version``."""
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(ModelKeys(name)),
        SCRIPT.arg_list(epoch=epoch, version=version, weights=data),
    )
    return int(reply[0]) == Status.DONE
