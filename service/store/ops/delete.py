"""DELETE: every key of a model, its name in the registry, then its pending predictions."""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from service.store.keys import REGISTRY, keys_of
from service.store.ops import parts
from service.store.ops.create import listed, registry
from service.store.ops.purge import purge
from service.store.script import Runner, Script, text

log = logging.getLogger("perceptron")

# KEYS: meta, snap, the checkpoints' keys, the challengers' weights' keys, then the model's
# other keys, its STATES other state keys first (, the registry when LISTED is '1'). The
# snapshot, each checkpoint's weights and each challenger's are let go (parts.WEIGHTS: freed
# outside the script, whatever their size). Returns
# {DONE, state keys deleted (and 1 when only the name was listed: a lost model), the model's
# epoch ('' without one), its epochs before promotions (meta's PREV_EPOCH, '' without one)}
SCRIPT = Script(
    "delete",
    keys=("meta", "snap", "checkpoints", "checkpoint_info", "cweights"),
    args=("name", "states#", "listed"),
    rest_keys="others",
    parts=(parts.WEIGHTS,),
    body="""
local epoch = redis.call('HGET', META, META_EPOCH) or ''
local previous = redis.call('HGET', META, META_PREV_EPOCH) or ''
local last, gone = #KEYS, redis.call('EXISTS', META, SNAP)
if LISTED == '1' then
  gone = gone + redis.call('SREM', KEYS[last], NAME)
  last = last - 1
end
let_go(SNAP)
for _, id in ipairs(redis.call('HKEYS', CHECKPOINT_INFO)) do
  let_go(weights_key(CHECKPOINTS, id))
end
for _, key in ipairs(redis.call('HVALS', CWEIGHTS)) do let_go(key) end
redis.call('DEL', META, CHECKPOINTS, CHECKPOINT_INFO, CWEIGHTS)
for i = OTHERS_AT, last do
  local n = redis.call('DEL', KEYS[i])
  if i < OTHERS_AT + STATES then gone = gone + n end
end
return {DONE, gone, epoch, previous}
""",
)


async def delete_model(store: Runner, name: str) -> bool:
    """Delete every key of the model: its state, the requests handed to its writer, and its
    pending predictions (found by SCAN), so that deleting a model frees its memory."""
    keys = keys_of(name)
    sharded = store.sharded
    # (the five named first, then the others: the state keys, then the rest)
    named = {keys.meta, keys.snap, keys.checkpoints, keys.checkpoint_info, keys.cweights}
    kinds = (*keys.all, *keys.handover, *keys.history, *keys.challengers)
    others = [k for k in kinds if k not in named]
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(keys, rest=[*others, *registry(sharded)]),
        SCRIPT.arg_list(name=name, states=len(keys.all) - 2, listed=listed(sharded)),
    )
    _, deleted, epoch, previous = reply
    if sharded:
        await store.client.srem(REGISTRY, name)
        if await store.client.exists(keys.meta):  # made anew meanwhile: listed again
            await store.client.sadd(REGISTRY, name)
    if epoch:
        try:
            await purge(store, keys, text(epoch), text(previous))
        except RedisError as e:  # the model is deleted: what is left lapses by its TTL
            log.warning("model %r deleted; its pending predictions were not: %s", name, e)
    return int(deleted) > 0
