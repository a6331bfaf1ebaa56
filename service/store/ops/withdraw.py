"""WITHDRAW: a requester gives a handed-off request up."""

from __future__ import annotations

from service.contract.store_protocol import Status
from service.errors import OutcomeUnknown, StaleModel
from service.store.keys import keys_of
from service.store.script import Runner, Script, raw

# EPOCH: of the model the request was made for. Returns {DONE} when the request was not
# learned (and now never will be), {REPLIED, answer} when it was, or was answered with an
# error, meanwhile, {STALE_EPOCH} when it left the queue with its model (deleted or replaced:
# an answer outlives both, so it was not learned), and {UNKNOWN} when it left the queue with
# no answer to be found (a volatile-* policy evicted its answer, or a queue key that held
# it): learned or not, nobody can tell.
SCRIPT = Script(
    "withdraw",
    keys=("learns", "taken", "reqs", "answer", "meta"),
    args=("token", "epoch"),
    body="""
if redis.call('HDEL', REQS, TOKEN) == 1 then
  redis.call('LREM', LEARNS, 1, TOKEN)
  redis.call('SREM', TAKEN, TOKEN)
  return {DONE}
end
local a = redis.call('LPOP', ANSWER)
if a then return {REPLIED, a} end
if redis.call('HGET', META, META_EPOCH) ~= EPOCH then return {STALE_EPOCH} end
return {UNKNOWN}
""",
)


async def withdraw_learn(store: Runner, name: str, token: str, epoch: str) -> bytes | None:
    """Give a handed-off request (for the model at ``epoch``) up: None when it was not
    learned (and never will be), else its answer; StaleModel when its model was deleted or
    replaced meanwhile (not learned either); OutcomeUnknown when its answer is gone."""
    k = keys_of(name)
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(k, {"answer": k.answer(token)}),
        SCRIPT.arg_list(token=token, epoch=epoch),
    )
    status = int(reply[0])
    if status == Status.STALE_EPOCH:
        raise StaleModel(name)
    if status == Status.UNKNOWN:
        raise OutcomeUnknown(
            f"Model {name!r}'s writer took the examples, and their answer is gone from the "
            "store (evicted: its maxmemory-policy is volatile-*, or it expired): they may "
            "have been learned. Check the model's counters before sending them again."
        )
    return raw(reply[1]) if status == Status.REPLIED else None
