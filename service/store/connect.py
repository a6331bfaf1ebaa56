"""Opening the store: a Redis server, a Redis Cluster, or the embedded in-process store."""

from __future__ import annotations

import logging
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ..settings import Settings
from .redis_store import Client, Store

log = logging.getLogger("perceptron")

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def open_client(settings: Settings) -> Client:
    url = settings.redis_url
    timeouts: dict[str, Any] = {
        "socket_timeout": settings.redis_timeout_s,
        "socket_connect_timeout": settings.redis_timeout_s,
        # No silent retries: a script whose reply was lost may have run, and running a
        # /learn twice would learn its example twice. Errors become a 503 with Retry-After.
        "retry": Retry(NoBackoff(), 0),
    }
    if not url:
        import fakeredis

        log.warning(
            "PERCEPTRON_REDIS_URL is not set: using the EMBEDDED in-process store. Weights live "
            "in this one process and are lost when it stops; do not run several workers so."
        )
        client: Client = fakeredis.FakeAsyncRedis()
        return client
    for scheme in CLUSTER_SCHEMES:
        if url.startswith(scheme):
            plain = url.replace("+cluster", "", 1)
            return RedisCluster.from_url(plain, **timeouts)
    if settings.redis_cluster:
        return RedisCluster.from_url(url, **timeouts)
    # A connection idle for a second is checked before use, so that one left over from
    # before a Redis restart does not fail the first request that takes it.
    return Redis.from_url(url, health_check_interval=1, **timeouts)


def open_store(settings: Settings) -> Store:
    return Store(open_client(settings))
