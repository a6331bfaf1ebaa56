"""PURGE: delete the pending predictions of a deleted model (of its epoch)."""

from __future__ import annotations

from service.store.keys import ModelKeys
from service.store.ops import parts
from service.store.script import Runner, Script

PURGE_BATCH = 1000  # pending predictions found by SCAN and deleted at once

# KEYS: pending predictions of one model. Deletes those of EPOCH or of an epoch PREVIOUS lists
# (meta's PREV_EPOCH, '' for none: parts.OURS), answered or not, not those of a model made anew
# since under the same name; returns {DONE, how many}
SCRIPT = Script(
    "purge",
    keys=(),
    args=("epoch", "previous"),
    rest_keys="pending",
    parts=(parts.OURS,),
    body="""
local gone = 0
for i = PENDING_AT, #KEYS do
  if ours(redis.call('GETRANGE', KEYS[i], EPOCH_AT - 1, EPOCH_END - 1), EPOCH, PREVIOUS) then
    gone = gone + redis.call('DEL', KEYS[i])
  end
end
return {DONE, gone}
""",
)


async def purge(store: Runner, keys: ModelKeys, epoch: str, previous: str = "") -> int:
    """Delete the pending predictions of the model of ``epoch`` (and of the epochs before its
    promotions ``previous`` lists), PURGE_BATCH at a time."""
    gone, batch = 0, []
    async for key in store.client.scan_iter(match=keys.pending_match, count=PURGE_BATCH):
        batch.append(key)
        if len(batch) >= PURGE_BATCH:
            gone += await _purge(store, keys, batch, epoch, previous)
            batch = []
    if batch:
        gone += await _purge(store, keys, batch, epoch, previous)
    return gone


async def _purge(
    store: Runner, keys: ModelKeys, batch: list[str], epoch: str, previous: str
) -> int:
    args = SCRIPT.arg_list(epoch=epoch, previous=previous)
    reply = await store.run(SCRIPT, SCRIPT.key_list(keys, rest=batch), args)
    return int(reply[1])
