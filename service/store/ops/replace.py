"""REPLACE: make a model exactly this, at once (import, reset)."""

from __future__ import annotations

from collections.abc import Sequence

from service.contract.store_protocol import Status
from service.errors import ModelBusy
from service.store.keys import REGISTRY, keys_of
from service.store.ops import blobs, parts
from service.store.ops.create import listed, registry
from service.store.ops.history import HISTORY_KEYS
from service.store.script import Arg, Runner, Script, has_challengers

# KEYS: the model's state keys but ``pend``, its history's, STAGE (the packed weights, LENGTH bytes
# in CHUNKS chunks, blobs.py), then the staged packed weights of each checkpoint an import file
# carries (, the registry when LISTED is '1'); after the fixed arguments, N_COUNTERS counter field /
# value pairs, the N_BACKGROUND examples of a retraining's background learner (``drift.py``), then
# the (record, chunks of its staged weights) of each of those checkpoints, oldest first, each kept
# under the next id. A model there already is kept first as a checkpoint (its
# snapshot, moved, and log, REASON), and its retained log goes; the outcomes of the SEEN examples
# it counts are RING_UNKNOWN in its ring (a file does not carry them). Returns {DONE}, or
# {NOT_STAGED} when a staged key is not whole (nothing done; the staged keys are let go), or
# {HAS_CHALLENGERS} while the model has challengers (nothing done:
# ``challenger_states.py``); the model's pending predictions become unknown (the epoch
# changed), none awaits a default any more (``deadlines`` goes, with the delays counted),
# though their keys, and so their count in ``pend``, stay until they expire.
SCRIPT = Script(
    "replace",
    keys=(
        "meta",
        "snap",
        "log",
        "series",
        "ring",
        "recent",
        "curve",
        "deadlines",
        "delays",
        *HISTORY_KEYS,
        "stage",
        "blog",
    ),  # fmt: skip
    args=(
        "config",
        "epoch",
        "created",
        "version",
        "seen",
        "length#",
        "chunks#",
        "name",
        "listed",
        "now_ms",
        "reason",
        "n_counters#",
        "n_background#",
    ),  # fmt: skip
    rest_keys="staged",
    rest_args="counters",
    parts=(parts.REGISTER, parts.WEIGHTS, parts.CHECKPOINT),
    body="""
local background_at = COUNTERS_AT + 2 * N_COUNTERS
local checkpoints_at = background_at + N_BACKGROUND
local carried = (#ARGV - checkpoints_at + 1) / 2
local whole = staged(STAGE, CHUNKS)
if tonumber(redis.call('HGET', META, META_CHALLENGERS) or '0') > 0 then whole = false end
for c = 0, carried - 1 do
  whole = whole and staged(KEYS[STAGED_AT + c], tonumber(ARGV[checkpoints_at + 2 * c + 1]))
end
if not whole then
  let_go(STAGE)
  for c = 0, carried - 1 do let_go(KEYS[STAGED_AT + c]) end
  if tonumber(redis.call('HGET', META, META_CHALLENGERS) or '0') > 0 then
    return {HAS_CHALLENGERS}
  end
  return {NOT_STAGED}
end
local made = false
local st = redis.call('HMGET', META, META_VERSION, META_SNAP_VERSION, META_SNAP_LENGTH)
if st[1] then
  made = checkpoint(META, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING, SNAP,
    weights_bytes(SNAP, st[3]), redis.call('LRANGE', LOG, 0, -1), st[2], st[1], NOW_MS, REASON)
end
redis.call('DEL', META, LOG, SERIES, RING, RECENT, CURVE, PAST, DEADLINES, DELAYS, BLOG)
let_go(SNAP)
if made then redis.call('HSET', META, META_CHECKPOINTS, made) end
redis.call('HSET', META, META_CONFIG, CONFIG, META_EPOCH, EPOCH, META_CREATED, CREATED,
  META_VERSION, VERSION, META_SEEN, SEEN, META_SNAP_VERSION, VERSION, META_SNAP_LENGTH, LENGTH)
for i = COUNTERS_AT, background_at - 1, 2 do redis.call('HSET', META, ARGV[i], ARGV[i + 1]) end
for i = background_at, checkpoints_at - 1, UNPACK_CHUNK do
  redis.call('RPUSH', BLOG, unpack(ARGV, i, math.min(i + UNPACK_CHUNK - 1, checkpoints_at - 1)))
end
if checkpoints_at > background_at then
  local held = 0
  for i = background_at, checkpoints_at - 1 do held = held + #ARGV[i] end
  redis.call('HSET', META, META_BLOG_BYTES, held)
end
local counted = tonumber(redis.call('HGET', META, META_SEEN))  -- (its counters' own, if any)
if counted > 0 then  -- the outcomes of the examples it counts are not known here
  redis.call('SET', RING, string.rep(RING_UNKNOWN, math.min(counted, WINDOW)))
end
for c = 0, carried - 1 do
  local id = redis.call('HINCRBY', META, META_CHECKPOINTS, 1)
  redis.call('HSET', CHECKPOINT_INFO, id, ARGV[checkpoints_at + 2 * c])
  move_weights(KEYS[STAGED_AT + c], weights_key(CHECKPOINTS, id))
end
move_weights(STAGE, SNAP)
register(LISTED, KEYS[STAGED_AT + carried], NAME)
return {DONE}
""",
)


async def replace_model(
    store: Runner,
    name: str,
    *,
    config_json: str,
    epoch: str,
    created: int,
    version: int,
    seen: int,
    weights: bytes,
    counters: dict[str, str],
    now_ms: int,
    reason: str,
    checkpoints: Sequence[tuple[str, bytes]] = (),
    background: Sequence[bytes] = (),
) -> None:
    """Make the model exactly this, at once (import and reset); old predictions lapse.
    ``checkpoints``: (record, packed weights) of those an import file carries; ``background``:
    the examples of its background learner (a retraining's)."""
    sharded = store.sharded
    keys = keys_of(name)
    stage, *staged = await blobs.stage(
        store.client, keys, weights, *(packed for _, packed in checkpoints)
    )
    pairs: list[Arg] = []
    for field, value in counters.items():
        pairs += [field, value]
    pairs += background
    for record, packed in checkpoints:
        pairs += [record, blobs.chunks(len(packed))]
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(keys, {"stage": stage}, rest=[*staged, *registry(sharded)]),
        SCRIPT.arg_list(
            pairs,
            config=config_json,
            epoch=epoch,
            created=created,
            version=version,
            seen=seen,
            length=len(weights),
            chunks=blobs.chunks(len(weights)),
            name=name,
            listed=listed(sharded),
            now_ms=now_ms,
            reason=reason,
            n_counters=len(counters),
            n_background=len(background),
        ),
    )
    if int(reply[0]) == Status.HAS_CHALLENGERS:
        raise has_challengers(name)
    if int(reply[0]) == Status.NOT_STAGED:
        raise ModelBusy(f"Model {name!r}'s weights were not all written; retry.")
    if sharded:
        await store.client.sadd(REGISTRY, name)
