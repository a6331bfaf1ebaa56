"""HANDOFF: queue a learn request for the model's writer, or take the lease and learn it."""

from __future__ import annotations

from service.contract.store_protocol import QUEUE_KEEP_S, REQUEST_INLINE, Status
from service.store.keys import keys_of
from service.store.ops import parts
from service.store.script import Runner, Script, raw

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
SCRIPT = Script(
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
    keys = SCRIPT.key_list(k, {"answer": answer})
    long = len(request) > REQUEST_INLINE
    args = SCRIPT.arg_list(
        me=me,
        lease=lease_ms,
        token=token,
        request=b"" if long else request,
        keep_ms=max(1, wait_ms) + QUEUE_KEEP_S * 1000,
        not_queued=not_queued,
    )
    wait = ("BLPOP", answer, wait_s) if wait_s > 0 else None
    write = ("HSET", k.reqs, token, request) if long else None
    reply, got = await store.run_with_wait(SCRIPT, keys, args, after=wait, first=write)
    return int(reply[0]) == Status.LEASED, None if got is None else raw(got[1])
