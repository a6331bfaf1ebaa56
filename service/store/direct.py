"""Commands sent straight on a connection of the pool, in one write, their replies read back.

redis-py's client wraps each command in what the store uses none of: a retry policy (none
here, ``connect.open_client``), observability hooks, per-command response callbacks, and for
pipelines a stack of command objects: a ninth of the CPU of a script's round trip alone, a
fifth of one behind a blocking wait (figure 21 of docs/performance.md). The store's scripts
(one writer's commits and takes, and every request's script) are sent this way on a Redis that
is not a cluster: the same pooled connections (``connect.ReadyConnectionPool``, which hands out
only connections fit to carry a command, else NotSent), the same packed bytes, and the same
errors, since a connection raises and disconnects itself on its own failures (a reply lost, a
timeout, a cancelled read) as it does under the client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio.connection import ConnectionPool
from redis.exceptions import ResponseError

from service.store.script import Arg


async def send(pool: ConnectionPool, commands: Sequence[Sequence[Arg]]) -> list[Any]:
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
