"""REPLACE: make a model exactly this, at once (import, reset)."""

from __future__ import annotations

from ..keys import REGISTRY, ModelKeys
from ..script import Arg, Script
from . import parts
from .create import listed, registry
from .runner import Runner

# KEYS: the model's state keys but ``pend`` (, the registry when LISTED is '1'); after the
# fixed arguments, counter field / value pairs. Returns {DONE}; the model's pending
# predictions become unknown (the epoch changed), though their keys, and so their count in
# ``pend``, stay until they expire.
SCRIPT = Script(
    "replace",
    keys=("meta", "snap", "log", "series", "ring", "recent", "curve"),
    args=("config", "epoch", "created", "version", "seen", "weights", "name", "listed"),
    rest_keys="registry",
    rest_args="counters",
    parts=(parts.REGISTER,),
    body="""
redis.call('DEL', META, SNAP, LOG, SERIES, RING, RECENT, CURVE)
redis.call('HSET', META, META_CONFIG, CONFIG, META_EPOCH, EPOCH, META_CREATED, CREATED,
  META_VERSION, VERSION, META_SEEN, SEEN, META_SNAP_VERSION, VERSION, META_SNAP_LENGTH, #WEIGHTS)
for i = COUNTERS_AT, #ARGV, 2 do redis.call('HSET', META, ARGV[i], ARGV[i + 1]) end
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
) -> None:
    """Make the model exactly this, at once (import and reset); old predictions lapse."""
    sharded = store.sharded
    pairs: list[Arg] = []
    for field, value in counters.items():
        pairs += [field, value]
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
        ),
    )
    if sharded:
        await store.client.sadd(REGISTRY, name)
