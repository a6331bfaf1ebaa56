"""The hand-over of learn requests to a model's writer, and its lease (one writer per model:
``service/engine/writer.py``):

- CLAIM: take a model's lease if no worker holds it.
- HANDOFF: queue a learn request for the model's writer, or take the lease and learn it.
- TAKE: the writer renews its lease and takes the requests queued for it.
- RELEASE: a writer gives its lease up.
- WITHDRAW: a requester gives a handed-off request up.
- REFUSE: the writer answers a request it took without learning it.
"""

from __future__ import annotations

from service.contract.store_protocol import QUEUE_KEEP_S, REQUEST_INLINE, Status
from service.errors import OutcomeUnknown, StaleModel
from service.store.keys import keys_of
from service.store.ops import parts
from service.store.script import Runner, Script, raw

# -- CLAIM ---------------------------------------------------------------------------------

# Returns {LEASED} when the caller took the lease (no worker held it), else {NOT_WRITER, the
# ms the holder's has left (1 when it has no limit)}
CLAIM = Script(
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
        CLAIM, CLAIM.key_list(keys_of(name)), CLAIM.arg_list(me=me, lease=lease_ms)
    )
    return 0.0 if int(reply[0]) == Status.LEASED else int(reply[1]) / 1000


# -- HANDOFF -------------------------------------------------------------------------------

# KEYS: ``answer`` is the request's answer key. ME: this worker's id; LEASE: the lease's ms;
# KEEP_MS: how long the queue's keys must live for the request (to its deadline, and
# QUEUE_KEEP_S more); NOT_QUEUED: the answer that says it was not queued. REQUEST: the request,
# or '' for one longer than REQUEST_INLINE, which the caller writes to ``reqs`` with a plain HSET
# sent just before the script (a written request this script does not queue is deleted; when
# that HSET failed, its caller raises its error, and TAKE passes over a token without a
# request, should this script have queued one).
# Returns {LEASED} when the caller holds, or just took, the lease: it learns the request
# itself; nothing is queued, and the answer key says so twice: once for the wait sent with
# this script, which takes it at once, and once for a requester whose reply was lost, whose
# WITHDRAW then finds it never queued, not learned. {QUEUED} when it waits for the writer.
HANDOFF = Script(
    "handoff",
    keys=("writer", "learns", "taken", "reqs", "answer"),
    args=("me", "lease", "token", "request", "keep_ms#", "not_queued"),
    parts=(parts.ACQUIRE,),
    waited=True,
    body="""
local holder = redis.call('GET', WRITER)
local written = REQUEST == ''
if holder and holder ~= ME then
  if not written then redis.call('HSET', REQS, TOKEN, REQUEST) end
  redis.call('RPUSH', LEARNS, TOKEN)
  keep(REQS, KEEP_MS)
  keep(LEARNS, KEEP_MS)
  return {QUEUED}
end
if written then redis.call('HDEL', REQS, TOKEN) end
if not holder then acquire(WRITER, LEARNS, TAKEN, ME, LEASE) end
redis.call('RPUSH', ANSWER, NOT_QUEUED, NOT_QUEUED)
redis.call('EXPIRE', ANSWER, ANSWER_TTL_S)
redis.call('PEXPIRE', WRITER, LEASE)  -- (its holder's: renewed for its commit)
return {LEASED}
""",
)


async def hand_off(
    store: Runner,
    name: str,
    *,
    me: str,
    lease_ms: int,
    token: str,
    request: bytes,
    wait_ms: int,
    not_queued: bytes,
    wait_s: float = 0.0,
) -> tuple[bool, bytes | None]:
    """Queue a learn request for the model's writer, and wait up to ``wait_s`` for its answer
    in the same round trip (none: no wait); (whether the caller learns it itself, the answer
    if one came). It learns it itself (nothing queued) when it holds, or just took, the
    lease: then ``not_queued`` is its answer, taken at once by the wait, and left once more
    for withdraw to find, should the caller lose this reply. The queue's keys live
    ``wait_ms`` (the request's deadline) and QUEUE_KEEP_S more (``parts.KEEP``)."""
    k = keys_of(name)
    answer = k.answer(token)
    keys = HANDOFF.key_list(k, {"answer": answer})
    long = len(request) > REQUEST_INLINE
    args = HANDOFF.arg_list(
        me=me,
        lease=lease_ms,
        token=token,
        request=b"" if long else request,
        keep_ms=max(1, wait_ms) + QUEUE_KEEP_S * 1000,
        not_queued=not_queued,
    )
    wait = ("BLPOP", answer, wait_s) if wait_s > 0 else None
    write = ("HSET", k.reqs, token, request) if long else None
    reply, got = await store.run_with_wait(HANDOFF, keys, args, after=wait, first=write)
    return int(reply[0]) == Status.LEASED, None if got is None else raw(got[1])


# -- TAKE ----------------------------------------------------------------------------------

# MOST: the most requests to take (0: none, the lease renewed only). Returns {LEASED,
# requests...} and renews the lease while the caller holds it (or takes it when free);
# {NOT_WRITER} when another worker holds it. A request longer than REQUEST_INLINE bytes comes
# as {token}: the caller reads it with a plain HMGET.
TAKE = Script(
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
        TAKE,
        TAKE.key_list(k),
        TAKE.arg_list(me=me, lease=lease_ms, most=most),
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


# -- RELEASE -------------------------------------------------------------------------------

# FORCE: '1' to give it up even with requests waiting (the worker stops: what it took goes
# back to the queue). Gives the lease up unless requests are waiting or taken; returns {DONE}
# when given up (or not the caller's), {UNCHANGED} when kept.
RELEASE = Script(
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
        RELEASE, RELEASE.key_list(keys_of(name)), RELEASE.arg_list(me=me, force=int(force))
    )
    return int(reply[0]) == Status.DONE


# -- WITHDRAW ------------------------------------------------------------------------------

# EPOCH: of the model the request was made for. Returns {DONE} when the request was not
# learned (and now never will be), {REPLIED, answer} when it was, or was answered with an
# error, meanwhile, {STALE_EPOCH} when it left the queue with its model (deleted or replaced:
# an answer outlives both, so it was not learned), and {UNKNOWN} when it left the queue with
# no answer to be found (a volatile-* policy evicted its answer, or a queue key that held
# it): learned or not, nobody can tell.
WITHDRAW = Script(
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
        WITHDRAW,
        WITHDRAW.key_list(k, {"answer": k.answer(token)}),
        WITHDRAW.arg_list(token=token, epoch=epoch),
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


# -- REFUSE --------------------------------------------------------------------------------

# Answers a request the writer took without learning it (an error, or its requester gave up);
# returns {DONE}, or {REQUESTS_GONE} when it no longer waited (learned meanwhile, or withdrawn)
REFUSE = Script(
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
        REFUSE,
        REFUSE.key_list(k, {"answer": k.answer(token)}),
        REFUSE.arg_list(token=token, reply=data),
    )
    return int(reply[0]) == Status.DONE
