"""CREATE: make a model and list it, together."""

from __future__ import annotations

import time
from contextlib import suppress

from redis.exceptions import RedisError

from service.contract.store_protocol import Status
from service.store.keys import REGISTRY, keys_of
from service.store.ops import parts
from service.store.script import Runner, Script, status_of, text

# KEYS: meta (, the registry when LISTED is "1"). Returns {DONE} when created, {NAME_TAKEN,
# the existing config JSON} when the name is taken, {STATE_LOST, why} when the name is listed but
# its model's keys are gone (evicted, or deleted by hand): such a model is lost, never made
# anew from zeros under the name (a DELETE clears the name).
SCRIPT = Script(
    "create",
    keys=("meta",),
    args=("config", "epoch", "created", "name", "listed"),
    rest_keys="registry",
    parts=(parts.REGISTER,),
    body="""
local cfg = redis.call('HGET', META, META_CONFIG)
if cfg then return {NAME_TAKEN, cfg} end
if LISTED == '1' and redis.call('SISMEMBER', KEYS[REGISTRY_AT], NAME) == 1 then
  return {STATE_LOST, 'it is listed but its keys are gone (evicted?)'}
end
redis.call('HSET', META, META_CONFIG, CONFIG, META_EPOCH, EPOCH, META_CREATED, CREATED,
  META_VERSION, 0, META_SEEN, 0, META_SNAP_VERSION, 0, META_SNAP_LENGTH, 0)
register(LISTED, KEYS[REGISTRY_AT], NAME)
return {DONE}
""",
)


async def create_model(store: Runner, name: str, config_json: str, epoch: str) -> str | None:
    """Create the model and list it, together; None when created, else the existing config
    JSON."""
    keys = keys_of(name)
    sharded = store.sharded
    if sharded:  # listed before and after: a concurrent DELETE cannot unlist it
        await store.client.sadd(REGISTRY, name)
    try:
        reply = await store.run(
            SCRIPT,
            SCRIPT.key_list(keys, rest=registry(sharded)),
            SCRIPT.arg_list(
                config=config_json,
                epoch=epoch,
                created=int(time.time()),
                name=name,
                listed=listed(sharded),
            ),
        )
    except RedisError:
        if sharded:  # listed, yet not made (a full shard): unlisted, unless made meanwhile
            with suppress(RedisError):  # by another PUT, which lists it after
                if not await store.client.exists(keys.meta):
                    await store.client.srem(REGISTRY, name)
        raise
    status = status_of(store, name, reply)
    if status == Status.DONE:
        if sharded:
            await store.client.sadd(REGISTRY, name)
        return None
    return text(reply[1])


def registry(sharded: bool) -> list[str]:
    """The registry as a script's last key, where one script may change it too."""
    return [] if sharded else [REGISTRY]


def listed(sharded: bool) -> str:
    return "0" if sharded else "1"
