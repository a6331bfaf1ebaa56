"""FORGET: let a model's old history go, as ``service/admin/retention.py`` chose."""

from __future__ import annotations

from service.contract.store_protocol import Status
from service.store.keys import keys_of
from service.store.ops import parts
from service.store.ops.history import HISTORY_KEYS
from service.store.script import Arg, Runner, Script

# Let old history go, once the model is still EPOCH with its retained log from BASE (''
# none): the retained log then starts at checkpoint NEW_BASE, of version NEW_VERSION, and
# the checkpoints listed after the fixed arguments go. Returns {DONE}, or {UNCHANGED} when
# the model moved meanwhile (nothing done).
SCRIPT = Script(
    "forget",
    keys=("meta", *HISTORY_KEYS),
    args=("epoch", "base", "new_base", "new_version#"),
    rest_args="ids",
    parts=(parts.WEIGHTS,),
    body="""
local st = redis.call('HMGET', META, META_EPOCH, META_PAST_BASE, META_PAST_VERSION)
if st[1] ~= EPOCH or (st[2] or '') ~= BASE then return {UNCHANGED} end
if NEW_BASE ~= BASE then
  redis.call('LTRIM', PAST, NEW_VERSION - tonumber(st[3]), -1)
  redis.call('HSET', META, META_PAST_BASE, NEW_BASE, META_PAST_VERSION, NEW_VERSION)
end
for i = IDS_AT, #ARGV do
  drop_weights(CHECKPOINTS, ARGV[i])
  redis.call('HDEL', CHECKPOINT_INFO, ARGV[i])
  redis.call('HDEL', CHECKPOINT_TAILS, ARGV[i])
end
return {DONE}
""",
)


async def forget_history(
    store: Runner,
    name: str,
    *,
    epoch: str,
    base: int | None,
    new_base: int | None,
    new_version: int,
    ids: list[int],
) -> bool:
    """Let the history go that ``service/admin/retention.py`` chose; whether it went."""
    rest: list[Arg] = [str(i) for i in ids]
    reply = await store.run(
        SCRIPT,
        SCRIPT.key_list(keys_of(name)),
        SCRIPT.arg_list(
            rest,
            epoch=epoch,
            base="" if base is None else str(base),
            new_base="" if new_base is None else str(new_base),
            new_version=new_version,
        ),
    )
    return int(reply[0]) == Status.DONE
