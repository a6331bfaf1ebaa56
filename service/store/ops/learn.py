"""LEARN: count and log learned examples, if the caller's copy was current; for the model's
writer, also answer the handed-over requests the commit learns.

One writer per model (``service/engine/writer.py``): the worker that holds ``writer`` (a lease,
renewed while it works) learns every /learn of the model; the other workers hand their checked
examples over (``contract/learn_wire.py``) and wait for the answer. A request waiting for the
writer has its token in ``learns`` (a list, oldest first) and its bytes in ``reqs`` (a hash,
token -> request); the writer moves the tokens it takes into ``taken`` (a set; TAKE,
``handover.py``) and the commit that learns a request takes it out of both keys and pushes its
answer, in this one script. A request leaves ``reqs`` once: learned and answered, answered with
an error (``handover.py``: REFUSE), withdrawn by its requester (WITHDRAW), or gone with its keys
(the model deleted, a key evicted or expired), so it is learned at most once; its requester
learns which, or (its answer gone too) that nobody can tell. A worker that takes the lease puts
every taken token back at the head of the queue (``parts.ACQUIRE``): the writer before it may
have died with them; if it lives on, the commit of whichever learns a request first wins."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.contract.store_protocol import Status
from service.contract.store_values import (
    Bucket,
    Challenged,
    Held,
    LearnBatch,
    LearnResult,
    Lease,
    Made,
    RequestsGone,
    SyncData,
)
from service.errors import NotWriter
from service.store.keys import keys_of
from service.store.ops import drift, parts
from service.store.ops.challenger_states import CHALLENGER_WEIGHTS
from service.store.script import Arg, Runner, Script, status_of, text

# KEYS: then, for a writer's commit, the answer key of each handed-off request it learns.
# ARGV: VERSION and SEEN the copy used (SEEN '' when it does not matter); BUCKET, KEEP: the
# time bucket and the buckets kept; R2: the largest squared feature norm; N examples, MISTAKES,
# MARKS ('0'/'1' per example, all N of them); HOLDER: the writer's id ('' when each worker
# commits its own), LEASE: the lease's ms; then N_CELLS (field, count) confusion pairs,
# N_UPDATES log entries, N_RECENT recent examples' entries (oldest first), and each handed-off
# request's (token, answer). The caller formats the entries. N_LABELS: every example's entry,
# in order, for the model's challengers (``challenger_states.py``): a model with challengers takes a
# commit only with all N of them ({CHALLENGED} otherwise, nothing written) and appends them to
# ``clog``; a model without ignores them. Or, instead of the labels, N_STATES (id, state)
# pairs: every challenger's state (with its weights) after the N examples, valid only if the
# challengers are FOLD_GEN's and their log ends at label FOLD_AT ({CHALLENGED} otherwise): they
# replace the challengers' states at label FOLD_AT + N, where the log starts, empty.
# A writer's commit (HOLDER set) runs only while HOLDER holds the lease (else {NOT_WRITER},
# nothing written), and renews it after its first write (a script's first write is the one
# refused when Redis is full, and a renewal is not refused, so it must not come first). It
# learns each handed-off request only if the request still waits for this commit, takes it
# off the queue's keys and pushes its answer, all at once, so a request is learned once and
# answered, or not learned, whatever worker dies or lease lapses. And a writer's commit that
# finds the model moved (by feedback) holds it: no feedback is applied until the writer's next
# commit, which is then sure to find its copy current once caught up (or until HOLD_MS pass,
# should the writer die). The hold counts the feedback calls that found it (one each, after
# its own 1); the commit that lets go pushes as many wake-ups to ``wake``.
# A model that retrains at a drift (DETECTOR ends in ' retrain') takes a commit only with every
# label, and only where its detector, fed MARKS, swaps learners at the examples SWAPS names
# ("<example from 1>:<update entries before it>,...": where its writer learned on with the
# background learner; STATE_LOST otherwise, nothing written): the background learner (``blog``)
# keeps each example its warning flag is up at, and at each swap its entries (``drift.py``'s
# RETRAIN) go into the log there, the served learner's count apart (Meta.SEEN_OFFSET) its own.
# While a promotion holds the model (``promote.py``), nothing is written: {HELD, ms left}.
# Returns {DONE, version, seen, log length, labels' log length (-1: none added), the label
# number of the labels' log's first entry, the challengers' gen}, the sync reply
# with STALE_COPY when stale, NO_MODEL, STALE_EPOCH, STATE_LOST, {REQUESTS_GONE, tokens} naming the
# handed-off requests that no longer wait, {NOT_WRITER} or HELD (nothing written with these last
# three).
SCRIPT = Script(
    "learn",
    keys=(
        "meta",
        "snap",
        "log",
        "series",
        "ring",
        "recent",
        "curve",
        "hold",
        "taken",
        "reqs",
        "writer",
        "wake",
        "clog",
        "cstate",
        "cweights",
        "blog",
    ),
    args=(
        "epoch",
        "version",
        "seen",
        "bucket#",
        "keep#",
        "r2",
        "n#",
        "mistakes#",
        "marks",
        "holder",
        "lease",
        "n_cells#",
        "n_updates#",
        "n_recent#",
        "n_labels#",
        "fold_gen",
        "fold_at#",
        "n_states#",
        "detector",
        "swaps",
    ),
    rest_keys="answers",
    rest_args="cells",
    parts=(
        parts.SYNC,
        drift.DRIFT,
        drift.RETRAIN,
        parts.RECORD,
        parts.ANSWER,
        parts.WAKE,
        parts.WEIGHTS,
        CHALLENGER_WEIGHTS,
    ),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SEEN, META_R2,
  META_SEEN_OFFSET)
if not st[1] then return {NO_MODEL} end
local offset = tonumber(st[5] or '0')  -- (the served learner's count: seen - offset)
if st[1] ~= EPOCH then return {STALE_EPOCH} end
local writer = HOLDER ~= ''
if writer and redis.call('GET', WRITER) ~= HOLDER then return {NOT_WRITER} end
if tonumber(redis.call('GET', HOLD) or '0') >= PROMOTING then  -- a promotion holds it
  return {HELD, math.max(1, redis.call('PTTL', HOLD))}
end
if st[2] ~= VERSION or (SEEN ~= '' and tonumber(st[3]) - offset ~= tonumber(SEEN)) then
  local reply = sync(META, SNAP, LOG, tonumber(VERSION))
  if reply[1] == DONE then
    reply[1] = STALE_COPY
    if writer then
      local waiting = redis.call('GET', HOLD) or '1'
      redis.call('SET', HOLD, waiting, 'PX', HOLD_MS)
      redis.call('PEXPIRE', WRITER, LEASE)
    end
  end
  return reply
end
do  -- never extend a log that lost entries
  local why = lost(META, SNAP, LOG)
  if why then return {STATE_LOST, why} end
end
local entries_at = CELLS_AT + 2 * N_CELLS
local recent_at = entries_at + N_UPDATES
local labels_at = recent_at + N_RECENT
local states_at = labels_at + N_LABELS
local replies_at = states_at + 2 * N_STATES
local challengers = tonumber(redis.call('HGET', META, META_CHALLENGERS) or '0')
local label_at = {'0', '0'}
if challengers > 0 then
  label_at = redis.call('HMGET', META, META_CHALLENGER_BASE, META_CHALLENGER_GEN)
  if N_STATES > 0 then
    if N_STATES ~= challengers or label_at[2] ~= FOLD_GEN
        or tonumber(label_at[1] or '0') + redis.call('LLEN', CLOG) ~= FOLD_AT then
      return {CHALLENGED}
    end
  elseif N_LABELS ~= N then return {CHALLENGED} end
end
local answers = #KEYS - ANSWERS_AT + 1
if answers > 0 then
  local gone = {}
  for a = 0, answers - 1 do
    local token = ARGV[replies_at + 2 * a]
    if redis.call('SISMEMBER', TAKEN, token) == 0 or redis.call('HEXISTS', REQS, token) == 0
    then gone[#gone + 1] = token end
  end
  if #gone > 0 then return {REQUESTS_GONE, unpack(gone)} end
end
retrain.on, retrain.at = string.find(DETECTOR, ' retrain', 1, true) ~= nil, {}
if retrain.on then  -- (every label sent; the drifts where its writer swapped, the detector's)
  if N_LABELS ~= N then return {STATE_LOST, 'a commit that retrains carries every label'} end
  for i, j in string.gmatch(SWAPS, '(%d+):(%d+)') do retrain.at[tonumber(i)] = tonumber(j) end
  retrain.state, retrain.events, retrain.acts = drift.feed(DETECTOR,
    redis.call('HGET', META, META_DRIFT_STATE) or '', MARKS)
  retrain.befores = {}  -- (the version before each swap: its event says it)
  for i = 1, N do
    if (string.sub(retrain.acts, i, i) == '2') ~= (retrain.at[i] ~= nil) then
      return {STATE_LOST, 'its detector drifts elsewhere than its writer learned'}
    end
  end
end
local seen, version = tonumber(st[3]), tonumber(st[2])
local cells = {}
for i = CELLS_AT, entries_at - 1, 2 do cells[ARGV[i]] = tonumber(ARGV[i + 1]) end
local recent = {}
for j = recent_at, labels_at - 1 do recent[#recent + 1] = ARGV[j] end
record(META, SERIES, RING, RECENT, CURVE, BUCKET, KEEP, seen, N, MARKS, MISTAKES, cells, recent,
  retrain.on and '' or DETECTOR)  -- (a retraining's detector: fed above, kept below)
redis.call('HINCRBY', META, COUNT_LEARNED, N)
local log_length, stop, from, swapped = -1, recent_at - 1, entries_at, 0
for i = 1, retrain.on and N or 0 do  -- the background learner: learns, or serves from here
  local act = string.sub(retrain.acts, i, i)
  if act == '1' then retrain.keep(META, BLOG, ARGV[labels_at + i - 1]) end
  if act == '2' then
    log_length = retrain.push(LOG, ARGV, from, entries_at + retrain.at[i] - 1, log_length)
    from = entries_at + retrain.at[i]
    retrain.befores[i] = version + retrain.at[i] + swapped
    local swap = retrain.entries(META, BLOG, ARGV[labels_at + i - 1])
    log_length = retrain.push(LOG, swap, 1, #swap, log_length)
    swapped, offset = swapped + #swap, seen + i - #swap
  end
end
log_length = retrain.push(LOG, ARGV, from, stop, log_length)
if swapped > 0 then redis.call('HSET', META, META_SEEN_OFFSET, offset) end
if retrain.on then drift.keep(META, retrain.state, retrain.events, seen, retrain.befores) end
local label_log = -1
if challengers > 0 and N_STATES > 0 then
  local at = string.format('%d', FOLD_AT + N)
  for i = states_at, replies_at - 1, 2 do
    redis.call('HSET', CSTATE, ARGV[i], at .. ' ' .. ARGV[i + 1])
    forget_weights(CWEIGHTS, ARGV[i])
  end
  redis.call('DEL', CLOG)  -- (its entries are in the states)
  redis.call('HSET', META, META_CHALLENGER_BASE, at)
  label_at[1], label_log = at, 0
elseif challengers > 0 then
  for j = labels_at, states_at - 1, UNPACK_CHUNK do
    label_log = redis.call('RPUSH', CLOG, unpack(ARGV, j, math.min(j + UNPACK_CHUNK - 1,
      states_at - 1)))
  end
end
if N_UPDATES + swapped > 0 then
  version = redis.call('HINCRBY', META, META_VERSION, N_UPDATES + swapped)
end
if tonumber(R2) > tonumber(st[4] or 0) then redis.call('HSET', META, META_R2, R2) end
for a = 0, answers - 1 do
  answer(TAKEN, REQS, KEYS[ANSWERS_AT + a], ARGV[replies_at + 2 * a], ARGV[replies_at + 2 * a + 1])
end
if writer then
  redis.call('PEXPIRE', WRITER, LEASE)
  local waiting = tonumber(redis.call('GET', HOLD) or 1) - 1
  redis.call('DEL', HOLD)
  wake(WAKE, waiting)
end
return {DONE, version, seen - offset + N, log_length, label_log, label_at[1] or '0',
  label_at[2] or '0'}
""",
)


async def commit_learn(
    store: Runner,
    name: str,
    *,
    epoch: str,
    made: Made,
    when: Bucket,
    batch: LearnBatch,
    answers: Sequence[tuple[str, bytes]] = (),
    writer: Lease | None = None,
    detector: str = "",
) -> LearnResult | SyncData | RequestsGone | Challenged | Held:
    """Count and log learned examples, if the caller's copy was current. A model's
    ``writer`` commits only while it holds the lease, renews it, and holds the model when its
    copy was not current (NotWriter when another worker holds the lease, or none does);
    ``answers``: (token, answer) of each handed-off request the commit learns, only with a
    ``writer``; ``detector``: the model's drift detector, fed the examples' mistakes
    (``ModelConfig.drift_spec``, '' none)."""
    keys = keys_of(name)
    rest: list[Arg] = []
    for field, count in batch.cells.items():
        rest += [field, count]
    labels = batch.labels or []
    rest += [*batch.entries, *batch.recent, *labels]
    states = batch.states
    for id, state in states.tails if states else ():
        rest += [id, state]
    if answers and writer is None:
        raise ValueError("only a writer's commit answers handed-off requests")
    for token, data in answers:
        rest += [token, data]
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(keys, rest=[keys.answer(t) for t, _ in answers]),
        SCRIPT.arg_list(
            rest,
            epoch=epoch,
            version=made.version,
            seen=made.seen,
            bucket=when.bucket,
            keep=when.keep,
            r2=made.r2,
            n=batch.n,
            mistakes=batch.mistakes,
            marks=batch.marks,
            holder="" if writer is None else writer.holder,
            lease=0 if writer is None else writer.ms,
            n_cells=len(batch.cells),
            n_updates=len(batch.entries),
            n_recent=len(batch.recent),
            n_labels=len(labels),
            fold_gen=states.gen if states else "",
            fold_at=states.at if states else 0,
            n_states=len(states.tails) if states else 0,
            detector=detector,
            swaps=",".join(f"{i}:{j}" for i, j in batch.swaps or ()),
        ),
    )
    return await _result(store, name, reply, made)


async def _result(
    store: Runner, name: str, reply: list[Any], made: Made
) -> LearnResult | SyncData | RequestsGone | Challenged | Held:
    """What the script's ``reply`` says."""
    status = int(reply[0])
    if status == Status.NOT_WRITER:
        raise NotWriter(name)
    if status == Status.CHALLENGED:
        return Challenged()
    if status == Status.HELD:
        return Held(int(reply[1]))
    if status == Status.REQUESTS_GONE:
        return RequestsGone(frozenset(text(t) for t in reply[1:]))
    if status_of(store, name, reply) == Status.DONE:
        version, seen, log_length, label_log, label_base = map(int, reply[1:6])
        return LearnResult(
            version=version, seen=seen, log_length=log_length, label_log=label_log,
            label_base=label_base, label_gen=text(reply[6]),
        )  # fmt: skip
    return await store.sync_data(keys_of(name), reply, made.version)
