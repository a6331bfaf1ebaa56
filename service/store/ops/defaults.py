"""DEFAULTS: predictions whose wait ran out with no label, learned with the model's default
label, each once: claimed (taken off ``deadlines``) and applied in the same script, so that a
worker killed mid-sweep leaves each either applied or still due, never both nor lost."""

from __future__ import annotations

from dataclasses import dataclass

from service.contract.store_protocol import Status
from service.contract.store_values import Bucket
from service.store.keys import keys_of
from service.store.ops import labelling
from service.store.script import Runner, Script, status_of

# EPOCH: of the caller's configuration; DEFAULT: the class index of its default label; LIFE: how
# long the model's records are kept (``protocol.pending_life_s``); BUCKET, KEEP: this time bucket
# and the buckets kept; NOW_MS: recorded with each update (its source is DEFAULT_SOURCE); MOST:
# predictions labelled at most, and no more than RECORD_CALL_BYTES of their records past the first
# (the rest are left due: "more"). The keys in ``deadlines`` whose deadline (Redis's clock) has
# passed are labelled in deadline order (those of the epoch before a promotion too,
# ``Meta.PREV_EPOCH``): a record answered already, gone, or of another epoch is only taken off.
# While the model's writer or a promotion holds it (``learn.py``, ``promote.py``), nothing is done:
# {HELD, ms left}. Returns NO_MODEL, STALE_EPOCH, STATE_LOST, HELD, or {DONE, labelled, the log's
# length (-1: unchanged), 1 when more are due, predictions still awaiting a default, the labels' log
# length (-1: none added)}. A model with challengers logs each label for them too (``clog``).
SCRIPT = Script(
    "defaults",
    keys=(
        "meta",
        "log",
        "series",
        "ring",
        "recent",
        "pend",
        "curve",
        "hold",
        "deadlines",
        "clog",
        "blog",
    ),
    args=("epoch", "default#", "life#", "bucket#", "keep#", "now_ms", "most#", "detector"),
    parts=labelling.PARTS,
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SEEN, META_SNAP_VERSION,
  META_PREV_EPOCH, META_SEEN_OFFSET)
local epoch = st[1]
if not epoch then return {NO_MODEL} end
if epoch ~= EPOCH then return {STALE_EPOCH} end
local s = labels_begin(tonumber(st[2]), tonumber(st[3]), DETECTOR, st[6], META, BLOG)
s.now = clock()
local due = redis.call('ZRANGEBYSCORE', DEADLINES, '-inf', math.floor(s.now * 1000),
  'LIMIT', 0, MOST)
if #due == 0 then return {DONE, 0, -1, 0, redis.call('ZCARD', DEADLINES)} end
local held = redis.call('PTTL', HOLD)
if held > 0 then return {HELD, held} end
if redis.call('LLEN', LOG) ~= tonumber(st[2]) - tonumber(st[4]) then
  return {STATE_LOST, 'its update log is incomplete'}
end
local provenance = SOURCE_MARK .. DEFAULT_SOURCE .. ENTRY_SEP .. NOW_MS .. ENTRY_SEP
local t = tostring(DEFAULT)
local carried, taken = 0, 0  -- the records' bytes read: RECORD_CALL_BYTES past the first at most
for _, key in ipairs(due) do
  if carried >= RECORD_CALL_BYTES then break end
  taken = taken + 1
  local p = redis.call('GET', key)
  local e = p and string.sub(p, EPOCH_AT, EPOCH_END)
  if p and string.sub(p, 1, 1) ~= ANSWERED and ours(e, epoch, st[5]) then
    carried = carried + #p
    label_one(s, key, p, t, provenance, epoch, LIFE, DEFAULTED)
  end
end
for i = 1, taken, UNPACK_CHUNK do
  redis.call('ZREM', DEADLINES, unpack(due, i, math.min(i + UNPACK_CHUNK - 1, taken)))
end
local log_length = labels_end(s, META, SERIES, RING, RECENT, CURVE, PEND, LOG, BUCKET, KEEP)
local label_log = log_labels(META, CLOG, s.recent)
local more = (taken < #due or #due == MOST) and 1 or 0
return {DONE, #s.marks, log_length, more, redis.call('ZCARD', DEADLINES), label_log}
""",
)


@dataclass(frozen=True, slots=True)
class Swept:
    """What one sweep did: predictions labelled by default, the log's length after it (-1:
    unchanged), whether more are due, and how many still await their default; ``held_ms``:
    the model's writer held it, nothing was done."""

    labelled: int = 0
    log_length: int = -1
    more: bool = False
    waiting: int = 0
    held_ms: int = 0
    label_log: int = -1  # the challengers' labels' log length after it (-1: none added)


async def apply_defaults(
    store: Runner,
    name: str,
    *,
    epoch: str,
    default: int,
    life_s: int,
    when: Bucket,
    now_ms: int,
    most: int,
    detector: str = "",
) -> Swept:
    """Learn up to ``most`` predictions of the model whose wait ran out with its default
    class index ``default``, each once, whichever worker calls."""
    keys = keys_of(name)
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(keys),
        SCRIPT.arg_list(
            epoch=epoch,
            default=default,
            life=life_s,
            bucket=when.bucket,
            keep=when.keep,
            now_ms=now_ms,
            most=most,
            detector=detector,
        ),
    )
    if int(reply[0]) == Status.HELD:
        return Swept(held_ms=int(reply[1]))
    status_of(store, name, reply)
    more, label_log = bool(int(reply[3])), int(reply[5]) if len(reply) > 5 else -1
    return Swept(int(reply[1]), int(reply[2]), more, int(reply[4]), label_log=label_log)
