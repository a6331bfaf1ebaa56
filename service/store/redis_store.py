"""The one place that talks to Redis: models' configuration, counters, logs and predictions."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import BusyLoadingError, NoScriptError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import (
    ModelBusy,
    ModelNotFound,
    ModelStateLost,
    NotWriter,
    OutcomeUnknown,
    StaleModel,
    TooManyPending,
)
from ..protocol import (
    QUEUE_KEEP_S,
    RECENT_KEPT,
    Bucket,
    FeedbackBatch,
    FeedbackItem,
    Held,
    LearnBatch,
    LearnResult,
    Lease,
    Made,
    Meta,
    Observations,
    RequestsGone,
    Status,
    SyncData,
)
from . import scripts
from .keys import DEFAULT_MADE, REGISTRY, ModelKeys

Client = Redis | RedisCluster


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


PURGE_BATCH = 1000  # pending predictions a deleted model's purge scans for and deletes at once
log = logging.getLogger("perceptron")
Arg = bytes | str | int | float


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


def _feedback_item(status: int, mistake: int, updated: int, version: int) -> FeedbackItem:
    s = Status(status)
    if s == Status.CONFLICT:
        return FeedbackItem(s, False, False, -1, given=version)
    return FeedbackItem(s, bool(mistake), bool(updated), version)


def _bytes(v: bytes | str) -> bytes:
    return v if isinstance(v, bytes) else v.encode()


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


READ_ATTEMPTS = 20  # reads of a log that compaction moved meanwhile, before giving up


class Store:
    """Models in Redis. Every write is one Lua script, so it is atomic on its model."""

    def __init__(self, client: Client, embedded: bool = False) -> None:
        self.client = client
        self.embedded = embedded
        self._said_lost: set[str] = set()
        self._create = client.register_script(scripts.CREATE)
        self._delete = client.register_script(scripts.DELETE)
        self._sync = client.register_script(scripts.SYNC)
        self._predict = client.register_script(scripts.PREDICT)
        self._feedback = client.register_script(scripts.FEEDBACK)
        self._learn = client.register_script(scripts.LEARN)
        self._compact = client.register_script(scripts.COMPACT)
        self._replace = client.register_script(scripts.REPLACE)
        self._handoff = client.register_script(scripts.HANDOFF)
        self._claim = client.register_script(scripts.CLAIM)
        self._take = client.register_script(scripts.TAKE)
        self._release = client.register_script(scripts.RELEASE)
        self._refuse = client.register_script(scripts.REFUSE)
        self._withdraw = client.register_script(scripts.WITHDRAW)
        self._purge = client.register_script(scripts.PURGE)

    async def ping(self) -> bool:
        return bool(await self.client.ping())

    async def condition(self) -> Condition:
        """Whether this Redis may serve models: it answers, evicts no model, has memory left.

        Raises what the client raises when Redis does not answer.
        """
        await self.client.ping()
        if self.embedded:
            return Condition()
        info = await self.client.info("memory")
        # A cluster client answers per node: {node: info}; a plain one, the info itself.
        nodes = [info] if "maxmemory_policy" in info else [v for v in info.values() if v]
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

    async def epochs(self, names: Sequence[str]) -> list[str | None]:
        """Each model's epoch (None: no such model), read in one round trip."""
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hget(ModelKeys(name).meta, Meta.EPOCH)
            replies = await pipe.execute()
        return [None if e is None else _str(e) for e in replies]

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
    def _sharded(self) -> bool:
        """Under Redis Cluster the registry lives on another shard than a model's keys: no
        script can change both (scripts._REGISTER)."""
        return isinstance(self.client, RedisCluster)

    def _registry(self) -> tuple[list[str], list[Arg]]:
        """The keys and the last argument that let a script change the registry too."""
        return ([], ["0"]) if self._sharded else ([REGISTRY], ["1"])

    async def create_model(self, name: str, config_json: str, epoch: str) -> str | None:
        """Create the model and list it, together; returns None when created, else the
        existing config JSON."""
        keys = ModelKeys(name)
        registry, flag = self._registry()
        if self._sharded:  # listed before and after: a concurrent DELETE cannot unlist it
            await self.client.sadd(REGISTRY, name)
        try:
            reply = await self._create(
                keys=[keys.meta, *registry],
                args=[config_json, epoch, int(time.time()), name, *flag],
            )
        except RedisError:
            if self._sharded:  # listed, yet not made (a full shard): unlisted, unless made
                with suppress(RedisError):  # meanwhile by another PUT, which lists it after
                    if not await self.client.exists(keys.meta):
                        await self.client.srem(REGISTRY, name)
            raise
        self._check(name, reply)
        if self._sharded and int(reply[0]) == 1:
            await self.client.sadd(REGISTRY, name)
        return None if int(reply[0]) == 1 else _str(reply[1])

    async def lost(self, name: str) -> bool:
        """Whether the registry lists the name while its model has no meta (its keys were
        evicted): read together, in one transaction on one Redis, so that a model deleted or
        made anew meanwhile is never taken for a lost one."""
        keys = ModelKeys(name)
        if self._sharded:  # (two shards: no transaction spans both)
            listed = await self.client.sismember(REGISTRY, name)
            return bool(listed) and not await self.client.exists(keys.meta)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.sismember(REGISTRY, name)
            pipe.exists(keys.meta)
            listed, exists = await pipe.execute()
        return bool(listed) and not exists

    async def model_names(self) -> list[str]:
        names = await self.client.smembers(REGISTRY)
        return sorted(_str(n) for n in names)

    async def read_meta(self, name: str) -> dict[str, str] | None:
        """The model's meta hash (config JSON, epoch, counters), or None without the model."""
        raw = await self.client.hgetall(ModelKeys(name).meta)
        if not raw:
            return None
        return {_str(k): _str(v) for k, v in raw.items()}

    async def read_observations(self, name: str) -> Observations | None:
        """Everything the metrics are computed from, read in one round trip."""
        keys = ModelKeys(name)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.meta)
            pipe.get(keys.ring)
            pipe.hgetall(keys.series)
            pipe.lrange(keys.recent, 0, RECENT_KEPT - 1)  # it may hold more between trims
            pipe.hgetall(keys.curve)
            meta, ring, series, recent, curve = await pipe.execute()
        if not meta:
            return None
        return Observations(
            meta={_str(k): _str(v) for k, v in meta.items()},
            ring=bytes(ring or b""),
            series={_str(k): int(v) for k, v in series.items()},
            recent=list(recent),
            curve={_str(k): int(v) for k, v in curve.items()},
        )

    async def replace_model(
        self,
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
        keys = ModelKeys(name)
        args: list[Arg] = [config_json, epoch, created, version, seen, weights, name]
        for field, value in counters.items():
            args += [field, value]
        registry, flag = self._registry()
        replaced = [k for k in keys.all if k != keys.pend]  # pending bytes lapse on their own
        await self._replace(keys=[*replaced, *registry], args=[*args, *flag])
        if self._sharded:
            await self.client.sadd(REGISTRY, name)

    async def delete_model(self, name: str) -> bool:
        """Delete every key of the model: its state, the requests handed to its writer, and
        its pending predictions (found by SCAN), so that deleting a model frees its memory."""
        keys = ModelKeys(name)
        registry, flag = self._registry()
        deleted, epoch = await self._delete(
            keys=[*keys.all, *keys.handover, *registry], args=[name, len(keys.all), *flag]
        )
        if self._sharded:
            await self.client.srem(REGISTRY, name)
            if await self.client.exists(keys.meta):  # made anew meanwhile: listed again
                await self.client.sadd(REGISTRY, name)
        if epoch:
            try:
                await self._purge_pending(keys, _str(epoch))
            except RedisError as e:  # the model is deleted: what is left lapses by its TTL
                log.warning("model %r deleted; its pending predictions were not: %s", name, e)
        return int(deleted) > 0

    async def _purge_pending(self, keys: ModelKeys, epoch: str) -> int:
        """Delete the pending predictions of the model of ``epoch``, PURGE_BATCH at a time."""
        gone, batch = 0, []
        async for key in self.client.scan_iter(match=keys.pending_match, count=PURGE_BATCH):
            batch.append(key)
            if len(batch) >= PURGE_BATCH:
                gone += int(await self._purge(keys=batch, args=[epoch]))
                batch = []
        if batch:
            gone += int(await self._purge(keys=batch, args=[epoch]))
        return gone

    async def sync(self, name: str, from_version: int) -> SyncData:
        keys = ModelKeys(name)
        reply = await self._sync(keys=[keys.meta, keys.snap, keys.log], args=[from_version])
        self._check(name, reply)
        return await self._sync_data(keys, reply, from_version)

    async def _sync_data(self, keys: ModelKeys, reply: list[Any], from_version: int) -> SyncData:
        """A script's sync reply: the entries themselves, or where to read them (scripts._SYNC)."""
        _, epoch, version, seen, base, read_yourself, entries = reply
        if int(read_yourself):
            return await self.read_log(keys, from_version, int(base))
        return SyncData(_str(epoch), int(version), int(seen), int(base), None, list(entries))

    async def read_log(self, keys: ModelKeys, from_version: int, snapv: int) -> SyncData:
        """What a copy at ``from_version`` lacks, read with plain commands, not a script.

        Log indices count from the snapshot's version ``snapv``, and compaction moves the
        snapshot and trims the log in one step: a read is consistent when ``snapv`` is the
        same just before and just after it. Entries appended meanwhile may come too; they
        are the next ones in order.
        """
        for _ in range(READ_ATTEMPTS):
            whole = from_version < snapv  # the copy needs the snapshot, then the whole log
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hmget(
                    keys.meta,
                    Meta.EPOCH,
                    Meta.VERSION,
                    Meta.SEEN,
                    Meta.SNAP_VERSION,
                    Meta.SNAP_LENGTH,
                )
                if whole:
                    pipe.get(keys.snap)
                pipe.lrange(keys.log, 0 if whole else from_version - snapv, -1)
                pipe.hmget(keys.meta, Meta.SNAP_VERSION, Meta.EPOCH)
                replies = await pipe.execute()
            (epoch, version, seen, before, snaplen), (after, epoch_after) = replies[0], replies[-1]
            if epoch is None or after is None:
                raise ModelNotFound(keys.name)
            if epoch_after != epoch:
                raise StaleModel(keys.name)
            if int(before) == snapv == int(after):
                base = snapv if whole else from_version
                entries = list(replies[-2])
                snapshot = bytes(replies[1] or b"") if whole else None
                # Entries appended meanwhile may come too, never fewer than the version says.
                if len(entries) < int(version) - base:
                    raise self._lost(keys.name, "its update log is incomplete")
                if snapshot is not None and (
                    len(snapshot) != int(snaplen)
                    if snaplen is not None
                    else snapv > 0 and not snapshot  # written before snaplen was kept
                ):
                    raise self._lost(keys.name, "its weights snapshot is missing")
                return SyncData(
                    epoch=_str(epoch),
                    version=int(version),
                    seen=int(seen),
                    base=base,
                    snapshot=snapshot,
                    entries=entries,
                )
            snapv = int(after)
        raise ModelBusy(
            f"Model {keys.name!r} was compacted under every one of {READ_ATTEMPTS} reads of "
            "its log; retry shortly."
        )

    async def commit_predictions(
        self,
        name: str,
        epoch: str,
        made: Made,
        tokens: Sequence[str],
        records: Sequence[bytes],
        ttl_s: int,
        max_pending_bytes: int = 0,
        force: bool = False,
    ) -> SyncData | None:
        """Store pending predictions made at ``made.version`` (and ``made.seen``).

        Returns None when stored, or, when the model has moved on and ``force`` is off, what
        the caller's copy lacks; nothing is stored then. Raises TooManyPending when the model
        would hold more than ``max_pending_bytes`` of predictions awaiting their label.
        """
        keys = ModelKeys(name)
        pending = [keys.pending(t) for t in tokens]
        args: list[Arg] = [epoch, *made.guard, int(force), ttl_s, made.r2, max_pending_bytes]
        args += records
        reply = await self._predict(
            keys=[keys.meta, keys.snap, keys.log, keys.pend, *pending], args=args
        )
        if int(reply[0]) == Status.PENDING_FULL:
            wait, held, size = int(reply[1]), int(reply[2]), int(reply[3])
            raise TooManyPending(
                f"Model {name!r} holds {held} bytes of predictions awaiting their label; "
                f"these {len(tokens)} would take {size} more, past its limit of "
                f"{max_pending_bytes} (PERCEPTRON_MAX_PENDING_BYTES). Send feedback for "
                "pending predictions, lower the model's feedback_ttl_s, or retry after "
                f"{wait} s, when the oldest lapse.",
                retry_after_s=wait,
            )
        if self._check(name, reply) == Status.STALE_COPY:
            return await self._sync_data(keys, reply, made.version)
        return None

    async def commit_feedback(
        self,
        name: str,
        epoch: str,
        tokens: Sequence[str],
        labels: Sequence[int],
        n_classes: int,
        when: Bucket,
        ttl_s: int,
    ) -> FeedbackBatch | Held:
        """Apply the true class index of each pending prediction, once each; or nothing,
        while the model's writer holds it."""
        k = ModelKeys(name)
        pending = [k.pending(t) for t in tokens]
        reply = await self._feedback(
            keys=[k.meta, k.log, k.series, k.ring, k.recent, k.pend, k.curve, k.hold, *pending],
            args=[epoch, n_classes, when.bucket, when.keep, ttl_s, *labels],
        )
        if int(reply[0]) == Status.HELD:
            return Held(int(reply[1]))  # (wait_unheld waits for the writer to let go)
        self._check(name, reply)
        flat = [int(v) for v in reply[2:]]
        items = [_feedback_item(*flat[i : i + 4]) for i in range(0, len(flat), 4)]
        return FeedbackBatch(version=int(reply[0]), log_length=int(reply[1]), items=items)

    async def commit_learn(
        self,
        name: str,
        epoch: str,
        made: Made,
        when: Bucket,
        batch: LearnBatch,
        answers: Sequence[tuple[str, bytes]] = (),
        writer: Lease | None = None,
    ) -> LearnResult | SyncData | RequestsGone:
        """Count and log learned examples, if the caller's copy was current. A model's
        ``writer`` commits only while it holds the lease, renews it, and holds the model when
        its copy was not current (scripts.LEARN; NotWriter when another worker holds the
        lease, or none does); ``answers``: (token, answer) of each handed-off request the
        commit learns."""
        keys = ModelKeys(name)
        args: list[Arg] = [
            epoch,
            *made.guard,
            when.bucket,
            when.keep,
            made.r2,
            batch.n,
            batch.mistakes,
            batch.marks,
            len(batch.cells),
        ]
        for field, count in batch.cells.items():
            args += [field, count]
        args += [len(batch.entries), *batch.entries, *batch.recent]
        script_keys = [
            keys.meta,
            keys.snap,
            keys.log,
            keys.series,
            keys.ring,
            keys.recent,
            keys.curve,
        ]
        if writer is not None:
            script_keys += [keys.hold, keys.taken, keys.reqs, keys.writer, keys.wake]
            script_keys += [keys.answer(t) for t, _ in answers]
            args += [writer.holder, writer.ms]
            for token, data in answers:
                args += [token, data]
        reply = await self._learn(keys=script_keys, args=args)
        if int(reply[0]) == Status.NOT_WRITER:
            raise NotWriter(name)
        if int(reply[0]) == Status.REQUESTS_GONE:
            return RequestsGone(frozenset(_str(t) for t in reply[1:]))
        if self._check(name, reply) == Status.DONE:
            return LearnResult(int(reply[1]), int(reply[2]), int(reply[3]))
        return await self._sync_data(keys, reply, made.version)

    async def wait_unheld(self, name: str, wait_s: float) -> bool:
        """Wait until the model's writer lets go of the hold a feedback call found (its
        commit wakes each), or at most ``wait_s``; whether it was woken."""
        return await self.client.blpop([ModelKeys(name).wake], timeout=wait_s) is not None

    async def compact(self, name: str, epoch: str, version: int, data: bytes) -> bool:
        """Replace the log up to ``version`` with the packed weights at that version."""
        keys = ModelKeys(name)
        reply = await self._compact(
            keys=[keys.meta, keys.snap, keys.log], args=[epoch, version, data]
        )
        return int(reply) == 1

    # -- one writer per model (scripts.HANDOFF) -------------------------------------------

    async def hand_off(
        self,
        name: str,
        me: str,
        lease_ms: int,
        token: str,
        request: bytes,
        wait_ms: int,
        not_queued: bytes,
        wait_s: float = 0.0,
    ) -> tuple[bool, bytes | None]:
        """Queue a learn request for the model's writer, and wait up to ``wait_s`` for its
        answer in the same round trip (none: no wait); (whether the caller learns it itself,
        the answer if one came). It learns it itself (nothing queued) when it holds, or just
        took, the lease: then ``not_queued`` is its answer, taken at once by the wait, and left
        once more for withdraw_learn to find, should the caller lose this reply. The queue's
        keys live ``wait_ms`` (the request's deadline) and QUEUE_KEEP_S more (scripts._KEEP)."""
        k = ModelKeys(name)
        keys = [k.writer, k.learns, k.taken, k.reqs, k.answer(token)]
        keep_ms = max(1, wait_ms) + QUEUE_KEEP_S * 1000
        args: list[Arg] = [me, lease_ms, token, request, keep_ms, not_queued]
        wait = ("BLPOP", k.answer(token), wait_s) if wait_s > 0 else None
        reply, got = await self._with_wait(self._handoff, keys, args, after=wait)
        return int(reply) == 1, None if got is None else _bytes(got[1])

    async def _with_wait(
        self,
        script: Any,
        keys: list[str],
        args: list[Arg],
        before: tuple[Arg, ...] | None = None,
        after: tuple[Arg, ...] | None = None,
    ) -> tuple[Any, Any]:
        """``script`` with a blocking wait command sent ``before`` or ``after`` it, on one
        connection in one round trip: (the script's reply, the wait's; None without one). A
        script Redis no longer holds (after a restart) is loaded, and both are sent again: it
        did not run. (redis-py's own scripts ask SCRIPT EXISTS before a pipeline, one more
        round trip; a cluster's client pipelines no script: there, two round trips.)"""
        wait = before or after
        if wait is None:
            return await script(keys=keys, args=args), None
        if self._sharded:
            got = await self.client.execute_command(*wait) if before else None
            reply = await script(keys=keys, args=args)
            if after:
                got = await self.client.execute_command(*wait)
            return reply, got
        for _ in range(2):
            async with self.client.pipeline(transaction=False) as pipe:
                for command in (before, ("EVALSHA", script.sha, len(keys), *keys, *args), after):
                    if command is not None:
                        pipe.execute_command(*command)
                replies = await pipe.execute(raise_on_error=False)
            reply, got = (replies[1], replies[0]) if before else (replies[0], replies[1])
            if isinstance(reply, NoScriptError):
                await self.client.script_load(script.script)
                continue
            for r in (reply, got):
                if isinstance(r, Exception):
                    raise r
            return reply, got
        raise NoScriptError("the script could not be loaded")

    async def claim_writer(self, name: str, me: str, lease_ms: int) -> float:
        """Take the lease if no worker holds it: 0 then; else the seconds until the holder's
        lapses, unless renewed (a requester looks again then)."""
        k = ModelKeys(name)
        reply = await self._claim(keys=[k.writer, k.learns, k.taken], args=[me, lease_ms])
        return int(reply) / 1000

    async def take_learns(
        self, name: str, me: str, lease_ms: int, most: int, wait_s: float = 0.0
    ) -> list[bytes] | None:
        """Renew the lease and take up to ``most`` queued requests, after waiting up to
        ``wait_s`` for one (in the same round trip); None: another holds it."""
        k = ModelKeys(name)
        keys = [k.writer, k.learns, k.taken, k.reqs]
        args: list[Arg] = [me, lease_ms, most]
        # (BLMOVE to its own list, from the head to the head: waits, moves nothing)
        wait = ("BLMOVE", k.learns, k.learns, "LEFT", "LEFT", wait_s) if wait_s > 0 else None
        reply, _ = await self._with_wait(self._take, keys, args, before=wait)
        if int(reply[0]) == 0:
            return None
        return [_bytes(r) for r in reply[1:]]

    async def release_writer(self, name: str, me: str, force: bool = False) -> bool:
        """Give the lease up, unless requests are waiting (or ``force``); whether it was."""
        k = ModelKeys(name)
        reply = await self._release(keys=[k.writer, k.learns, k.taken], args=[me, int(force)])
        return int(reply) == 1

    async def refuse_learn(self, name: str, token: str, data: bytes) -> bool:
        """Answer a taken request without learning it; False when it no longer waited."""
        k = ModelKeys(name)
        reply = await self._refuse(keys=[k.taken, k.reqs, k.answer(token)], args=[token, data])
        return int(reply) == 1

    async def wait_answer(self, name: str, token: str, wait_s: float) -> bytes | None:
        got = await self.client.blpop([ModelKeys(name).answer(token)], timeout=wait_s)
        return None if got is None else _bytes(got[1])

    async def withdraw_learn(self, name: str, token: str, epoch: str) -> bytes | None:
        """Give a handed-off request (for the model at ``epoch``) up: None when it was not
        learned (and never will be), else its answer; StaleModel when its model was deleted
        or replaced meanwhile (not learned either); OutcomeUnknown when its answer is gone
        (scripts.WITHDRAW)."""
        k = ModelKeys(name)
        reply = await self._withdraw(
            keys=[k.learns, k.taken, k.reqs, k.answer(token), k.meta], args=[token, epoch]
        )
        if int(reply[0]) == 3:
            raise StaleModel(name)
        if int(reply[0]) == 2:
            raise OutcomeUnknown(
                f"Model {name!r}'s writer took the examples, and their answer is gone from the "
                "store (evicted: its maxmemory-policy is volatile-*, or it expired): they may "
                "have been learned. Check the model's counters before sending them again."
            )
        return _bytes(reply[1]) if int(reply[0]) == 1 else None

    def _check(self, name: str, reply: list[Any]) -> int:
        """A script's status, once the model is known to exist at the caller's epoch."""
        status = int(reply[0])
        if status == Status.NO_MODEL:
            raise ModelNotFound(name)
        if status == Status.STALE_EPOCH:
            raise StaleModel(name)
        if status == Status.STATE_LOST:
            raise self._lost(name, _str(reply[1]))
        return status

    def _lost(self, name: str, what: str) -> ModelStateLost:
        """The error of a model that is not served; logged once per model by this store (a
        worker answers every request for it so, and would log each)."""
        if name not in self._said_lost:
            self._said_lost.add(name)
            log.error("model %r is not served: %s", name, what)
        return ModelStateLost(name, what)
