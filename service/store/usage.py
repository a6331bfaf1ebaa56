"""What the store holds, read for /metrics: Redis's memory per node, and the bytes of
predictions each model holds awaiting their label. Plain reads (INFO, TIME, HGETALL), no
script: a scrape changes nothing in Redis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from service.contract.store_values import MemoryUse, pending_held
from service.store.keys import keys_of
from service.store.script import Client, text


def address(client: Redis) -> str:
    """The node a plain client talks to, as ``host:port`` or its socket's path."""
    kwargs: dict[str, Any] = getattr(client.connection_pool, "connection_kwargs", {})
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


async def memory_info(client: Client) -> dict[str, Mapping[str, Any]]:
    """``INFO memory`` of every node, by name: the one node of a plain client, every primary
    of a cluster (whose client would otherwise ask one node only)."""
    if isinstance(client, RedisCluster):
        info = await client.info("memory", target_nodes=RedisCluster.PRIMARIES)
        return {str(node): v for node, v in info.items() if v}
    return {address(client): await client.info("memory")}


async def read_memory(client: Client) -> list[MemoryUse]:
    """Memory used and maxmemory of every node, by name."""
    return [
        MemoryUse(node, int(v.get("used_memory", 0)), int(v.get("maxmemory", 0)))
        for node, v in sorted((await memory_info(client)).items())
    ]


async def read_pending(client: Client, models: Sequence[tuple[str, int]]) -> dict[str, int]:
    """Bytes of predictions each model (name, feedback_ttl_s) holds awaiting their label, as
    PREDICT counts them against its cap now (by Redis's clock, as the scripts read it)."""
    if not models:
        return {}
    seconds, micros = await client.time()
    now = int(seconds) + int(micros) / 1_000_000
    async with client.pipeline(transaction=False) as pipe:
        for name, _ in models:
            pipe.hgetall(keys_of(name).pend)
        replies = await pipe.execute()
    return {
        name: pending_held({text(k): int(v) for k, v in pend.items()}, ttl, now)
        for (name, ttl), pend in zip(models, replies, strict=True)
    }
