"""DELETE: every key of a model, its name in the registry, then its pending predictions."""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from ..keys import REGISTRY, ModelKeys
from ..script import Script
from .create import listed, registry
from .purge import purge
from .runner import Runner, text

log = logging.getLogger("perceptron")

# KEYS: the model's state keys (meta first), then its other keys (, the registry when LISTED
# is '1'). STATES: how many state keys. Returns {DONE, state keys deleted (and 1 when only
# the name was listed: a lost model), the model's epoch ('' without one)}
SCRIPT = Script(
    "delete",
    keys=("meta",),
    args=("name", "states#", "listed"),
    rest_keys="others",
    body="""
local epoch = redis.call('HGET', META, META_EPOCH) or ''
local last, gone = #KEYS, 0
if LISTED == '1' then
  gone = redis.call('SREM', KEYS[last], NAME)
  last = last - 1
end
for i = 1, last do
  local n = redis.call('DEL', KEYS[i])
  if i <= STATES then gone = gone + n end
end
return {DONE, gone, epoch}
""",
)


async def delete(store: Runner, name: str) -> bool:
    """Delete every key of the model: its state, the requests handed to its writer, and its
    pending predictions (found by SCAN), so that deleting a model frees its memory."""
    keys = ModelKeys(name)
    sharded = store.sharded
    others = [*keys.all[1:], *keys.handover, *keys.history]  # (meta comes first)
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(keys, rest=[*others, *registry(sharded)]),
        SCRIPT.arg_list(name=name, states=len(keys.all), listed=listed(sharded)),
    )
    _, deleted, epoch = reply
    if sharded:
        await store.client.srem(REGISTRY, name)
        if await store.client.exists(keys.meta):  # made anew meanwhile: listed again
            await store.client.sadd(REGISTRY, name)
    if epoch:
        try:
            await purge(store, keys, text(epoch))
        except RedisError as e:  # the model is deleted: what is left lapses by its TTL
            log.warning("model %r deleted; its pending predictions were not: %s", name, e)
    return int(deleted) > 0
