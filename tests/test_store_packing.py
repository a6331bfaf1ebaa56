"""The store's connections pack commands with hiredis, into the bytes redis-py's own packer makes.

redis-py's asyncio connections pack every command in Python; its synchronous ones use hiredis
when it is installed. ``store/connect.py`` gives the service's connections hiredis's packer:
the same bytes on the wire for every kind of argument a command can carry, and the same error
for one it cannot.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError

from service.settings import Settings
from service.store.connect import HiredisPacking, open_client, packed_by_hiredis

PYTHON_PACKED = Connection()  # redis-py's asyncio connection: packs in Python
HIREDIS_PACKED = packed_by_hiredis(Connection)()

arguments = st.one_of(
    st.binary(max_size=9000),  # past redis-py's 6,000-byte cut where it sends a value apart
    st.text(max_size=300),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
)


def wire(packed: list[Any]) -> bytes:
    return b"".join(bytes(chunk) for chunk in packed)


@given(st.sampled_from(["EVALSHA", "SET", "CONFIG GET", b"SCRIPT LOAD"]), st.lists(arguments))
def test_hiredis_packs_the_bytes_redis_py_packs(name: str | bytes, args: list[Any]) -> None:
    assert wire(HIREDIS_PACKED.pack_command(name, *args)) == wire(
        PYTHON_PACKED.pack_command(name, *args)
    )


def test_memoryviews_and_several_commands_pack_alike() -> None:
    view = memoryview(b"x" * 7000)
    assert wire(HIREDIS_PACKED.pack_command("SET", "k", view)) == wire(
        PYTHON_PACKED.pack_command("SET", "k", view)
    )
    commands = [("EVALSHA", "a" * 40, 1, "k", 1.5), ("BLPOP", "w", 0.1), ("GET", "k")]
    assert wire(HIREDIS_PACKED.pack_commands(commands)) == wire(
        PYTHON_PACKED.pack_commands(commands)
    )


@pytest.mark.parametrize("bad", [True, None, object()])
def test_an_argument_neither_packs_is_a_data_error_both_ways(bad: Any) -> None:
    for connection in (PYTHON_PACKED, HIREDIS_PACKED):
        with pytest.raises(DataError):
            connection.pack_command("SET", "k", bad)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("redis://127.0.0.1:6379/0", Connection),
        ("rediss://127.0.0.1:6380/0", SSLConnection),
        ("unix:///tmp/redis.sock?db=0", UnixDomainSocketConnection),
    ],
)
def test_the_service_client_packs_with_hiredis(url: str, kind: type) -> None:
    """Every kind of connection the store's URL can name (nothing is connected here)."""
    client: Any = open_client(Settings(redis_url=url))
    cls = client.connection_pool.connection_class
    assert issubclass(cls, HiredisPacking) and issubclass(cls, kind)
    asyncio.run(client.aclose())


def test_values_of_every_kind_reach_redis_intact(redis_url: str) -> None:
    values: list[Any] = ["é" * 100, b"\x00\xff" * 5000, 2**70, 0.1, -0.0, "x" * 7000]

    async def run() -> list[bytes]:
        client: Any = open_client(Settings(redis_url=redis_url))
        try:
            for i, value in enumerate(values):
                await client.execute_command("SET", f"packing:{i}", value)
            return [await client.get(f"packing:{i}") for i in range(len(values))]
        finally:
            await client.aclose()

    got = asyncio.run(run())
    assert got == [
        v if isinstance(v, bytes) else (v.encode() if isinstance(v, str) else repr(v).encode())
        for v in values
    ]
