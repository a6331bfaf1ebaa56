"""PREDICT: store pending predictions made at a version of a model's weights."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.contract.store_protocol import PENDING_OVERHEAD, RECORD_CALL_BYTES, Status
from service.contract.store_values import Made, SyncData
from service.errors import TooManyPending
from service.store.keys import keys_of
from service.store.ops import parts
from service.store.script import Runner, Script, status_of

# KEYS: then each prediction's pending key; ARGV: then each pending record, in the same order.
# VERSION and SEEN: what the predictions were made with (SEEN '' when it does not matter);
# FORCE '1' stores them whatever the version; R2: the largest squared feature norm among
# them; CAP: the most bytes the model may hold pending (0: no limit); TTL: how long each record
# is kept (``protocol.pending_life_s``); DEADLINE: unix ms when their wait runs out, for a
# model with a default label (0: none), each key then entered in ``deadlines`` (defaults.py);
# MORE: the bytes the same predictions store in the calls after this one, held to CAP here.
# Returns {DONE} when stored, the sync reply with STALE_COPY when the copy was behind,
# NO_MODEL, STALE_EPOCH, STATE_LOST, or {PENDING_FULL, seconds until some pending bytes
# lapse, bytes held, bytes of these predictions}.
SCRIPT = Script(
    "predict",
    keys=("meta", "snap", "log", "pend", "deadlines"),
    args=("epoch", "version", "seen", "force", "ttl#", "r2", "cap#", "deadline#", "more#"),
    rest_keys="pending",
    rest_args="records",
    parts=(parts.SYNC, parts.PENDING),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SEEN, META_R2,
  META_SEEN_OFFSET)
if not st[1] then return {NO_MODEL} end
if st[1] ~= EPOCH then return {STALE_EPOCH} end
local why = lost(META, SNAP, LOG)  -- never serve weights the store no longer has
if why then return {STATE_LOST, why} end
if FORCE ~= '1' and (st[2] ~= VERSION
    or (SEEN ~= '' and tonumber(st[3]) - tonumber(st[5] or '0') ~= tonumber(SEEN))) then
  local reply = sync(META, SNAP, LOG, tonumber(VERSION))
  if reply[1] == DONE then reply[1] = STALE_COPY end
  return reply
end
local now = clock()
local held, oldest, width = pending_held(PEND, TTL, now)
local size, shift = 0, RECORDS_AT - PENDING_AT
for i = PENDING_AT, #KEYS do size = size + pending_size(KEYS[i], ARGV[i + shift]) end
if CAP > 0 and held + size + MORE > CAP then
  local wait = TTL
  if oldest then wait = math.ceil((oldest + 1) * width + TTL - now) end
  return {PENDING_FULL, math.max(1, wait), held, size + MORE}
end
for i = PENDING_AT, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i + shift], 'EX', TTL)
  if DEADLINE > 0 then redis.call('ZADD', DEADLINES, DEADLINE, KEYS[i]) end
end
local bucket = math.floor(now / width)
redis.call('HINCRBY', PEND, bucket, size)
redis.call('HINCRBY', PEND, FIELD_BYTES, size)
if not oldest then redis.call('HSET', PEND, FIELD_OLDEST, bucket) end
redis.call('HINCRBY', META, COUNT_PREDICTIONS, #KEYS - PENDING_AT + 1)
if tonumber(R2) > tonumber(st[4] or 0) then redis.call('HSET', META, META_R2, R2) end
return {DONE}
""",
)


async def commit_predictions(
    store: Runner,
    name: str,
    *,
    epoch: str,
    made: Made,
    tokens: Sequence[str],
    records: Sequence[bytes],
    ttl_s: int,
    max_pending_bytes: int = 0,
    force: bool = False,
    deadline_ms: int = 0,
) -> SyncData | None:
    """Store pending predictions made at ``made.version`` (and ``made.seen``).

    Returns None when stored, or, when the model has moved on and ``force`` is off, what the
    caller's copy lacks; nothing is stored then. ``ttl_s``: how long the records are kept;
    ``deadline_ms``: when their wait runs out, for a model with a default label (0: none).
    Raises TooManyPending when the model would hold more than ``max_pending_bytes`` of
    predictions awaiting their label.
    """
    keys = keys_of(name)
    named = [keys.pending(t) for t in tokens]
    sizes = [len(k) + len(r) + PENDING_OVERHEAD for k, r in zip(named, records, strict=True)]
    calls = spans(records)
    for i, (lo, hi) in enumerate(calls):
        # (the first call holds them all to the cap, and stores them only with the latest
        # weights; the others store the rest as they are)
        reply = await store.run(
            SCRIPT,
            SCRIPT.key_list(keys, rest=named[lo:hi]),
            SCRIPT.arg_list(
                records[lo:hi],
                epoch=epoch,
                version=made.version,
                seen=made.seen,
                force=int(force or i > 0),
                ttl=ttl_s,
                r2=made.r2,
                cap=max_pending_bytes if i == 0 else 0,
                deadline=deadline_ms,
                more=sum(sizes[hi:]) if i == 0 else 0,
            ),
        )
        _refused(name, reply, len(tokens), max_pending_bytes)
        if status_of(store, name, reply) == Status.STALE_COPY:
            return await store.sync_data(keys, reply, made.version)
    return None


def spans(records: Sequence[bytes]) -> list[tuple[int, int]]:
    """The records of each call, ``(start, end)``: RECORD_CALL_BYTES at most past the first.

    >>> spans([b"x" * (1 << 19)] * 5)
    [(0, 2), (2, 4), (4, 5)]
    """
    out, lo, held = [], 0, 0
    for i, r in enumerate(records):
        if held >= RECORD_CALL_BYTES:
            out.append((lo, i))
            lo, held = i, 0
        held += len(r)
    return [*out, (lo, len(records))]


def _refused(name: str, reply: list[Any], n: int, max_pending_bytes: int) -> None:
    """Raise TooManyPending when the call found the model's pending bytes at their cap."""
    if int(reply[0]) == Status.PENDING_FULL:
        wait, held, size = int(reply[1]), int(reply[2]), int(reply[3])
        raise TooManyPending(
            f"Model {name!r} holds {held} bytes of predictions awaiting their label; "
            f"these {n} would take {size} more, past its limit of "
            f"{max_pending_bytes} (PERCEPTRON_MAX_PENDING_BYTES). Send feedback for "
            "pending predictions, lower the model's feedback_ttl_s, or retry after "
            f"{wait} s, when the oldest lapse.",
            retry_after_s=wait,
        )
