"""Fixtures: a real redis-server for the session, the service started per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
import redis

from service.settings import Settings

from .servers import RedisServer, ServiceThread, wait_until


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    client = redis.Redis(port=redis_server.port)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


MakeService = Callable[..., httpx.Client]


@pytest.fixture
def make_service(redis_url: str) -> Iterator[MakeService]:
    """Start the service (in a thread, on the test's Redis) with settings overridden."""
    started: list[tuple[ServiceThread, httpx.Client]] = []

    def make(**overrides: object) -> httpx.Client:
        settings = Settings(**{"redis_url": redis_url, "auth": False, **overrides})  # type: ignore[arg-type]
        server = ServiceThread(settings).start()
        client = httpx.Client(base_url=server.url, timeout=30)
        if settings.default_model:
            with redis.Redis.from_url(redis_url) as r:
                wait_until(lambda: r.exists("pcp:{default}:meta"), what="default model")
        started.append((server, client))
        return client

    yield make
    for server, client in started:
        client.close()
        server.stop()


@pytest.fixture
def client(make_service: MakeService) -> httpx.Client:
    return make_service()


@pytest.fixture
def store() -> Iterator[RedisServer]:
    """A dedicated redis-server (not the session's), append-only file on and DEBUG allowed:
    the tests that take it stop, restart (same port and folder) and pause it."""
    server = RedisServer(
        "--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "local"
    ).start()
    try:
        yield server
    finally:
        server.stop()
