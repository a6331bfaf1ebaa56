"""REFUSE: the writer answers a request it took without learning it."""

from __future__ import annotations

from service.contract.store_protocol import Status
from service.store.keys import keys_of
from service.store.ops import parts
from service.store.script import Runner, Script

# Answers a request the writer took without learning it (an error, or its requester gave up);
# returns {DONE}, or {REQUESTS_GONE} when it no longer waited (learned meanwhile, or withdrawn)
SCRIPT = Script(
    "refuse",
    keys=("taken", "reqs", "answer"),
    args=("token", "reply"),
    parts=(parts.ANSWER,),
    body="""
if redis.call('SISMEMBER', TAKEN, TOKEN) == 0 then return {REQUESTS_GONE} end
answer(TAKEN, REQS, ANSWER, TOKEN, REPLY)
return {DONE}
""",
)


async def refuse_learn(store: Runner, name: str, token: str, data: bytes) -> bool:
    """Answer a taken request without learning it; False when it no longer waited."""
    k = keys_of(name)
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(k, {"answer": k.answer(token)}),
        SCRIPT.arg_list(token=token, reply=data),
    )
    return int(reply[0]) == Status.DONE
