"""TAKE: the writer renews its lease and takes the requests queued for it."""

from __future__ import annotations

from ...protocol import Status
from ..keys import ModelKeys
from ..script import Script
from . import parts
from .runner import Runner, raw

# MOST: the most requests to take. Returns {LEASED, requests...} and renews the lease while the
# caller holds it (or takes it when free); {NOT_WRITER} when another worker holds it.
SCRIPT = Script(
    "take",
    keys=("writer", "learns", "taken", "reqs"),
    args=("me", "lease", "most#"),
    parts=(parts.ACQUIRE,),
    waited=True,
    body="""
local holder = redis.call('GET', WRITER)
if holder and holder ~= ME then return {NOT_WRITER} end
if holder then
  redis.call('PEXPIRE', WRITER, LEASE)
else
  acquire(WRITER, LEARNS, TAKEN, ME, LEASE)
end
local taken = {LEASED}
local tokens = redis.call('LPOP', LEARNS, MOST)
if not tokens then return taken end
for _, token in ipairs(tokens) do
  local data = redis.call('HGET', REQS, token)
  if data then  -- else withdrawn by its requester
    redis.call('SADD', TAKEN, token)
    taken[#taken + 1] = data
  end
end
keep(TAKEN, redis.call('PTTL', REQS))
return taken
""",
)


async def take(
    store: Runner, name: str, me: str, lease_ms: int, most: int, wait_s: float = 0.0
) -> list[bytes] | None:
    """Renew the lease and take up to ``most`` queued requests, after waiting up to ``wait_s``
    for one (in the same round trip); None: another holds it."""
    k = ModelKeys(name)
    # (BLMOVE to its own list, from the head to the head: waits, moves nothing)
    wait = ("BLMOVE", k.learns, k.learns, "LEFT", "LEFT", wait_s) if wait_s > 0 else None
    reply, _ = await store.run_with_wait(
        SCRIPT,
        SCRIPT.key_list(k),
        SCRIPT.arg_list(me=me, lease=lease_ms, most=most),
        before=wait,
    )
    if int(reply[0]) != Status.LEASED:
        return None
    return [raw(r) for r in reply[1:]]
