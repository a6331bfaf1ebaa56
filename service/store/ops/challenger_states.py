"""A model's challengers: added, removed, their states folded forward; read in one transaction.

Keys (``ModelKeys.challengers``): ``chal`` (hash: id -> the challenger's configuration JSON),
``cstate`` (hash: id -> its packed state but its weights, ``learner/challenger.py``, behind
``b"<position> "``: how many of the model's labels it had been given then), ``cweights`` (hash:
id -> the key of its packed weights, a list of chunks written once, ``blobs.py``: no script
ever carries a large model's weights; none: all zeros, or held in the state as before) and
``clog`` (list: the entry of every
labelled example since, in the order the model learned them; the first is label number
``cbase`` of the model's stream, as the model's ``seen`` counts them: while a model has
challengers every label it counts is logged there, so ``cbase`` plus the log's length is its
``seen``). Meta's ``chn`` counts the challengers: while it is above 0,
every script that learns labels appends their entries to ``clog`` in the same step
(``labelling.LABEL``, ``learn.py``), so a challenger's state is its packed state replayed through
the entries from its position on, the same on every worker. ``cgen`` moves with each add and
removal, so that a fold computed before one is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.contract.store_protocol import Meta, Status
from service.errors import Conflict, ModelBusy, NotFound
from service.store.keys import keys_of
from service.store.ops import blobs, parts
from service.store.script import Arg, Runner, Script, raw, status_of, text

# Shared by the scripts that label pending predictions (feedback.py, defaults.py): the entries
# of the labels a script learned (``s.recent`` of labelling.LABEL), appended to ``clog`` when the
# model has challengers. Returns the log's length then (-1: nothing appended).
LOG_LABELS = """
local function log_labels(meta, clog, entries)
  local length = -1
  if #entries == 0 or tonumber(redis.call('HGET', meta, META_CHALLENGERS) or '0') <= 0 then
    return length
  end
  for i = 1, #entries, UNPACK_CHUNK do
    length = redis.call('RPUSH', clog, unpack(entries, i, math.min(i + UNPACK_CHUNK - 1,
      #entries)))
  end
  return length
end
"""

# Shared by the scripts that write challengers' states (uses parts.WEIGHTS): the weights
# staged at ``key`` in ``n`` chunks (0: none, all zeros) become challenger ``id``'s, its
# weights before let go; ``forget_weights`` lets them go.
CHALLENGER_WEIGHTS = """
local function forget_weights(cweights, id)
  local old = redis.call('HGET', cweights, id)
  if old then let_go(old) end
  redis.call('HDEL', cweights, id)
end
local function keep_weights(cweights, id, key, n)
  forget_weights(cweights, id)
  if n > 0 then
    redis.call('PERSIST', key)
    redis.call('HSET', cweights, id, key)
  end
end
-- Whether each key after ``at`` in KEYS holds the chunks its state says (every third
-- argument from ``from``), the first of each triple its id.
local function all_staged(at, from)
  local j = at
  for i = from, #ARGV, 3 do
    if not staged(KEYS[j], tonumber(ARGV[i + 2])) then return false end
    j = j + 1
  end
  return true
end
local function let_all_go(at)
  for j = at, #KEYS do let_go(KEYS[j]) end
end
-- Each (id, tail, chunks) triple of ARGV from ``from`` on becomes that challenger's state
-- (its position's text ``at`` in front), its weights those staged at KEYS from ``keys`` on.
local function keep_states(cstate, cweights, from, keys, at)
  local j = keys
  for i = from, #ARGV, 3 do
    redis.call('HSET', cstate, ARGV[i], at .. ARGV[i + 1])
    keep_weights(cweights, ARGV[i], KEYS[j], tonumber(ARGV[i + 2]))
    j = j + 1
  end
end
"""

# ID: the challenger's id, CONFIG its configuration's JSON, TAIL its packed state but the
# position and the weights (the script puts the model's labels so far in front), its weights
# staged at WEIGHTS in CHUNKS chunks (0: zeros); VERSION: the served version the state was
# copied from ('' when it starts from zeros), MOST: challengers a model may have. Returns
# {DONE, position}, {NAME_TAKEN}, {TOO_MANY}, {STALE_COPY} (the model moved since the copy),
# {NOT_STAGED}, NO_MODEL or STALE_EPOCH; the staged weights are let go unless kept.
ADD = Script(
    "challenger_add",
    keys=("meta", "chal", "cstate", "clog", "cweights", "weights"),
    args=("epoch", "id", "config", "tail", "version", "most#", "chunks#"),
    parts=(parts.WEIGHTS, CHALLENGER_WEIGHTS),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_CHALLENGERS,
  META_CHALLENGER_BASE, META_SEEN)
local n = tonumber(st[3] or '0')
local refused = nil
if not st[1] then refused = NO_MODEL
elseif st[1] ~= EPOCH then refused = STALE_EPOCH
elseif redis.call('HEXISTS', CHAL, ID) == 1 then refused = NAME_TAKEN
elseif n >= MOST then refused = TOO_MANY
elseif VERSION ~= '' and st[2] ~= VERSION then refused = STALE_COPY
elseif not staged(WEIGHTS, CHUNKS) then refused = NOT_STAGED
end
if refused then
  let_go(WEIGHTS)
  return {refused}
end
if n == 0 then  -- the labels' log starts here: labels are numbered as the model counts them
  redis.call('DEL', CLOG)
  st[4] = st[5] or '0'
  redis.call('HSET', META, META_CHALLENGER_BASE, st[4])
end
local position = tonumber(st[4]) + redis.call('LLEN', CLOG)
redis.call('HSET', CHAL, ID, CONFIG)
redis.call('HSET', CSTATE, ID, string.format('%d', position) .. ' ' .. TAIL)
keep_weights(CWEIGHTS, ID, WEIGHTS, CHUNKS)
redis.call('HSET', META, META_CHALLENGERS, n + 1)
redis.call('HINCRBY', META, META_CHALLENGER_GEN, 1)
return {DONE, position}
""",
)

# Removes challenger ID; the last one removed takes the labels' log with it. Returns {DONE},
# {UNKNOWN} (no such challenger) or NO_MODEL.
REMOVE = Script(
    "challenger_remove",
    keys=("meta", "chal", "cstate", "clog", "cweights"),
    args=("id",),
    parts=(parts.WEIGHTS, CHALLENGER_WEIGHTS),
    body="""
if redis.call('HEXISTS', META, META_EPOCH) == 0 then return {NO_MODEL} end
if redis.call('HDEL', CHAL, ID) == 0 then return {UNKNOWN} end
redis.call('HDEL', CSTATE, ID)
forget_weights(CWEIGHTS, ID)
redis.call('HINCRBY', META, META_CHALLENGER_GEN, 1)
if redis.call('HINCRBY', META, META_CHALLENGERS, -1) <= 0 then
  redis.call('HDEL', META, META_CHALLENGERS, META_CHALLENGER_BASE)
  for _, key in ipairs(redis.call('HVALS', CWEIGHTS)) do let_go(key) end
  redis.call('DEL', CHAL, CSTATE, CLOG, CWEIGHTS)
end
return {DONE}
""",
)

# Every challenger's state at label POSITION (then (id, tail, chunks) triples, each tail's
# weights staged at the key of the same place after the fixed keys), read when the log
# started at BASE and the challengers were GEN's: the states replace theirs and the log's
# entries before POSITION go. Returns {DONE}, or {UNCHANGED} when the challengers or the log's
# start moved since, or {NOT_STAGED} (nothing done, the staged weights let go).
FOLD = Script(
    "challenger_fold",
    keys=("meta", "cstate", "clog", "cweights"),
    args=("gen", "base#", "position#"),
    rest_keys="weights",
    rest_args="states",
    parts=(parts.WEIGHTS, CHALLENGER_WEIGHTS),
    body="""
local st = redis.call('HMGET', META, META_CHALLENGER_GEN, META_CHALLENGER_BASE)
local refused = nil
if (st[1] or '0') ~= GEN or tonumber(st[2] or '0') ~= BASE
    or POSITION - BASE > redis.call('LLEN', CLOG) then
  refused = UNCHANGED
elseif not all_staged(WEIGHTS_AT, STATES_AT) then refused = NOT_STAGED
end
if refused then
  let_all_go(WEIGHTS_AT)
  return {refused}
end
keep_states(CSTATE, CWEIGHTS, STATES_AT, WEIGHTS_AT, string.format('%d', POSITION) .. ' ')
redis.call('LTRIM', CLOG, POSITION - BASE, -1)
redis.call('HSET', META, META_CHALLENGER_BASE, POSITION)
return {DONE}
""",
)
READ_ATTEMPTS = 3  # reads of the challengers, should their weights be replaced under each


@dataclass(frozen=True, slots=True)
class Tail:
    """A challenger's state as a script writes it: its packed state but the position and the
    weights (``head``), and its packed weights (b"": all zeros)."""

    id: str
    head: bytes
    weights: bytes


@dataclass(frozen=True, slots=True)
class StagedStates:
    """States whose weights are staged: the keys (one a state, in order), and the script's
    arguments, (id, head, chunks) for each."""

    keys: list[str]
    args: list[Arg]


_FIELDS = (Meta.EPOCH, Meta.CONFIG, Meta.CHALLENGER_GEN, Meta.CHALLENGER_BASE)
_COUNTED = (Meta.VERSION, Meta.SEEN, "mistakes", "defaulted", "defaulted_mistakes")


@dataclass(frozen=True)
class ChallengerData:
    """What a model's challengers are made of, read at one instant."""

    epoch: str
    config: str  # the model's configuration JSON
    gen: str
    base: int  # the label number of ``entries[0]``
    configs: dict[str, str]  # id -> configuration JSON
    states: dict[str, bytes]  # id -> packed state with its position
    entries: list[bytes]
    served: dict[str, str]  # meta: version, seen, mistakes and defaulted (and their mistakes)
    ring: bytes  # the served model's ring of outcomes


async def read_challengers(store: Runner, name: str) -> ChallengerData | None:
    """The model's challengers, its labels' log and the served model's counters, in one
    transaction, then each challenger's weights a chunk at a time (None: no such model)."""
    keys = keys_of(name)
    chal, cstate, clog = keys.challengers
    for _ in range(READ_ATTEMPTS):
        async with store.client.pipeline(transaction=True) as pipe:
            pipe.hmget(keys.meta, [*_FIELDS, *_COUNTED])
            pipe.hgetall(chal)
            pipe.hgetall(cstate)
            pipe.hgetall(keys.cweights)
            pipe.lrange(clog, 0, -1)
            pipe.get(keys.ring)
            meta, configs, states, weights, entries, ring = await pipe.execute()
        for id, key in weights.items():  # (each written once: gone if replaced meanwhile)
            found = await blobs.read(store.client, text(key))
            if found is None:
                break
            states[id] = raw(states.get(id, b"")) + found
        else:
            return _data(meta, configs, states, entries, ring)
    raise ModelBusy(f"Model {name!r}'s challengers kept changing while read; retry shortly.")


async def read_challengers_since(store: Runner, name: str, offset: int) -> ChallengerData | None:
    """What ``read`` reads but the challengers themselves: their labels' log from entry
    ``offset`` on (None: no such model)."""
    keys = keys_of(name)
    _, _, clog = keys.challengers
    async with store.client.pipeline(transaction=True) as pipe:
        pipe.hmget(keys.meta, [*_FIELDS, *_COUNTED])
        pipe.lrange(clog, offset, -1)
        pipe.get(keys.ring)
        meta, entries, ring = await pipe.execute()
    return _data(meta, {}, {}, entries, ring)


def _data(
    meta: list[Any], configs: dict[Any, Any], states: dict[Any, Any], entries: list[Any], ring: Any
) -> ChallengerData | None:
    if meta[0] is None:
        return None
    return ChallengerData(
        epoch=text(meta[0]),
        config=text(meta[1]),
        gen=text(meta[2] or "0"),
        base=int(meta[3] or 0),
        configs={text(k): text(v) for k, v in configs.items()},
        states={text(k): raw(v) for k, v in states.items()},
        entries=[raw(e) for e in entries],
        served={f: text(v or "0") for f, v in zip(_COUNTED, meta[len(_FIELDS) :], strict=True)},
        ring=raw(ring or b""),
    )


async def add_challenger(
    store: Runner,
    name: str,
    *,
    epoch: str,
    id: str,
    config: str,
    tail: Tail,
    version: int | None,
    most: int,
) -> int | None:
    """Add challenger ``id`` of state ``tail``; its position in the model's labels. None: the
    model moved since the served weights it copies (at ``version``) were read."""
    k = keys_of(name)
    at = blobs.new_challenger_weights(k)
    await blobs.stage_at(store.client, [at], [tail.weights])
    reply = await store.run(
        ADD,
        ADD.key_list(k, {"weights": at}),
        ADD.arg_list(
            epoch=epoch,
            id=id,
            config=config,
            tail=tail.head,
            version="" if version is None else version,
            most=most,
            chunks=blobs.chunks(len(tail.weights)),
        ),
    )
    status = status_of(store, name, reply)
    if status == Status.NAME_TAKEN:
        raise challenger_exists(name, id, "DELETE it first to add another under that id")
    if status == Status.TOO_MANY:
        raise Conflict(
            f"Model {name!r} has {most} challengers, as many as it may "
            "(PERCEPTRON_MAX_CHALLENGERS); delete one first.",
            code="too_many_challengers",
        )
    if status == Status.NOT_STAGED:
        raise ModelBusy(f"Model {name!r}'s challenger's weights were not all written; retry.")
    return None if status == Status.STALE_COPY else int(reply[1])


async def remove_challenger(store: Runner, name: str, id: str) -> None:
    k = keys_of(name)
    reply = await store.run(
        REMOVE,
        REMOVE.key_list(k),
        REMOVE.arg_list(id=id),
    )
    if status_of(store, name, reply) == Status.UNKNOWN:
        raise challenger_not_found(name, id)


async def stage_states(store: Runner, name: str, states: Sequence[Tail]) -> StagedStates:
    """Each state's weights staged under a key of its own, for a script to keep."""
    k = keys_of(name)
    named = [blobs.new_challenger_weights(k) for _ in states]
    await blobs.stage_at(store.client, named, [t.weights for t in states])
    args: list[Arg] = []
    for t in states:
        args += [t.id, t.head, blobs.chunks(len(t.weights))]
    return StagedStates(named, args)


async def fold_challengers(
    store: Runner,
    name: str,
    *,
    gen: str,
    base: int,
    position: int,
    states: Sequence[Tail],
) -> bool:
    """Whether the states at ``position`` replaced the challengers' and the log before it."""
    k = keys_of(name)
    staged = await stage_states(store, name, states)
    reply = await store.run(
        FOLD,
        FOLD.key_list(k, rest=staged.keys),
        FOLD.arg_list(staged.args, gen=gen, base=base, position=position),
    )
    return int(reply[0]) == Status.DONE


def challenger_exists(name: str, id: str, remedy: str) -> Conflict:
    """An id already taken among the model's challengers; ``remedy`` says what to do."""
    return Conflict(
        f"Model {name!r} has a challenger {id!r} already: {remedy}.", code="challenger_exists"
    )


def challenger_not_found(name: str, id: str) -> NotFound:
    return NotFound(f"Model {name!r} has no challenger {id!r}.", code="challenger_not_found")
