"""PROMOTE: a challenger serves, its weights exactly as they are, and the learner that served
becomes a challenger; in one step, while the model is held (``models/promotions.py``).

The promotion first holds the model (HOLD): no learn commit, feedback that labels anything, or
default-label sweep runs on it until the promotion lets go (SWAP, RELEASE) or PROMOTE_HOLD_MS
pass, should its worker die (a large model's promotion renews it between its steps, RENEW). So
the challengers it replays stand at the end of the labels'
log when it swaps, and the labels that come meanwhile wait and are learned by the promoted
learner, none lost nor learned twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.contract.store_protocol import PROMOTIONS_KEPT, Status
from service.contract.store_values import Held
from service.errors import Conflict, ModelBusy
from service.store.keys import keys_of
from service.store.ops import blobs, parts
from service.store.ops.challenger_states import (
    CHALLENGER_WEIGHTS,
    Tail,
    challenger_exists,
    challenger_not_found,
    stage_states,
)
from service.store.ops.history import HISTORY_KEYS
from service.store.script import Runner, Script, status_of, text

# Hold the model for promoting challenger ID: {DONE}, {HELD, ms left} while its writer or another
# promotion holds it, {UNKNOWN} (no such challenger) or NO_MODEL. (SWAP checks all the rest.)
HOLD = Script(
    "promote_hold",
    keys=("meta", "hold", "chal"),
    args=("id",),
    body="""
if redis.call('EXISTS', META) == 0 then return {NO_MODEL} end
if redis.call('HEXISTS', CHAL, ID) == 0 then return {UNKNOWN} end
local left = redis.call('PTTL', HOLD)
if left > 0 then return {HELD, left} end
redis.call('SET', HOLD, PROMOTING, 'PX', PROMOTE_HOLD_MS)
return {DONE}
""",
)

# Keep a promotion's hold PROMOTE_HOLD_MS more, between the steps of a large model's promotion:
# {DONE}, or {UNCHANGED} when no promotion holds the model any more (it lapsed).
RENEW = Script(
    "promote_renew",
    keys=("hold",),
    args=(),
    body="""
if tonumber(redis.call('GET', HOLD) or '0') < PROMOTING then return {UNCHANGED} end
redis.call('PEXPIRE', HOLD, PROMOTE_HOLD_MS)
return {DONE}
""",
)

# Let go of a promotion's hold, waking the calls that waited on it: {DONE}, or {UNCHANGED}
# when no promotion holds the model.
RELEASE = Script(
    "promote_release",
    keys=("hold", "wake"),
    args=(),
    parts=(parts.WAKE,),
    body="""
local h = tonumber(redis.call('GET', HOLD) or '0')
if h < PROMOTING then return {UNCHANGED} end
redis.call('DEL', HOLD)
wake(WAKE, h - PROMOTING)
return {DONE}
""",
)

# Challenger ID serves: the model was read at EPOCH, VERSION and SEEN, its challengers at GEN with
# the labels' log ending at label POSITION. Once all still so: a checkpoint of the model as it is
# (its snapshot, moved, and its log); then a new epoch (every worker loads the model again; the
# predictions of EPOCH stay this model's while their records may live, KEEP_MS from NOW_MS:
# Meta.PREV_EPOCH keeps it with those of the promotions before whose records may still live),
# CONFIG, the weights staged at STAGE (LENGTH bytes in CHUNKS chunks, blobs.py) as its snapshot at
# NEW_VERSION, the promoted learner's counts (NEW_SEEN, MISTAKES, N_DEFAULTED, N_DEFAULTED_MISTAKES;
# NEW_OFFSET, the labels counted that its learner's own count leaves out: Meta.SEEN_OFFSET;
# RING_MARKS, its last outcomes; the learning curve and the confusion matrix start again, the
# retained log goes), its drift detector (DRIFT_STATE and DRIFT_EVENTS, as Meta.DRIFT_STATE and
# Meta.DRIFT_EVENTS hold them; '' a fresh one); ID leaves the challengers and the learner that
# served joins them as DEMOTED ('': "served-<the checkpoint's id>") with DEMOTED_CONFIG and
# DEMOTED_TAIL (its weights staged at DEMOTED_WEIGHTS in DEMOTED_CHUNKS chunks); every other
# challenger's state is the one after the fixed arguments ((id, tail, chunks) triples, each tail's
# weights staged at the key of the same place after the fixed keys) at POSITION, and the log starts
# there. Lets go of the hold. Returns {DONE, the checkpoint's id, the demoted id}; {UNCHANGED},
# {UNKNOWN} (no challenger ID), {NAME_TAKEN} (the id the learner that served would take is a
# challenger's), {TOO_MANY} (PROMOTIONS_KEPT promotions' predictions may still live) or
# {NOT_STAGED}, each with that id after it: nothing done, the hold kept. The staged key is let go
# whatever happens.
SWAP = Script(
    "promote",
    keys=(
        "meta",
        "snap",
        "log",
        *HISTORY_KEYS,
        "ring",
        "curve",
        "hold",
        "wake",
        "chal",
        "cstate",
        "clog",
        "cweights",
        "stage",
        "demoted_weights",
        "blog",
    ),  # fmt: skip
    args=(
        "epoch",
        "new_epoch",
        "version#",
        "seen#",
        "gen",
        "position#",
        "id",
        "config",
        "new_version#",
        "new_seen#",
        "new_offset#",
        "mistakes#",
        "n_defaulted#",
        "n_defaulted_mistakes#",
        "ring_marks",
        "length#",
        "chunks#",
        "demoted",
        "demoted_config",
        "demoted_tail",
        "demoted_chunks#",
        "now_ms",
        "keep_ms#",
        "drift_state",
        "drift_events",
    ),  # fmt: skip
    rest_keys="weights",
    rest_args="states",
    parts=(parts.WEIGHTS, parts.CHECKPOINT, parts.WAKE, CHALLENGER_WEIGHTS),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_VERSION, META_SEEN, META_SNAP_VERSION,
  META_SNAP_LENGTH, META_CHALLENGER_GEN, META_CHALLENGER_BASE, META_CHECKPOINTS, META_PREV_EPOCH)
local previous = {}  -- the epochs before promotions whose records may still live
for e, ms in string.gmatch(st[9] or '', '(%x+):(%d+),') do
  if tonumber(ms) + KEEP_MS > tonumber(NOW_MS) then
    previous[#previous + 1] = e .. ':' .. ms .. ','
  end
end
local demoted = DEMOTED
if demoted == '' then  -- served-<the checkpoint's id>, or the first free served-<id>-<k>
  demoted = 'served-' .. string.format('%d', tonumber(st[8] or '0') + 1)
  for k = 2, PROMOTIONS_KEPT + 2 do
    if demoted == ID or redis.call('HEXISTS', CHAL, demoted) == 0 then break end
    demoted = 'served-' .. string.format('%d-%d', tonumber(st[8] or '0') + 1, k)
  end
end
do  -- (a promotion refused: nothing changes)
  local refused = nil
  if not st[1] then refused = NO_MODEL
  elseif st[1] ~= EPOCH then refused = STALE_EPOCH
  elseif tonumber(st[2]) ~= VERSION or tonumber(st[3]) ~= SEEN or (st[6] or '0') ~= GEN
      or tonumber(st[7] or '0') + redis.call('LLEN', CLOG) ~= POSITION then refused = UNCHANGED
  elseif redis.call('HEXISTS', CHAL, ID) == 0 then refused = UNKNOWN
  elseif demoted ~= ID and redis.call('HEXISTS', CHAL, demoted) == 1 then refused = NAME_TAKEN
  elseif #previous >= PROMOTIONS_KEPT then refused = TOO_MANY
  elseif not (staged(STAGE, CHUNKS) and staged(DEMOTED_WEIGHTS, DEMOTED_CHUNKS)
      and all_staged(WEIGHTS_AT, STATES_AT)) then refused = NOT_STAGED
  end
  if refused then
    let_go(STAGE)
    let_go(DEMOTED_WEIGHTS)
    let_all_go(WEIGHTS_AT)
    return {refused, demoted}
  end
end
local before = checkpoint(META, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING, SNAP,
  weights_bytes(SNAP, st[5]), redis.call('LRANGE', LOG, 0, -1), st[4], st[2], NOW_MS,
  REASON_BEFORE_PROMOTION)
redis.call('DEL', LOG, PAST, CURVE)
move_weights(STAGE, SNAP)
st = {META_PAST_BASE, META_PAST_VERSION, META_PAST_IN, META_SEEN_OFFSET}  -- (read: now
for _, field in ipairs(redis.call('HKEYS', META)) do  -- the fields that go)
  if string.sub(field, 1, #FIELD_CELL) == FIELD_CELL then st[#st + 1] = field end
end
for i = 1, #st, UNPACK_CHUNK do
  redis.call('HDEL', META, unpack(st, i, math.min(i + UNPACK_CHUNK - 1, #st)))
end
redis.call('SET', RING, RING_MARKS)
previous[#previous + 1] = EPOCH .. ':' .. NOW_MS .. ','
redis.call('HSET', META, META_EPOCH, NEW_EPOCH, META_PREV_EPOCH, table.concat(previous),
  META_CONFIG, CONFIG,
  META_VERSION, NEW_VERSION, META_SEEN, NEW_SEEN, META_SNAP_VERSION, NEW_VERSION,
  META_SNAP_LENGTH, LENGTH, META_CHECKPOINT_VERSION, NEW_VERSION, COUNT_MISTAKES, MISTAKES,
  COUNT_DEFAULTED, N_DEFAULTED, COUNT_DEFAULTED_MISTAKES, N_DEFAULTED_MISTAKES)
if NEW_OFFSET > 0 then redis.call('HSET', META, META_SEEN_OFFSET, NEW_OFFSET) end
redis.call('DEL', BLOG)  -- (a retraining's background learner starts afresh)
redis.call('HDEL', META, META_BLOG_BYTES)
if DRIFT_STATE == '' then redis.call('HDEL', META, META_DRIFT_STATE, META_DRIFT_EVENTS)
else redis.call('HSET', META, META_DRIFT_STATE, DRIFT_STATE, META_DRIFT_EVENTS, DRIFT_EVENTS) end
if NEW_SEEN > 0 then
  redis.call('HSET', CURVE, FIELD_EVERY, '1', string.format('%d', NEW_SEEN), MISTAKES)
end
local at = string.format('%d', POSITION) .. ' '
redis.call('HDEL', CHAL, ID)
redis.call('HDEL', CSTATE, ID)
forget_weights(CWEIGHTS, ID)  -- (its weights serve: they were staged as the snapshot's)
redis.call('HSET', CHAL, demoted, DEMOTED_CONFIG)
redis.call('HSET', CSTATE, demoted, at .. DEMOTED_TAIL)
keep_weights(CWEIGHTS, demoted, DEMOTED_WEIGHTS, DEMOTED_CHUNKS)
keep_states(CSTATE, CWEIGHTS, STATES_AT, WEIGHTS_AT, at)
redis.call('DEL', CLOG)
redis.call('HSET', META, META_CHALLENGER_BASE, POSITION)
redis.call('HINCRBY', META, META_CHALLENGER_GEN, 1)
local h = tonumber(redis.call('GET', HOLD) or '0')
if h >= PROMOTING then
  redis.call('DEL', HOLD)
  wake(WAKE, h - PROMOTING)
end
return {DONE, before, demoted}
""",
)
# What to do when the id the learner that served would take is a challenger's already.
DEMOTED_NAME_TAKEN = (
    "name the learner that served with another 'demote_as', or delete that challenger first"
)


@dataclass(frozen=True, slots=True)
class Promotion:
    """What SWAP is given: the model and its challengers as read, and what they become."""

    epoch: str
    new_epoch: str
    version: int
    seen: int
    gen: str
    position: int
    id: str
    config: str  # the promoted learner's configuration JSON
    weights: bytes  # its packed weights
    new_version: int
    new_seen: int
    new_offset: int  # the labels counted that its learner's own count leaves out
    mistakes: int
    defaulted: int
    defaulted_mistakes: int
    ring: bytes  # its last outcomes, as the model's ring holds them
    demoted: str  # the id of the learner that served ('': "served-<checkpoint>")
    demoted_config: str
    demoted_tail: Tail  # (its id: DEMOTED's)
    states: list[Tail]  # every other challenger's
    now_ms: int
    keep_ms: int  # how long the model's pending records live (protocol.pending_life_s)
    drift_state: str = ""  # the promoted learner's detector, as the model's hash keeps it
    drift_events: str = ""  # ('': a fresh detector, or none)


async def hold_promotion(store: Runner, name: str, id: str) -> Held | None:
    """Hold the model for a promotion of challenger ``id``; Held while another holds it."""
    k = keys_of(name)
    reply = await store.run(HOLD, HOLD.key_list(k), HOLD.arg_list(id=id))
    status = status_of(store, name, reply)
    if status == Status.UNKNOWN:
        raise challenger_not_found(name, id)
    return Held(int(reply[1])) if status == Status.HELD else None


async def renew_promotion(store: Runner, name: str) -> bool:
    """Whether a promotion still holds the model; its hold is then PROMOTE_HOLD_MS more."""
    k = keys_of(name)
    reply = await store.run(RENEW, RENEW.key_list(k), RENEW.arg_list())
    return int(reply[0]) == Status.DONE


async def release_promotion(store: Runner, name: str) -> None:
    """Let go of a promotion's hold (nothing when none holds the model)."""
    k = keys_of(name)
    await store.run(RELEASE, RELEASE.key_list(k), RELEASE.arg_list())


async def promote(store: Runner, name: str, p: Promotion) -> tuple[int, str] | None:
    """Make the promotion: (the checkpoint's id, the demoted learner's id); None when the
    model or its challengers moved since they were read (nothing done)."""
    k = keys_of(name)
    (stage,) = await blobs.stage(store.client, k, p.weights)
    # (the demoted learner's weights first, then the others')
    staged = await stage_states(store, name, [p.demoted_tail, *p.states])
    if not await renew_promotion(store, name):  # (the hold lapsed while the weights were written)
        await store.client.unlink(stage, *staged.keys)
        return None
    reply = await store.run(
        SWAP,
        SWAP.key_list(k, {"stage": stage, "demoted_weights": staged.keys[0]}, staged.keys[1:]),
        SWAP.arg_list(
            staged.args[3:],
            epoch=p.epoch,
            new_epoch=p.new_epoch,
            version=p.version,
            seen=p.seen,
            gen=p.gen,
            position=p.position,
            id=p.id,
            config=p.config,
            new_version=p.new_version,
            new_seen=p.new_seen,
            new_offset=p.new_offset,
            mistakes=p.mistakes,
            n_defaulted=p.defaulted,
            n_defaulted_mistakes=p.defaulted_mistakes,
            ring_marks=p.ring,
            length=len(p.weights),
            chunks=blobs.chunks(len(p.weights)),
            demoted=p.demoted,
            demoted_config=p.demoted_config,
            demoted_tail=p.demoted_tail.head,
            demoted_chunks=blobs.chunks(len(p.demoted_tail.weights)),
            now_ms=p.now_ms,
            keep_ms=p.keep_ms,
            drift_state=p.drift_state,
            drift_events=p.drift_events,
        ),
    )
    status = status_of(store, name, reply)
    if status == Status.UNKNOWN:
        raise challenger_not_found(name, p.id)
    if status == Status.NAME_TAKEN:
        raise challenger_exists(name, text(reply[1]), DEMOTED_NAME_TAKEN)
    if status == Status.TOO_MANY:
        raise Conflict(
            f"Model {name!r} was promoted {PROMOTIONS_KEPT} times within the life a prediction "
            "has (feedback_ttl_s; a prediction made before each promotion stays labelable that "
            "long, whether any was made or not): wait for the oldest promotion to pass it, or "
            "roll back or reset the model (with its challengers deleted first).",
            code="too_many_promotions",
        )
    if status == Status.NOT_STAGED:
        raise ModelBusy(f"Model {name!r}'s promoted weights were not all written; retry.")
    if status == Status.UNCHANGED:
        return None
    return int(reply[1]), text(reply[2])
