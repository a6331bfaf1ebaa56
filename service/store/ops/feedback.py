"""FEEDBACK: the true class of pending predictions, applied once each."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from service.contract.store_protocol import NO_CLASS, Status
from service.contract.store_values import Bucket, FeedbackBatch, FeedbackItem, Held
from service.errors import ModelBusy
from service.store.keys import keys_of
from service.store.ops import labelling
from service.store.script import Runner, Script, status_of

HELD_AGAIN_S = 5.0  # the writer's holds waited out, in all, once some labels were applied
HELD_WAIT_S = 0.1  # one wait for the writer's hold to be let go

# KEYS: then each prediction's pending key; ARGV: then the true class index of each, in the
# same order (NO_CLASS: a label that is none of the model's classes, answered BAD_LABEL if the
# prediction is the model's, else UNKNOWN: a prediction of a model deleted and made anew is
# not found, whatever its label). EPOCH: of the caller's configuration; BUCKET: this time
# bucket, KEEP: buckets kept; LIFE: how long the model's records are kept
# (``protocol.pending_life_s``); SOURCE, NOW_MS: who gives them and when, recorded with each
# update (``codec.provenance``) and counted per source in meta (``sources.source_fields``);
# AVERAGED: 1 for an averaged model (whose writer's commit is guarded by the count of examples
# seen too), else 0; LATE: one character per prediction, '1' where its id tells that its wait
# ran out (a record then missing is EXPIRED, not UNKNOWN); DEFAULT: the class index of the
# model's default label (NO_CLASS: none): a prediction still pending whose wait ran out is
# labelled with it first, as the sweep would have (``defaults.py``), and the label given is
# then answered as a second label; DELAYS: per prediction, "<bucket>:<ms>" (its delay from
# prediction, ``protocol.delay_bucket``) or "-", comma-separated, counted in ``delays`` for
# each label applied.
# While the model's writer holds it (``learn.py``), a call that would move what the writer's
# commit is guarded by (an update; for an averaged model, any example counted) applies
# nothing: {HELD, ms left}; one that would not (each item a label that updates nothing, a
# duplicate, unknown, expired, a conflict) goes through, as it cannot make that commit stale.
# While a promotion holds it (``promote.py``), a call that would label any prediction waits so.
# A prediction made before a promotion whose epoch is kept (``Meta.PREV_EPOCH``) is labelled
# as one made since: its update as its learner decided it (``Learner.apply_logged``).
# An answer is kept LIFE seconds after it was given, so that the same feedback sent again
# within that time is a duplicate; its prediction's bytes no longer count as pending.
# A model with challengers logs each label applied for them too (``clog``,
# challenger_states.LOG_LABELS).
# Returns NO_MODEL, STALE_EPOCH, STATE_LOST or HELD for the whole call, else {DONE, version, log
# length, labels' log length (-1: none added), then per prediction: status (DONE, DUPLICATE,
# UNKNOWN, EXPIRED, CONFLICT, BAD_LABEL), mistake, updated, version (for CONFLICT: the class index
# given before), 1 when the prediction was labelled by default (DUPLICATE, CONFLICT) else 0}.
# Once the records read pass RECORD_CALL_BYTES, the predictions after are left for another call:
# the answers are then fewer than the predictions.
SCRIPT = Script(
    "feedback",
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
        "delays",
        "clog",
        "blog",
    ),  # fmt: skip
    args=(
        "epoch",
        "bucket#",
        "keep#",
        "life#",
        "source",
        "now_ms",
        "averaged#",
        "late",
        "default#",
        "delays_given",
        "detector",
    ),  # fmt: skip
    rest_keys="pending",
    rest_args="labels",
    parts=labelling.PARTS,
    waited=True,
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SEEN, META_SNAP_VERSION,
  META_PREV_EPOCH, META_SEEN_OFFSET)
local epoch = st[1]
if not epoch then return {NO_MODEL} end
if epoch ~= EPOCH then return {STALE_EPOCH} end
local late = {}
for i = PENDING_AT, #KEYS do
  late[i] = string.sub(LATE, i - PENDING_AT + 1, i - PENDING_AT + 1) == '1'
end
local held = redis.call('PTTL', HOLD)
if held > 0 then
  -- Wait only for an item that would move what the writer's commit is guarded by: a
  -- prediction of this model still waiting for its label, given one of its classes (or due
  -- its default), that updates the weights (any such, for an averaged model); while a
  -- promotion holds the model, any such prediction labelled.
  local promoting = tonumber(redis.call('GET', HOLD) or '0') >= PROMOTING
  for i = PENDING_AT, #KEYS do
    local t = ARGV[i + LABELS_AT - PENDING_AT]
    if DEFAULT ~= NO_CLASS and late[i] then t = tostring(DEFAULT) end
    -- (the record's head alone: its status, epoch and bitmap; '' when it is gone)
    local p = tonumber(t) ~= NO_CLASS and redis.call('GETRANGE', KEYS[i], 0,
      BITMAP_AT + tonumber(t) - 1)
    if p and p ~= '' and ours(string.sub(p, EPOCH_AT, EPOCH_END), epoch, st[5])
        and string.sub(p, 1, 1) ~= ANSWERED and (AVERAGED == 1 or promoting
        or string.sub(p, BITMAP_AT + tonumber(t), BITMAP_AT + tonumber(t)) == '1') then
      redis.call('INCR', HOLD)  -- one more waiting: the commit that lets go wakes each
      return {HELD, held}
    end
  end
end
if redis.call('LLEN', LOG) ~= tonumber(st[2]) - tonumber(st[4]) then
  return {STATE_LOST, 'its update log is incomplete'}  -- never extend a log that lost entries
end
local s = labels_begin(tonumber(st[2]), tonumber(st[3]), DETECTOR, st[6], META, BLOG)
local out, n = {}, 0
local function answer(status, m, u, v, by)
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = status, m, u, v, by
  n = n + 5
end
local delays, delayed, delay_ms = {}, {}, 0
for d in string.gmatch(DELAYS_GIVEN, '[^,]+') do delays[#delays + 1] = d end
local unknown, expired, dups, conflicts = 0, 0, 0, 0
local provenance = SOURCE_MARK .. SOURCE .. ENTRY_SEP .. NOW_MS .. ENTRY_SEP
local by_default = SOURCE_MARK .. DEFAULT_SOURCE .. ENTRY_SEP .. NOW_MS .. ENTRY_SEP
local carried = 0  -- the records' bytes read: RECORD_CALL_BYTES past the first at most
for i = PENDING_AT, #KEYS do
  if carried >= RECORD_CALL_BYTES then break end
  local t = ARGV[i + LABELS_AT - PENDING_AT]
  local p = redis.call('GET', KEYS[i])
  if p then carried = carried + #p end
  if not p and late[i] then
    expired = expired + 1
    answer(EXPIRED, 0, 0, 0, 0)
  elseif not p or not ours(string.sub(p, EPOCH_AT, EPOCH_END), epoch, st[5]) then
    unknown = unknown + 1
    answer(UNKNOWN, 0, 0, 0, 0)
  elseif tonumber(t) == NO_CLASS then
    answer(BAD_LABEL, 0, 0, 0, 0)
  else
    if DEFAULT ~= NO_CLASS and late[i] and string.sub(p, 1, 1) ~= ANSWERED then
      -- its wait ran out: labelled by default first, as the sweep would have
      label_one(s, KEYS[i], p, tostring(DEFAULT), by_default, epoch, LIFE, DEFAULTED)
      redis.call('ZREM', DEADLINES, KEYS[i])
      p = redis.call('GET', KEYS[i])
    end
    if string.sub(p, 1, 1) == ANSWERED then
      local _, _, prev, m, u, v, rest = string.find(p, '^A[^|]*|(%d+)|(%d)|(%d)|(%d+)(.*)$')
      local by = (rest == DEFAULTED) and 1 or 0
      if prev ~= t then
        conflicts = conflicts + 1
        answer(CONFLICT, 0, 0, tonumber(prev), by)
      else
        dups = dups + 1
        answer(DUPLICATE, tonumber(m), tonumber(u), tonumber(v), by)
      end
    else
      local m, u, v = label_one(s, KEYS[i], p, t, provenance, epoch, LIFE, '')
      if DEFAULT ~= NO_CLASS then redis.call('ZREM', DEADLINES, KEYS[i]) end
      local b, ms = string.match(delays[i - PENDING_AT + 1] or '', '^(%d+):(%d+)$')
      if b then
        delayed[b] = (delayed[b] or 0) + 1
        delay_ms = delay_ms + tonumber(ms)
      end
      answer(DONE, m, u, v, 0)
    end
  end
end
if unknown > 0 then redis.call('HINCRBY', META, COUNT_UNKNOWN_FEEDBACK, unknown) end
if expired > 0 then redis.call('HINCRBY', META, COUNT_EXPIRED, expired) end
if dups > 0 then redis.call('HINCRBY', META, COUNT_DUPLICATES, dups) end
if conflicts > 0 then redis.call('HINCRBY', META, COUNT_CONFLICTS, conflicts) end
local given = #s.marks - s.defaulted
if given > 0 then
  local counted = FIELD_SOURCE .. SOURCE
  s.cells[counted .. FIELD_EXAMPLES] = given
  local m, u = s.mistakes - s.dmistakes, s.updates - s.dupdates
  if m > 0 then s.cells[counted .. FIELD_MISTAKES] = m end
  if u > 0 then s.cells[counted .. FIELD_UPDATES] = u end
  redis.call('HINCRBY', META, COUNT_FEEDBACK, given)
end
for b, c in pairs(delayed) do redis.call('HINCRBY', DELAYS, b, c) end
if delay_ms > 0 then redis.call('HINCRBY', DELAYS, FIELD_DELAY_MS, delay_ms) end
local log_length = labels_end(s, META, SERIES, RING, RECENT, CURVE, PEND, LOG, BUCKET, KEEP)
local label_log = log_labels(META, CLOG, s.recent)
table.insert(out, 1, label_log)
table.insert(out, 1, log_length)
table.insert(out, 1, s.version)
table.insert(out, 1, DONE)
return out
""",
)


async def commit_feedback(
    store: Runner,
    name: str,
    *,
    epoch: str,
    tokens: Sequence[str],
    labels: Sequence[int],
    when: Bucket,
    life_s: int,
    source: str,
    now_ms: int,
    averaged: bool,
    wait_s: float = 0.0,
    late: str = "",
    default: int = NO_CLASS,
    delays: str = "",
    detector: str = "",
) -> FeedbackBatch | Held:
    """Apply the true class index of each pending prediction, once each; or nothing, while
    the model's writer holds it and one of them would update the weights (for an
    ``averaged`` model: would count an example). ``wait_s``: a call that found the hold
    first waits up to that long for the writer's commit to let go (it wakes each call that
    found it, ``learn.py``), on the same connection in the same round trip: the script runs
    as soon as it is woken, before the writer can hold the model again. ``late``: '1' for
    each prediction whose id tells that its wait ran out, '0' (or nothing) for the others;
    ``default``: the class index of the model's default label (NO_CLASS: none); ``delays``:
    each prediction's delay, as the script takes them; ``detector``: its drift detector's.

    A script reads RECORD_CALL_BYTES of records at most: the predictions it left are sent
    again, each call waiting out the writer's hold (HELD_AGAIN_S in all) once some were
    applied; past that, ModelBusy (the labels applied are answered as duplicates when sent
    again)."""
    k = keys_of(name)
    wait = ("BLPOP", k.wake, wait_s) if wait_s > 0 else None
    call = _Call(
        name=name, when=when, life_s=life_s, source=source, now_ms=now_ms, averaged=averaged,
        default=default, epoch=epoch, detector=detector,
    )  # fmt: skip
    spans = delays.split(",") if delays else []
    items: list[FeedbackItem] = []
    version = log_length = label_log = -1
    deadline = asyncio.get_running_loop().time() + HELD_AGAIN_S
    while True:
        at = len(items)
        reply = await _run(store, call, _Items(tokens, labels, late, spans), at, wait)
        if int(reply[0]) == Status.HELD:
            if not items:  # (sent again with wait_s, it waits for the writer to let go)
                return Held(int(reply[1]))
            if asyncio.get_running_loop().time() > deadline:
                raise ModelBusy(f"Model {name!r} stayed held by its writer; retry shortly.")
            wait = ("BLPOP", k.wake, min(int(reply[1]) / 1000, HELD_WAIT_S))
            continue
        status_of(store, name, reply)
        flat = [int(v) for v in reply[4:]]
        items += [_item(*flat[i : i + 5]) for i in range(0, len(flat), 5)]
        version, log_length = int(reply[1]), max(log_length, int(reply[2]))
        label_log = max(label_log, int(reply[3]))
        if len(items) >= len(tokens) or not flat:
            return FeedbackBatch(version, log_length, items, label_log=label_log)
        wait = None


@dataclass(frozen=True, slots=True)
class _Call:
    """What every script call of one ``feedback`` is given, but the predictions."""

    name: str
    when: Bucket
    life_s: int
    source: str
    now_ms: int
    averaged: bool
    default: int
    epoch: str = ""
    detector: str = ""


class _Items(NamedTuple):
    """The predictions a feedback call labels: each one's token, class index, whether its
    label came late, and its delay (the spans of ``delays``)."""

    tokens: Sequence[str]
    labels: Sequence[int]
    late: str
    spans: list[str]


async def _run(
    store: Runner, call: _Call, items: _Items, at: int, wait: tuple[str, str, float] | None
) -> list[Any]:
    """One script call, for the predictions from ``at`` on."""
    k = keys_of(call.name)
    tokens, labels = items.tokens[at:], items.labels[at:]
    late, spans = items.late[at:], items.spans[at:]
    reply, _ = await store.run_with_wait(
        SCRIPT,
        SCRIPT.key_list(k, rest=[k.pending(t) for t in tokens]),
        SCRIPT.arg_list(
            labels,
            epoch=call.epoch,
            bucket=call.when.bucket,
            keep=call.when.keep,
            life=call.life_s,
            source=call.source,
            now_ms=call.now_ms,
            averaged=int(call.averaged),
            late=late,
            default=call.default,
            delays_given=",".join(spans),
            detector=call.detector,
        ),
        before=wait,
    )
    return list(reply)


def _item(status: int, mistake: int, updated: int, version: int, by: int) -> FeedbackItem:
    s = Status(status)
    if s == Status.CONFLICT:
        return FeedbackItem(s, False, False, -1, given=version, by_default=bool(by))
    return FeedbackItem(s, bool(mistake), bool(updated), version, by_default=bool(by))
