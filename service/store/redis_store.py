"""The one place that talks to Redis: models' configuration, counters, logs and predictions."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import ConnectionPool
from redis.exceptions import BusyLoadingError, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.contract.store_protocol import COUNTERS, RECENT_KEPT, Meta
from service.contract.store_values import MemoryUse, Observations
from service.store import usage
from service.store.keys import DEFAULT_MADE, REGISTRY, keys_of
from service.store.ops import (
    SCRIPTS,
    challenger_states,
    compact,
    create,
    defaults,
    delete,
    drift,
    feedback,
    forget,
    handover,
    history,
    learn,
    predict,
    promote,
    replace,
    rollback,
    sync,
    undo,
)
from service.store.script import Arg, Client, Script, raw, text


class NotSent(RedisConnectionError):
    """The store could not be reached before any of a command was sent: it did not run.

    Other connection errors and timeouts may come after a command was sent, and a write's
    reply lost: whether it ran is then unknown (:func:`reply_lost`)."""


def reply_lost(e: BaseException) -> bool:
    """Whether a command may have run though its caller got an error: the connection failed
    or timed out after it was sent. Not when it was never sent (NotSent), nor when Redis
    answered with an error (a refusal such as OOM or LOADING: scripts refuse before they
    write)."""
    return isinstance(e, RedisConnectionError | RedisTimeoutError) and not isinstance(
        e, NotSent | BusyLoadingError
    )


log = logging.getLogger("perceptron")


# Eviction policies that never drop a model's keys (those with no expiry): the volatile ones
# may only drop pending predictions, which then answer 404 like expired ones.
SAFE_POLICIES = ("noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl")


@dataclass(frozen=True, slots=True)
class Condition:
    """What keeps the store from serving, found by :meth:`Store.condition`; ok when no code."""

    code: str | None = None
    detail: str = ""
    policy: str | None = None

    @property
    def ok(self) -> bool:
        return self.code is None


# The fields of a model's meta hash that its metrics and checkpoints follow (the epoch first:
# without it there is no model).
STAMP_FIELDS = [
    Meta.EPOCH,
    Meta.VERSION,
    Meta.SNAP_VERSION,
    Meta.CHECKPOINTS,
    Meta.PAST_BASE,
    Meta.PAST_VERSION,
    *(c.name for c in COUNTERS if c.name not in (Meta.VERSION, Meta.SEEN, "updates")),
    Meta.SEEN,
    Meta.CHALLENGERS,  # (its challengers: how many, and each add, removal and promotion)
    Meta.CHALLENGER_GEN,
]


class Store:
    """Models in Redis. Every write is one Lua script, so it is atomic on its model: each
    operation, its script and its call, is a module of ``ops/``, and a method here."""

    create_model = create.create_model
    delete_model = delete.delete_model
    replace_model = replace.replace_model
    sync_data = sync.sync_data  # (before ``sync``, the operation, takes the module's name)
    read_log = sync.read_log
    sync = sync.sync
    commit_predictions = predict.commit_predictions
    commit_feedback = feedback.commit_feedback
    apply_defaults = defaults.apply_defaults
    commit_learn = learn.commit_learn
    read_background = drift.read_background
    compact = compact.compact
    # history (ops/history.py)
    read_history = history.read_history
    read_checkpoint = history.read_checkpoint
    read_updates = history.read_updates
    read_kept = history.read_kept
    read_sizes = history.read_sizes
    rollback = rollback.rollback
    undo_updates = undo.undo_updates
    forget_history = forget.forget_history
    # challengers (ops/challenger_states.py)
    read_challengers = challenger_states.read_challengers
    read_challengers_since = challenger_states.read_challengers_since
    add_challenger = challenger_states.add_challenger
    remove_challenger = challenger_states.remove_challenger
    fold_challengers = challenger_states.fold_challengers
    # a challenger promoted (ops/promote.py)
    hold_promotion = promote.hold_promotion
    renew_promotion = promote.renew_promotion
    release_promotion = promote.release_promotion
    promote = promote.promote
    # one writer per model (ops/learn.py)
    hand_off = handover.hand_off
    claim_writer = handover.claim_writer
    take_learns = handover.take_learns
    release_writer = handover.release_writer
    refuse_learn = handover.refuse_learn
    withdraw_learn = handover.withdraw_learn

    def __init__(self, client: Client, embedded: bool = False) -> None:
        self.client = client
        self.embedded = embedded
        self.said_lost: set[str] = set()
        self._scripts = {s.name: client.register_script(s.lua) for s in SCRIPTS}
        # Scripts go straight on a pooled connection (send_straight), but under a cluster, whose
        # client routes each command to its shard.
        self._pool = None if isinstance(client, RedisCluster) else client.connection_pool

    async def ping(self) -> bool:
        return bool(await self.client.ping())

    async def condition(self) -> Condition:
        """Whether this Redis may serve models: it answers, evicts no model, has memory left.

        Raises what the client raises when Redis does not answer.
        """
        await self.client.ping()
        if self.embedded:
            return Condition()
        nodes = list((await usage.memory_info(self.client)).values())
        for node in nodes:
            policy = str(node.get("maxmemory_policy", "noeviction"))
            if policy not in SAFE_POLICIES:
                return Condition(
                    "store_evicts_keys",
                    f"Redis's maxmemory-policy is {policy!r}: it may evict a model's weights "
                    "or log, so no model is served. Set maxmemory-policy to noeviction (or a "
                    "volatile-* policy) in Redis's configuration.",
                    policy,
                )
            limit, used = int(node.get("maxmemory", 0)), int(node.get("used_memory", 0))
            if limit and used >= limit and policy == "noeviction":
                return Condition(
                    "store_full",
                    f"Redis is at its maxmemory ({used} of {limit} bytes): writes are refused "
                    "until memory is freed or maxmemory raised.",
                    policy,
                )
        return Condition(policy=str(nodes[0].get("maxmemory_policy")) if nodes else None)

    async def read_memory(self) -> list[MemoryUse]:
        """Redis's memory used and maxmemory, per node; none for the embedded store."""
        return [] if self.embedded else await usage.read_memory(self.client)

    async def read_pending(self, models: Sequence[tuple[str, int]]) -> dict[str, int]:
        """Bytes each model (name, feedback_ttl_s) holds pending, as its cap counts them."""
        return await usage.read_pending(self.client, models)

    async def epochs(self, names: Sequence[str]) -> list[str | None]:
        """Each model's epoch (None: no such model), read in one round trip."""
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hget(keys_of(name).meta, Meta.EPOCH)
            replies = await pipe.execute()
        return [None if e is None else text(e) for e in replies]

    async def configs(self, names: Sequence[str]) -> list[tuple[str, str] | None]:
        """Each model's epoch and configuration (None: no such model), in one round trip."""
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hmget(keys_of(name).meta, [Meta.EPOCH, Meta.CONFIG])
            replies = await pipe.execute()
        return [
            None if epoch is None or config is None else (text(epoch), text(config))
            for epoch, config in replies
        ]

    async def default_made(self) -> bool:
        return bool(await self.client.exists(DEFAULT_MADE))

    async def mark_default_made(self) -> None:
        await self.client.set(DEFAULT_MADE, int(time.time()))

    async def drop_idle_connections(self) -> None:
        """After a connection error: the others in the pool are likely dead too."""
        pool = getattr(self.client, "connection_pool", None)
        if pool is not None:
            await pool.disconnect(inuse_connections=False)

    async def close(self) -> None:
        await self.client.aclose()

    @property
    def sharded(self) -> bool:
        """Under Redis Cluster the registry lives on another shard than a model's keys: no
        script can change both (ops/parts.REGISTER)."""
        return isinstance(self.client, RedisCluster)

    async def run(self, script: Script, keys: list[str], args: list[Arg]) -> Any:
        if self._pool is None:
            return await self._scripts[script.name](keys=keys, args=args)
        reply, _ = await self._send(script, keys, args)
        return reply

    async def lost(self, name: str) -> bool:
        """Whether the registry lists the name while its model has no meta (its keys were
        evicted): read together, in one transaction on one Redis, so that a model deleted or
        made anew meanwhile is never taken for a lost one."""
        keys = keys_of(name)
        if self.sharded:  # (two shards: no transaction spans both)
            listed = await self.client.sismember(REGISTRY, name)
            return bool(listed) and not await self.client.exists(keys.meta)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.sismember(REGISTRY, name)
            pipe.exists(keys.meta)
            listed, exists = await pipe.execute()
        return bool(listed) and not exists

    async def model_names(self) -> list[str]:
        names = await self.client.smembers(REGISTRY)
        return sorted(text(n) for n in names)

    async def read_meta(self, name: str) -> dict[str, str] | None:
        """The model's meta hash (config JSON, epoch, counters), or None without the model."""
        raw = await self.client.hgetall(keys_of(name).meta)
        if not raw:
            return None
        return {text(k): text(v) for k, v in raw.items()}

    async def read_stamp(self, name: str) -> tuple[bytes | str | None, ...] | None:
        """What changes whenever the model's figures do (its epoch, version, counters, and
        its history's checkpoints and start), in one HMGET; None without the model. An event
        stream reads it every ``PERCEPTRON_STREAM_POLL_S`` (api/routes/events.py)."""
        got = await self.client.hmget(keys_of(name).meta, STAMP_FIELDS)
        return None if got[0] is None else tuple(got)

    async def read_observations(self, name: str) -> Observations | None:
        """Everything the metrics are computed from, read in one round trip."""
        keys = keys_of(name)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.meta)
            pipe.get(keys.ring)
            pipe.hgetall(keys.series)
            pipe.lrange(keys.recent, 0, RECENT_KEPT - 1)  # it may hold more between trims
            pipe.hgetall(keys.curve)
            pipe.hgetall(keys.delays)
            pipe.zcard(keys.deadlines)
            meta, ring, series, recent, curve, delays, awaiting = await pipe.execute()
        if not meta:
            return None
        return Observations(
            meta={text(k): text(v) for k, v in meta.items()},
            ring=bytes(ring or b""),
            series={text(k): int(v) for k, v in series.items()},
            recent=list(recent),
            curve={text(k): int(v) for k, v in curve.items()},
            delays={text(k): int(v) for k, v in delays.items()},
            awaiting_default=int(awaiting),
        )

    async def run_with_wait(
        self,
        script: Script,
        keys: list[str],
        args: list[Arg],
        *,
        before: tuple[Arg, ...] | None = None,
        after: tuple[Arg, ...] | None = None,
        first: tuple[Arg, ...] | None = None,
    ) -> tuple[Any, Any]:
        """``script`` with a blocking wait command sent ``before`` or ``after`` it, on one
        connection in one round trip: (the script's reply, the wait's; None without one);
        ``first``: a plain write sent ahead of both, whose error is raised. Each
        new connection loaded it (store/connect.py); one Redis no longer holds all the same
        (SCRIPT FLUSH) is loaded, and they are all sent again: it did not run.
        (redis-py's own scripts ask SCRIPT EXISTS before a pipeline, one more round trip; a
        cluster's client pipelines no script: there, two round trips.)"""
        if not script.waited:
            raise ValueError(f"{script.name} is not declared waited: new connections skip it")
        if before is None and after is None and first is None:
            return await self.run(script, keys, args), None
        if self._pool is None:
            if first:
                await self.client.execute_command(*first)
            got = await self.client.execute_command(*before) if before else None
            reply = await self.run(script, keys, args)
            if after:
                got = await self.client.execute_command(*after)
            return reply, got
        return await self._send(
            script=script, keys=keys, args=args, first=first, before=before, after=after
        )

    async def _send(
        self,
        script: Script,
        keys: list[str],
        args: list[Arg],
        *,
        first: tuple[Arg, ...] | None = None,
        before: tuple[Arg, ...] | None = None,
        after: tuple[Arg, ...] | None = None,
    ) -> tuple[Any, Any]:
        """``run_with_wait``'s commands, sent on a pooled connection (``send_straight``)."""
        assert self._pool is not None
        evalsha = ("EVALSHA", self._scripts[script.name].sha, len(keys), *keys, *args)
        commands = [c for c in (first, before, evalsha, after) if c is not None]
        at = (first is not None) + (before is not None)
        for _ in range(2):
            replies = await send_straight(self._pool, commands)
            reply = replies[at]
            got = replies[at - 1] if before else replies[at + 1] if after else None
            if isinstance(reply, NoScriptError):
                await self.client.script_load(script.lua)
                continue
            for r in replies:
                if isinstance(r, Exception):
                    raise r
            return reply, got
        raise NoScriptError("the script could not be loaded")

    async def wait_answer(self, name: str, token: str, wait_s: float) -> bytes | None:
        got = await self.client.blpop([keys_of(name).answer(token)], timeout=wait_s)
        return None if got is None else raw(got[1])


# Commands sent straight on a connection of the pool, in one write, their replies read back.
#
# redis-py's client wraps each command in what the store uses none of: a retry policy (none
# here, ``connect.open_client``), observability hooks, per-command response callbacks, and for
# pipelines a stack of command objects: a ninth of the CPU of a script's round trip alone, a
# fifth of one behind a blocking wait (figure 21 of docs/performance.md). The store's scripts
# (one writer's commits and takes, and every request's script) are sent this way on a Redis that
# is not a cluster: the same pooled connections (``connect.ReadyConnectionPool``, which hands out
# only connections fit to carry a command, else NotSent), the same packed bytes, and the same
# errors, since a connection raises and disconnects itself on its own failures (a reply lost, a
# timeout, a cancelled read) as it does under the client.
async def send_straight(pool: ConnectionPool, commands: Sequence[Sequence[Arg]]) -> list[Any]:
    """Each command's reply, or the ResponseError Redis answered it with (then it did not
    run): ``commands`` sent in one write on one pooled connection. A failure of the
    connection itself is raised: NotSent when none could be had, before anything was written;
    after that, what was sent may have run (``redis_store.reply_lost``)."""
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await connection.send_packed_command(connection.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await connection.read_response())
            except ResponseError as e:  # (read whole: the next reply follows it)
                replies.append(e)
        return replies
    finally:
        await pool.release(connection)
