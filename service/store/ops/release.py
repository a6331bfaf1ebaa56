"""RELEASE: a writer gives its lease up."""

from __future__ import annotations

from service.contract.store_protocol import Status
from service.store.keys import keys_of
from service.store.ops import parts
from service.store.script import Runner, Script

# FORCE: '1' to give it up even with requests waiting (the worker stops: what it took goes
# back to the queue). Gives the lease up unless requests are waiting or taken; returns {DONE}
# when given up (or not the caller's), {UNCHANGED} when kept.
SCRIPT = Script(
    "release",
    keys=("writer", "learns", "taken"),
    args=("me", "force"),
    parts=(parts.ACQUIRE,),
    body="""
if redis.call('GET', WRITER) ~= ME then return {DONE} end
if FORCE ~= '1' and (redis.call('LLEN', LEARNS) > 0 or redis.call('SCARD', TAKEN) > 0) then
  return {UNCHANGED}
end
give_back(LEARNS, TAKEN)
redis.call('DEL', WRITER)
return {DONE}
""",
)


async def release_writer(store: Runner, name: str, me: str, force: bool = False) -> bool:
    """Give the lease up, unless requests are waiting (or ``force``); whether it was."""
    reply = await store.run(
        SCRIPT, SCRIPT.key_list(keys_of(name)), SCRIPT.arg_list(me=me, force=int(force))
    )
    return int(reply[0]) == Status.DONE
