"""PURGE: delete the pending predictions of a deleted model (of its epoch)."""

from __future__ import annotations

from service.store.keys import ModelKeys
from service.store.script import Runner, Script

PURGE_BATCH = 1000  # pending predictions found by SCAN and deleted at once

# KEYS: pending predictions of one model. Deletes those of EPOCH or PREVIOUS (the epoch before
# its last promotion; '' for none), answered or not, not those of a model made anew since under
# the same name; returns {DONE, how many}
SCRIPT = Script(
    "purge",
    keys=(),
    args=("epoch", "previous"),
    rest_keys="pending",
    body="""
local gone = 0
for i = PENDING_AT, #KEYS do
  local e = redis.call('GETRANGE', KEYS[i], EPOCH_AT - 1, EPOCH_END - 1)
  if e == EPOCH or e == PREVIOUS then
    gone = gone + redis.call('DEL', KEYS[i])
  end
end
return {DONE, gone}
""",
)


async def purge(store: Runner, keys: ModelKeys, epoch: str, previous: str = "") -> int:
    """Delete the pending predictions of the model of ``epoch`` (and of ``previous``, its
    epoch before its last promotion), PURGE_BATCH at a time."""
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
