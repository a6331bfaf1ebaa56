"""FEEDBACK: the true class of pending predictions, applied once each."""

from __future__ import annotations

from collections.abc import Sequence

from service.contract.store_protocol import Status
from service.contract.store_values import Bucket, FeedbackBatch, FeedbackItem, Held
from service.store.keys import keys_of
from service.store.ops import parts
from service.store.script import Runner, Script

# KEYS: then each prediction's pending key; ARGV: then the true class index of each, in the
# same order (NO_CLASS: a label that is none of the model's classes, answered BAD_LABEL if the
# prediction is the model's, else UNKNOWN: a prediction of a model deleted and made anew is
# not found, whatever its label). EPOCH: of the caller's configuration; BUCKET: this time
# bucket, KEEP: buckets kept; TTL: the model's feedback ttl; SOURCE, NOW_MS: who gives them
# and when, recorded with each update (``codec.provenance``) and counted per source in meta
# (``protocol.source_fields``); AVERAGED: 1 for an averaged model (whose writer's commit is
# guarded by the count of examples seen too), else 0; LATE: one character per prediction, '1'
# where its id tells that its wait ran out (a record then missing is EXPIRED, not UNKNOWN).
# While the model's writer holds it (``learn.py``), a call that would move what the writer's
# commit is guarded by (an update; for an averaged model, any example counted) applies
# nothing: {HELD, ms left}; one that would not (each item a label that updates nothing, a
# duplicate, unknown, expired, a conflict) goes through, as it cannot make that commit stale.
# An answer is kept TTL seconds after it was given, so that the same feedback sent again
# within that time is a duplicate; its prediction's bytes no longer count as pending.
# Returns NO_MODEL, STALE_EPOCH, STATE_LOST or HELD for the whole call, else {DONE, version,
# log length, then per prediction: status (DONE, DUPLICATE, UNKNOWN, EXPIRED, CONFLICT,
# BAD_LABEL), mistake, updated, version (for CONFLICT: the class index given before)}
SCRIPT = Script(
    "feedback",
    keys=("meta", "log", "series", "ring", "recent", "pend", "curve", "hold"),
    args=("epoch", "bucket#", "keep#", "ttl#", "source", "now_ms", "averaged#", "late"),
    rest_keys="pending",
    rest_args="labels",
    parts=(parts.RECORD, parts.PENDING),
    waited=True,
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SEEN, META_SNAP_VERSION)
local epoch = st[1]
if not epoch then return {NO_MODEL} end
if epoch ~= EPOCH then return {STALE_EPOCH} end
local held = redis.call('PTTL', HOLD)
if held > 0 then
  -- Wait only for an item that would move what the writer's commit is guarded by: a
  -- prediction of this model still waiting for its label, given one of its classes, that
  -- updates the weights (any such, for an averaged model: it counts an example).
  for i = PENDING_AT, #KEYS do
    local t = ARGV[i + LABELS_AT - PENDING_AT]
    local p = redis.call('GET', KEYS[i])
    if p and tonumber(t) ~= NO_CLASS and string.sub(p, EPOCH_AT, EPOCH_END) == epoch
        and string.sub(p, 1, 1) ~= ANSWERED and (AVERAGED == 1
        or string.sub(p, BITMAP_AT + tonumber(t), BITMAP_AT + tonumber(t)) == '1') then
      redis.call('INCR', HOLD)  -- one more waiting: the commit that lets go wakes each
      return {HELD, held}
    end
  end
end
if redis.call('LLEN', LOG) ~= tonumber(st[2]) - tonumber(st[4]) then
  return {STATE_LOST, 'its update log is incomplete'}  -- never extend a log that lost entries
end
local version, seen = tonumber(st[2]), tonumber(st[3])
local out, entries, marks, cells, recent = {}, {}, {}, {}, {}
local mistakes, n = 0, 0
local function answer(status, m, u, v)
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = status, m, u, v
  n = n + 4
end
local unknown, expired, dups, conflicts = 0, 0, 0, 0
local provenance = SOURCE_MARK .. SOURCE .. ENTRY_SEP .. NOW_MS .. ENTRY_SEP
local ttl, now, answered = TTL, nil, {}
for i = PENDING_AT, #KEYS do
  local t = ARGV[i + LABELS_AT - PENDING_AT]
  local p = redis.call('GET', KEYS[i])
  if not p and string.sub(LATE, i - PENDING_AT + 1, i - PENDING_AT + 1) == '1' then
    expired = expired + 1
    answer(EXPIRED, 0, 0, 0)
  elseif not p or string.sub(p, EPOCH_AT, EPOCH_END) ~= epoch then
    unknown = unknown + 1
    answer(UNKNOWN, 0, 0, 0)
  elseif tonumber(t) == NO_CLASS then
    answer(BAD_LABEL, 0, 0, 0)
  elseif string.sub(p, 1, 1) == ANSWERED then
    local _, _, prev, m, u, v = string.find(p, '^A[^|]*|(%d+)|(%d)|(%d)|(%d+)$')
    if prev ~= t then
      conflicts = conflicts + 1
      answer(CONFLICT, 0, 0, tonumber(prev))
    else
      dups = dups + 1
      answer(DUPLICATE, tonumber(m), tonumber(u), tonumber(v))
    end
  else
    local served = tonumber(string.sub(p, SERVED_AT, SERVED_END))
    local ti = tonumber(t)
    local updated = (string.sub(p, BITMAP_AT + ti, BITMAP_AT + ti) == '1') and 1 or 0
    seen = seen + 1
    local entry = string.format('%d', seen) .. ENTRY_SEP .. t .. ENTRY_SEP .. provenance .. p
    recent[#recent + 1] = entry
    if updated == 1 then
      version = version + 1
      entries[#entries + 1] = entry
    end
    local m = (served ~= ti) and 1 or 0
    marks[#marks + 1] = (m == 1) and '1' or '0'
    mistakes = mistakes + m
    local cell = FIELD_CELL .. served .. ':' .. t
    cells[cell] = (cells[cell] or 0) + 1
    now = now or clock()
    local made = now - ttl + redis.call('PTTL', KEYS[i]) / 1000
    local b = math.floor(made / pending_width(ttl))
    answered[b] = (answered[b] or 0) + pending_size(KEYS[i], p)
    redis.call('SET', KEYS[i],
      ANSWERED .. epoch .. '|' .. t .. '|' .. m .. '|' .. updated .. '|' .. version, 'EX', ttl)
    answer(DONE, m, updated, version)
  end
end
-- Answered predictions no longer count as pending: their bytes leave their buckets.
for b, size in pairs(answered) do
  local held = tonumber(redis.call('HGET', PEND, b))
  if held then
    if held <= size then
      redis.call('HDEL', PEND, b)
    else
      redis.call('HSET', PEND, b, held - size)
    end
    redis.call('HINCRBY', PEND, FIELD_BYTES, -math.min(held, size))
  end
end
if unknown > 0 then redis.call('HINCRBY', META, COUNT_UNKNOWN_FEEDBACK, unknown) end
if expired > 0 then redis.call('HINCRBY', META, COUNT_EXPIRED, expired) end
if dups > 0 then redis.call('HINCRBY', META, COUNT_DUPLICATES, dups) end
if conflicts > 0 then redis.call('HINCRBY', META, COUNT_CONFLICTS, conflicts) end
if #marks > 0 then
  local counted = FIELD_SOURCE .. SOURCE
  cells[counted .. FIELD_EXAMPLES] = #marks
  if mistakes > 0 then cells[counted .. FIELD_MISTAKES] = mistakes end
  if #entries > 0 then cells[counted .. FIELD_UPDATES] = #entries end
  record(META, SERIES, RING, RECENT, CURVE, BUCKET, KEEP,
    seen - #marks, #marks, table.concat(marks), mistakes, cells, recent)
  redis.call('HINCRBY', META, COUNT_FEEDBACK, #marks)
end
local log_length = -1
for i = 1, #entries, UNPACK_CHUNK do
  local upto = math.min(i + UNPACK_CHUNK - 1, #entries)
  log_length = redis.call('RPUSH', LOG, unpack(entries, i, upto))
end
if #entries > 0 then redis.call('HSET', META, META_VERSION, version) end
table.insert(out, 1, log_length)
table.insert(out, 1, version)
table.insert(out, 1, DONE)
return out
""",
)


async def feedback(
    store: Runner,
    name: str,
    epoch: str,
    tokens: Sequence[str],
    labels: Sequence[int],
    when: Bucket,
    ttl_s: int,
    source: str,
    now_ms: int,
    averaged: bool,
    wait_s: float = 0.0,
    late: str = "",
) -> FeedbackBatch | Held:
    """Apply the true class index of each pending prediction, once each; or nothing, while
    the model's writer holds it and one of them would update the weights (for an
    ``averaged`` model: would count an example). ``wait_s``: a call that found the hold
    first waits up to that long for the writer's commit to let go (it wakes each call that
    found it, ``learn.py``), on the same connection in the same round trip: the script runs
    as soon as it is woken, before the writer can hold the model again. ``late``: '1' for
    each prediction whose id tells that its wait ran out, '0' (or nothing) for the others."""
    k = keys_of(name)
    wait = ("BLPOP", k.wake, wait_s) if wait_s > 0 else None
    reply, _ = await store.run_with_wait(
        SCRIPT,
        SCRIPT.key_list(k, rest=[k.pending(t) for t in tokens]),
        SCRIPT.arg_list(
            labels,
            epoch=epoch,
            bucket=when.bucket,
            keep=when.keep,
            ttl=ttl_s,
            source=source,
            now_ms=now_ms,
            averaged=int(averaged),
            late=late,
        ),
        before=wait,
    )
    if int(reply[0]) == Status.HELD:
        return Held(int(reply[1]))  # (sent again with wait_s, it waits for the writer to let go)
    store.check(name, reply)
    flat = [int(v) for v in reply[3:]]
    items = [_item(*flat[i : i + 4]) for i in range(0, len(flat), 4)]
    return FeedbackBatch(version=int(reply[1]), log_length=int(reply[2]), items=items)


def _item(status: int, mistake: int, updated: int, version: int) -> FeedbackItem:
    s = Status(status)
    if s == Status.CONFLICT:
        return FeedbackItem(s, False, False, -1, given=version)
    return FeedbackItem(s, bool(mistake), bool(updated), version)
