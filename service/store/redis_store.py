"""The one place that talks to Redis: models' configuration, counters, logs and predictions."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from ..errors import Conflict, ModelNotFound, PredictionNotFound, StaleModel
from . import scripts
from .keys import REGISTRY, ModelKeys

Client = Redis | RedisCluster


@dataclass(frozen=True, slots=True)
class SyncData:
    """What a worker's copy of a model lacks: maybe a snapshot, then log entries."""

    epoch: str
    version: int
    seen: int
    base: int  # the version just before the first entry (and of the snapshot, if any)
    snapshot: bytes | None
    entries: list[bytes]


@dataclass(frozen=True, slots=True)
class FeedbackResult:
    mistake: bool
    updated: bool
    version: int
    duplicate: bool
    log_length: int


@dataclass(frozen=True, slots=True)
class LearnResult:
    version: int
    seen: int
    log_length: int


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _sync_data(reply: list[Any]) -> SyncData:
    _, epoch, version, seen, base, has, snap, entries = reply
    return SyncData(
        epoch=_str(epoch),
        version=int(version),
        seen=int(seen),
        base=int(base),
        snapshot=bytes(snap) if int(has) else None,
        entries=list(entries),
    )


class Store:
    """Models in Redis. Every write is one Lua script, so it is atomic on its model."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._create = client.register_script(scripts.CREATE)
        self._sync = client.register_script(scripts.SYNC)
        self._predict = client.register_script(scripts.PREDICT)
        self._feedback = client.register_script(scripts.FEEDBACK)
        self._learn = client.register_script(scripts.LEARN)
        self._compact = client.register_script(scripts.COMPACT)

    async def ping(self) -> bool:
        return bool(await self.client.ping())

    async def close(self) -> None:
        await self.client.aclose()

    async def create_model(self, name: str, config_json: str, epoch: str) -> str | None:
        """Create the model; returns None when created, else the existing config JSON."""
        keys = ModelKeys(name)
        reply = await self._create(keys=[keys.meta], args=[config_json, epoch, int(time.time())])
        await self.client.sadd(REGISTRY, name)
        return None if int(reply[0]) == 1 else _str(reply[1])

    async def model_names(self) -> list[str]:
        names = await self.client.smembers(REGISTRY)
        return sorted(_str(n) for n in names)

    async def read_meta(self, name: str) -> dict[str, str] | None:
        """The model's meta hash (config JSON, epoch, counters), or None without the model."""
        raw = await self.client.hgetall(ModelKeys(name).meta)
        if not raw:
            return None
        return {_str(k): _str(v) for k, v in raw.items()}

    async def delete_model(self, name: str) -> bool:
        keys = ModelKeys(name)
        # One DEL per key keeps each command on its slot under Redis Cluster.
        deleted = 0
        for key in (keys.meta, keys.snap, keys.log):
            deleted += await self.client.delete(key)
        await self.client.srem(REGISTRY, name)
        return deleted > 0

    async def sync(self, name: str, from_version: int) -> SyncData:
        keys = ModelKeys(name)
        reply = await self._sync(keys=[keys.meta, keys.snap, keys.log], args=[from_version])
        if int(reply[0]) == -1:
            raise ModelNotFound(name)
        return _sync_data(reply)

    async def commit_prediction(
        self,
        name: str,
        epoch: str,
        version: int,
        seen: int | None,
        token: str,
        record: bytes,
        ttl_s: int,
        force: bool = False,
    ) -> SyncData | None:
        """Store a pending prediction made at ``version`` (and ``seen``, for averaged models).

        Returns None when stored, or, when the model has moved on and ``force`` is off, what
        the caller's copy lacks; nothing is stored then.
        """
        keys = ModelKeys(name)
        args: list[bytes | str | int] = [
            epoch,
            version,
            "" if seen is None else seen,
            int(force),
            record,
            ttl_s,
        ]
        reply = await self._predict(
            keys=[keys.meta, keys.snap, keys.log, keys.pending(token)], args=args
        )
        stale: SyncData | None = self._check(name, reply, _sync_data)
        return stale

    async def commit_feedback(
        self, name: str, epoch: str, token: str, t: int, n_classes: int
    ) -> FeedbackResult:
        keys = ModelKeys(name)
        reply = await self._feedback(
            keys=[keys.meta, keys.log, keys.pending(token)], args=[epoch, t, n_classes]
        )
        status = int(reply[0])
        if status == -3:
            raise PredictionNotFound()
        if status == -4:
            raise Conflict(
                "Feedback for this prediction was already given with another label "
                f"(class index {int(reply[1])}); a prediction takes one true label.",
                code="feedback_conflict",
            )
        self._check(name, reply, lambda r: None)
        _, mistake, updated, version, log_length = reply
        return FeedbackResult(
            mistake=bool(mistake),
            updated=bool(updated),
            version=int(version),
            duplicate=status == 2,
            log_length=int(log_length),
        )

    async def commit_learn(
        self,
        name: str,
        epoch: str,
        version: int,
        seen: int | None,
        t: int,
        served: int,
        updated: bool,
        payload: bytes,
    ) -> LearnResult | SyncData:
        """Count and log one learned example, if the caller's copy was current."""
        keys = ModelKeys(name)
        args: list[bytes | str | int] = [
            epoch,
            version,
            "" if seen is None else seen,
            t,
            served,
            int(updated),
            payload,
        ]
        reply = await self._learn(keys=[keys.meta, keys.snap, keys.log], args=args)
        if int(reply[0]) == 1:
            return LearnResult(int(reply[1]), int(reply[2]), int(reply[3]))
        stale: SyncData = self._check(name, reply, _sync_data)
        return stale

    async def compact(self, name: str, epoch: str, version: int, data: bytes) -> bool:
        """Replace the log up to ``version`` with the packed weights at that version."""
        keys = ModelKeys(name)
        reply = await self._compact(
            keys=[keys.meta, keys.snap, keys.log], args=[epoch, version, data]
        )
        return int(reply) == 1

    @staticmethod
    def _check(name: str, reply: list[Any], on_stale: Any) -> Any:
        status = int(reply[0])
        if status == -1:
            raise ModelNotFound(name)
        if status == -2:
            raise StaleModel(name)
        if status == 0:
            return on_stale(reply)
        return None
