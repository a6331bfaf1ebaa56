"""The store's scripts go straight on a pooled connection (``redis_store.send_straight``), not
through redis-py's client: what that client did for them must still hold, on a real redis-server.

Each test runs on a pool of one connection, so that whatever one command leaves on the
connection, the next one meets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ResponseError

from service.settings import Settings
from service.store import Store, redis_store
from service.store.connect import open_client
from service.store.redis_store import send_straight


def _one_connection(redis_url: str) -> Any:
    return open_client(Settings(redis_url=redis_url, redis_max_connections=1))


def test_replies_come_in_order_and_an_error_reply_takes_only_its_place(redis_url: str) -> None:
    async def main() -> list[Any]:
        client = _one_connection(redis_url)
        pool = client.connection_pool
        try:
            got = await send_straight(
                pool, [("SET", "d:k", "v"), ("INCR", "d:k"), ("GET", "d:k"), ("NOSUCH",)]
            )
            # The connection is in step after the error replies: its next command gets its own.
            after = await send_straight(pool, [("ECHO", "next")])
            return [*got, *after]
        finally:
            await client.aclose()

    ok, incr, value, unknown, after = asyncio.run(main())
    assert ok == b"OK"
    assert isinstance(incr, ResponseError) and "not an integer" in str(incr)
    assert value == b"v"  # INCR refused: it did not run
    assert isinstance(unknown, ResponseError) and "unknown command" in str(unknown)
    assert after == b"next"


def test_a_read_cancelled_midway_leaves_no_reply_for_the_next_command(redis_url: str) -> None:
    """A request whose client went away cancels its wait: the reply that comes later must not
    answer the next command sent on the same connection."""

    async def main() -> tuple[bytes, list[Any]]:
        client = _one_connection(redis_url)
        pool = client.connection_pool
        try:
            wait = asyncio.create_task(send_straight(pool, [("BLPOP", "d:never", 0.3)]))
            await asyncio.sleep(0.05)
            wait.cancel()
            with pytest.raises(asyncio.CancelledError):
                await wait
            await client.rpush("d:never", "late")  # would have woken the cancelled wait
            got = await send_straight(pool, [("ECHO", "mine")])
            return got[0], await client.lrange("d:never", 0, -1)
        finally:
            await client.aclose()

    mine, left = asyncio.run(main())
    assert mine == b"mine"
    assert left == [b"late"]  # nobody took it: the cancelled wait ended with its connection


def test_a_script_redis_no_longer_holds_is_loaded_and_runs_once(redis_url: str) -> None:
    """After SCRIPT FLUSH (a Redis restarted without its scripts) a script answers NOSCRIPT,
    which means it did not run: it is loaded and sent again, and runs once."""

    async def main() -> tuple[str | None, str | None, int, int]:
        client = _one_connection(redis_url)
        store = Store(client)
        try:
            await client.script_flush()
            await client.config_resetstat()
            made = await store.create_model("d1", '{"n_features": 2}', "e" * 16)
            await client.script_flush()
            taken = await store.create_model("d1", '{"n_features": 3}', "f" * 16)
            stats = await client.info("commandstats")
            return (
                made,
                taken,
                stats["cmdstat_evalsha"]["calls"],
                stats["cmdstat_script|load"]["calls"],
            )
        finally:
            await client.aclose()

    made, taken, evalsha, loads = asyncio.run(main())
    assert made is None  # made, by the one run that found no model
    assert taken == '{"n_features": 2}'  # the second finds the first's, not its own
    assert evalsha == 4 and loads == 2  # each: NOSCRIPT, loaded, sent again


def test_the_store_sends_its_scripts_on_a_pooled_connection(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[list[Any]] = []
    real = send_straight

    async def counted(pool: Any, commands: list[Any]) -> list[Any]:
        sent.append([c[0] for c in commands])
        return await real(pool, commands)

    monkeypatch.setattr(redis_store, "send_straight", counted)

    async def main() -> float:
        client = _one_connection(redis_url)
        store = Store(client)
        try:
            await store.create_model("d2", '{"n_features": 2}', "e" * 16)
            return await store.claim_writer("d2", "me", 400)
        finally:
            await client.aclose()

    assert asyncio.run(main()) == 0  # the lease taken: the script ran, and answered
    # (one more where a script Redis no longer held answered NOSCRIPT first)
    assert len(sent) >= 2 and all(commands == ["EVALSHA"] for commands in sent)
