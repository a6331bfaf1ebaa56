"""What an operation needs from the store that runs it (``redis_store.Store``)."""

from __future__ import annotations

from typing import Any, Protocol

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from service.contract.store_protocol import Status
from service.contract.store_values import SyncData
from service.errors import ModelStateLost
from service.store.keys import ModelKeys
from service.store.script import Arg, Script

Client = Redis | RedisCluster


class Runner(Protocol):
    client: Client

    @property
    def sharded(self) -> bool:
        """Under Redis Cluster: the registry lives on another shard than a model's keys."""

    async def run(self, script: Script, keys: list[str], args: list[Arg]) -> Any:
        """The script's reply."""

    async def run_with_wait(
        self,
        script: Script,
        keys: list[str],
        args: list[Arg],
        before: tuple[Arg, ...] | None = None,
        after: tuple[Arg, ...] | None = None,
        first: tuple[Arg, ...] | None = None,
    ) -> tuple[Any, Any]:
        """The script with a blocking wait sent before or after it in one round trip (and a
        plain write ``first``)."""

    def check(self, name: str, reply: list[Any]) -> Status:
        """The reply's status, once it is not NO_MODEL, STALE_EPOCH or STATE_LOST (raised)."""

    async def sync_data(self, keys: ModelKeys, reply: list[Any], from_version: int) -> SyncData:
        """A sync reply (``parts.SYNC``): its entries, or read from where it says."""

    def state_lost(self, name: str, what: str) -> ModelStateLost:
        """The error of a model whose keys are incomplete (logged once per model)."""


def text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def raw(v: bytes | str) -> bytes:
    return v if isinstance(v, bytes) else v.encode()
