"""REPLACE: make a model exactly this, at once (import, reset)."""

from __future__ import annotations

from collections.abc import Sequence

from ..keys import REGISTRY, ModelKeys
from ..script import Arg, Script
from . import parts
from .create import listed, registry
from .history import HISTORY_KEYS
from .runner import Runner

# KEYS: the model's state keys but ``pend``, and its history's (, the registry when LISTED is
# '1'); after the fixed arguments, N_COUNTERS counter field / value pairs, then the (record,
# packed weights) of each checkpoint an import file carries, oldest first, each kept under the
# next id. A model there already is kept first as a checkpoint (its snapshot and log,
# REASON), and its retained log goes. Returns
# {DONE}; the model's pending predictions become unknown (the epoch changed), though their
# keys, and so their count in ``pend``, stay until they expire.
SCRIPT = Script(
    "replace",
    keys=("meta", "snap", "log", "series", "ring", "recent", "curve", *HISTORY_KEYS),
    args=(
        "config",
        "epoch",
        "created",
        "version",
        "seen",
        "weights",
        "name",
        "listed",
        "now_ms",
        "reason",
        "n_counters#",
    ),  # fmt: skip
    rest_keys="registry",
    rest_args="counters",
    parts=(parts.REGISTER, parts.CHECKPOINT),
    body="""
local made = false
local st = redis.call('HMGET', META, META_VERSION, META_SNAP_VERSION)
if st[1] then
  made = checkpoint(META, CHECKPOINTS, CHECKPOINT_INFO, CHECKPOINT_TAILS, RING,
    redis.call('GET', SNAP) or '', redis.call('LRANGE', LOG, 0, -1), st[2], st[1], NOW_MS,
    REASON)
end
redis.call('DEL', META, SNAP, LOG, SERIES, RING, RECENT, CURVE, PAST)
if made then redis.call('HSET', META, META_CHECKPOINTS, made) end
redis.call('HSET', META, META_CONFIG, CONFIG, META_EPOCH, EPOCH, META_CREATED, CREATED,
  META_VERSION, VERSION, META_SEEN, SEEN, META_SNAP_VERSION, VERSION, META_SNAP_LENGTH, #WEIGHTS)
local checkpoints_at = COUNTERS_AT + 2 * N_COUNTERS
for i = COUNTERS_AT, checkpoints_at - 1, 2 do redis.call('HSET', META, ARGV[i], ARGV[i + 1]) end
for i = checkpoints_at, #ARGV, 2 do
  local id = redis.call('HINCRBY', META, META_CHECKPOINTS, 1)
  redis.call('HSET', CHECKPOINT_INFO, id, ARGV[i])
  redis.call('HSET', CHECKPOINTS, id, ARGV[i + 1])
end
if WEIGHTS ~= '' then redis.call('SET', SNAP, WEIGHTS) end
register(LISTED, KEYS[REGISTRY_AT], NAME)
return {DONE}
""",
)


async def replace(
    store: Runner,
    name: str,
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
) -> None:
    """Make the model exactly this, at once (import and reset); old predictions lapse.
    ``checkpoints``: (record, packed weights) of those an import file carries."""
    sharded = store.sharded
    pairs: list[Arg] = []
    for field, value in counters.items():
        pairs += [field, value]
    for record, packed in checkpoints:
        pairs += [record, packed]
    await store.run(
        SCRIPT,
        SCRIPT.key_list(ModelKeys(name), rest=registry(sharded)),
        SCRIPT.arg_list(
            pairs,
            config=config_json,
            epoch=epoch,
            created=created,
            version=version,
            seen=seen,
            weights=weights,
            name=name,
            listed=listed(sharded),
            now_ms=now_ms,
            reason=reason,
            n_counters=len(counters),
        ),
    )
    if sharded:
        await store.client.sadd(REGISTRY, name)
