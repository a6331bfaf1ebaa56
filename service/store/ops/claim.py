"""CLAIM: take a model's lease if no worker holds it."""

from __future__ import annotations

from service.contract.store_protocol import Status
from service.store.keys import keys_of
from service.store.ops import parts
from service.store.script import Runner, Script

# Returns {LEASED} when the caller took the lease (no worker held it), else {NOT_WRITER, the
# ms the holder's has left (1 when it has no limit)}
SCRIPT = Script(
    "claim",
    keys=("writer", "learns", "taken"),
    args=("me", "lease"),
    parts=(parts.ACQUIRE,),
    body="""
local left = redis.call('PTTL', WRITER)
if left ~= -2 then return {NOT_WRITER, math.max(left, 1)} end
acquire(WRITER, LEARNS, TAKEN, ME, LEASE)
return {LEASED}
""",
)


async def claim_writer(store: Runner, name: str, me: str, lease_ms: int) -> float:
    """Take the lease if no worker holds it: 0 then; else the seconds until the holder's
    lapses, unless renewed (a requester looks again then)."""
    reply = await store.run(
        SCRIPT, SCRIPT.key_list(keys_of(name)), SCRIPT.arg_list(me=me, lease=lease_ms)
    )
    return 0.0 if int(reply[0]) == Status.LEASED else int(reply[1]) / 1000
