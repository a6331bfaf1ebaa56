"""SYNC: what a worker's copy of a model (at a version) lacks."""

from __future__ import annotations

from service.contract.store_values import SyncData
from service.store.keys import ModelKeys
from service.store.ops import parts
from service.store.ops.runner import Runner
from service.store.script import Script

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
    keys = ModelKeys(name)
    reply = await store.run(
        SCRIPT, SCRIPT.key_list(keys), SCRIPT.arg_list(from_version=from_version)
    )
    store.check(name, reply)
    return await store.sync_data(keys, reply, from_version)
