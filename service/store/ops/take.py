"""TAKE: the writer renews its lease and takes the requests queued for it."""

from __future__ import annotations

from service.contract.store_protocol import Status
from service.store.keys import keys_of
from service.store.ops import parts
from service.store.script import Runner, Script, raw

# MOST: the most requests to take (0: none, the lease renewed only). Returns {LEASED,
# requests...} and renews the lease while the caller holds it (or takes it when free);
# {NOT_WRITER} when another worker holds it. A request longer than REQUEST_INLINE bytes comes
# as {token}: the caller reads it with a plain HMGET.
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
if MOST < 1 then return taken end
local tokens = redis.call('LPOP', LEARNS, MOST)
if not tokens then return taken end
for _, token in ipairs(tokens) do
  local length = redis.call('HSTRLEN', REQS, token)
  if length > 0 then  -- else withdrawn by its requester (a request is never empty)
    redis.call('SADD', TAKEN, token)
    if length > REQUEST_INLINE then
      taken[#taken + 1] = {token}
    else
      taken[#taken + 1] = redis.call('HGET', REQS, token)
    end
  end
end
keep(TAKEN, redis.call('PTTL', REQS))
return taken
""",
)


async def take_learns(
    store: Runner, name: str, *, me: str, lease_ms: int, most: int, wait_s: float = 0.0
) -> list[bytes] | None:
    """Renew the lease and take up to ``most`` queued requests (none: renew it only), after
    waiting up to ``wait_s`` for one (in the same round trip); None: another holds it."""
    k = keys_of(name)
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
    taken = reply[1:]
    long = [r[0] for r in taken if isinstance(r, list)]
    if long:
        # Taken: a lease lapsing now gives them back (parts.ACQUIRE); one withdrawn meanwhile
        # reads as None, and its requester answers it.
        read = iter(await store.client.hmget(k.reqs, long))
        taken = [next(read) if isinstance(r, list) else r for r in taken]
    return [raw(r) for r in taken if r is not None]
