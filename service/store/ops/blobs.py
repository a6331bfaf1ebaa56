"""Packed weights, of any size the service accepts, in and out of Redis in chunks.

A model's snapshot and each checkpoint's weights are keys of their own (``snap``,
``ck:<id>``): up to 128 MiB for a model of 2^24 buckets. One command or script that sends,
copies or returns such a value holds Redis for tenths of a second, every other model waiting;
and a string grown chunk by chunk is copied whole at each step. So weights are kept as a list
of chunks of at most CHUNK bytes: written with RPUSHes into a staged key (``stage``) that the
script which needs them renames into place after checking its chunks are all there; moved
between a snapshot and a checkpoint by RENAME, whatever their size; read chunk by chunk
(LINDEX); and let go with UNLINK, which frees a list of many chunks off Redis's main thread.
Weights written before, as one string, are still read (GETRANGE, chunk by chunk).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.store.keys import ModelKeys

CHUNK = 1024 * 1024  # bytes of one chunk: about a millisecond of Redis to write, less to read
STAGE_TTL_MS = 600_000  # a staged key outlives a worker that died before its script ran
# A staged key made with its time to live in one step, holding an empty element (taken off
# once the chunks are in); a few bytes of Lua, never the chunks (``queue_stage``).
_MAKE_STAGE = "redis.call('RPUSH', KEYS[1], '') return redis.call('PEXPIRE', KEYS[1], ARGV[1])"


def chunks(length: int) -> int:
    """How many chunks hold ``length`` bytes."""
    return -(-length // CHUNK)


def new_stage(keys: ModelKeys) -> str:
    """A new staged key of the model's (its hash tag: on the shard of the script's keys)."""
    return keys.stage(secrets.token_urlsafe(12))


def queue_stage(pipe: Any, key: str, data: bytes | memoryview) -> None:
    """Queue the writes that stage ``data`` at ``key`` (nothing for no bytes: no key).

    The key is made with its time to live first, in one step sent before any chunk: a
    pipeline that a timeout cuts short wherever it does leaves a key that expires, never one
    kept for good."""
    view = memoryview(data)
    if not len(view):
        return
    pipe.eval(_MAKE_STAGE, 1, key, STAGE_TTL_MS)
    for at in range(0, len(view), CHUNK):
        pipe.rpush(key, view[at : at + CHUNK])  # (a view: no copy on the event loop)
    pipe.lpop(key)


async def stage(client: Any, keys: ModelKeys, *blobs: bytes | memoryview) -> list[str]:
    """Stage each blob under a new key of the model, in one round trip; the keys, in order
    (named even for no bytes, where none is written)."""
    named = [new_stage(keys) for _ in blobs]
    await stage_at(client, named, blobs)
    return named


async def stage_at(client: Any, named: list[str], blobs: Sequence[bytes | memoryview]) -> None:
    """Stage each blob at the key of the same place in ``named``, in one round trip."""
    if any(len(b) for b in blobs):
        async with client.pipeline(transaction=False) as pipe:
            for key, blob in zip(named, blobs, strict=True):
                queue_stage(pipe, key, blob)
            await pipe.execute()


def new_challenger_weights(keys: ModelKeys) -> str:
    """A new key for a challenger's weights (``ModelKeys.challenger_weights``)."""
    return keys.challenger_weights(secrets.token_urlsafe(12))


@dataclass(frozen=True, slots=True)
class Shape:
    """How a key holds weights: ``list`` of ``size`` chunks, ``string`` of ``size`` bytes (as
    written before chunks), or ``none`` (no key: zeros, or gone)."""

    kind: str
    size: int


def queue_shape(pipe: Any, key: str) -> int:
    """Queue what ``shape`` reads (run with ``raise_on_error=False``); how many replies."""
    pipe.type(key)
    pipe.llen(key)  # (an error for a string)
    pipe.strlen(key)  # (an error for a list)
    return 3


def shape(replies: list[Any]) -> Shape:
    """The shape from ``queue_shape``'s replies."""
    kind = replies[0].decode() if isinstance(replies[0], bytes) else str(replies[0])
    if kind == "list":
        return Shape(kind, int(replies[1]))
    if kind == "string":
        return Shape(kind, int(replies[2]))
    return Shape("none", 0)


async def shape_of(client: Any, key: str) -> Shape:
    """How ``key`` holds weights now, in one round trip."""
    async with client.pipeline(transaction=False) as pipe:
        queue_shape(pipe, key)
        return shape(await pipe.execute(raise_on_error=False))


def queue_read(pipe: Any, key: str, held: Shape) -> int:
    """Queue the reads of the weights at ``key`` held as ``held``, a chunk each; how many
    replies."""
    if held.kind == "list":
        for i in range(held.size):
            pipe.lindex(key, i)
        return held.size
    if held.kind == "string":
        for at in range(0, held.size, CHUNK):
            pipe.getrange(key, at, min(at + CHUNK, held.size) - 1)
        return chunks(held.size)
    return 0


def _joined(parts: list[Any]) -> bytes:
    return b"".join(
        p if isinstance(p, bytes) else b"" if p is None else str(p).encode() for p in parts
    )


async def joined(parts: list[Any]) -> bytes:
    """The replies of ``queue_read`` as one string (joined off the event loop when there are
    several: up to 128 MiB to copy)."""
    if len(parts) <= 1:
        return _joined(parts)
    return await asyncio.to_thread(_joined, parts)


async def read(client: Any, key: str) -> bytes | None:
    """The weights at ``key`` (a key written once: a checkpoint's); None when it is not there
    or changed while read."""
    held = await shape_of(client, key)
    if held.kind == "none":
        return None
    async with client.pipeline(transaction=False) as pipe:
        n = queue_read(pipe, key, held)
        queue_shape(pipe, key)
        replies = await pipe.execute(raise_on_error=False)
    if shape(replies[n:]) != held or any(isinstance(p, Exception) for p in replies[:n]):
        return None
    return await joined(replies[:n])
