"""Opening the store: a Redis server, a Redis Cluster, or the embedded in-process store."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.connection import HiredisRespSerializer, parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.settings import Settings
from service.store.ops import WAITED
from service.store.redis_store import NotSent, Store
from service.store.script import Client

log = logging.getLogger("perceptron")

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


class WaitingConnectionPool(BlockingConnectionPool):
    """A pool whose caller waits for a free connection, up to the pool's timeout; one it
    cannot get (none free in time, or none fit to carry a command) is NotSent: nothing of
    the command was written. A new connection loads the scripts sent behind a blocking wait
    first (``_load_waited``)."""

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        new = not connection.is_connected
        await super().ensure_connection(connection)
        if new:
            await _load_waited(connection)

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        try:
            connection: AbstractConnection = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except NotSent:
            raise
        except (RedisConnectionError, RedisTimeoutError) as e:
            raise NotSent(str(e)) from e
        return connection


class HiredisPacking:
    """Commands packed by hiredis, in C, as redis-py's own synchronous connections pack them
    when hiredis is installed (it is a dependency): its asyncio connections pack them in Python,
    which takes twice as long for a learn commit's three dozen arguments (figure 18 of
    docs/performance.md). The same bytes either way (``tests/test_store_packing.py``)."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        packed: list[bytes] = self._packer.pack(*args)
        return packed


def packed_by_hiredis(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` (plain, TLS or Unix socket) packing its commands with hiredis."""
    return type(connection_class.__name__, (HiredisPacking, connection_class), {})


class ReadyConnectionPool(WaitingConnectionPool):
    """A pool that hands out only connections fit to carry a command, reconnecting once;
    when all its connections are busy, a caller waits for one (up to the pool's timeout,
    the store's) instead of failing at once (redis-py's plain pool refuses the 101st).

    A connection is taken from the pool before anything of the caller's command is written
    on it, so replacing a dead one here is always safe, unlike retrying the command. After
    a Redis restart every pooled connection is dead; the stock check cannot see it:

    - redis-py 8.1 skips its check of a connection taken from the pool (``can_read()``,
      which sees the server's close) whenever maintenance notifications are enabled, and
      they are by default under RESP3 (redis-py issue #4252);
    - the health-check PING of a connection idle past ``health_check_interval`` is sent
      with the client's retry policy, no retries here, so a dead socket fails the command.

    Both happen here instead, and a ``ConnectionError`` (refused, reset, closed by the
    server, a PING that failed) gets one new connection. A ``TimeoutError`` does not: Redis
    is slow or unreachable, and waiting for it twice would only delay the 503.

    A new connection loads the scripts sent behind a wait here too, a restarted Redis's
    included.
    """

    async def ensure_connection(self, connection: AbstractConnection) -> None:
        try:
            try:
                await _make_ready(connection)
            except RedisConnectionError:
                await connection.disconnect()
                await _make_ready(connection)
        except (RedisConnectionError, RedisTimeoutError, ResponseError) as e:
            # Nothing of the command was written: whatever it was, it did not run. (An error
            # answer: a script load or a PING refused.)
            raise NotSent(str(e)) from e


async def _make_ready(connection: AbstractConnection) -> None:
    # (connect() and check_health() are untyped in redis-py, hence the ignores.)
    new = not connection.is_connected
    await connection.connect()  # type: ignore[no-untyped-call]
    if new:
        await _load_waited(connection)
    # Readable before any command: the server closed it (EOF) or a reply was left unread
    # (or, under RESP3, a push such as a maintenance notification: then it costs only a
    # reconnect, and this service subscribes to none).
    if await connection.can_read():
        raise RedisConnectionError("pooled connection closed by the server or holding data")
    # PING a connection idle past health_check_interval: it may be dead all the same.
    # The PING refreshes the timer, so the command that follows sends none of its own.
    await connection.check_health()  # type: ignore[no-untyped-call]


async def _load_waited(connection: AbstractConnection) -> None:
    """Load the scripts sent behind a blocking wait (``ops.WAITED``) on a new connection,
    before its first command: a Redis that started (or restarted) holds none, and one sent
    behind a wait would fail with NOSCRIPT only once the wait had run its course (a tenth of
    a second each, and a reply lost meanwhile would leave a request's fate unknown though it
    never ran)."""
    loads = [("SCRIPT", "LOAD", script.lua) for script in WAITED]
    try:
        await connection.send_packed_command(connection.pack_commands(loads))
        for _ in loads:
            await connection.read_response()  # (an error answer raises)
    except BaseException:
        # Not pooled as it is: replies left unread would answer its next command, and a
        # connection that looks connected would not load the scripts again.
        await connection.disconnect()
        raise


def redis_password(settings: Settings) -> str | None:
    """The password in PERCEPTRON_REDIS_PASSWORD_FILE, if set; a bad setting fails start-up.

    A file, so that the password is in no environment, command line or ``docker inspect``.
    The URL must then carry none: two passwords would leave which one counts to redis-py.
    """
    path = settings.redis_password_file
    if path is None:
        return None
    if urlsplit(settings.redis_url or "").password is not None:
        raise ValueError(
            "PERCEPTRON_REDIS_URL holds a password and PERCEPTRON_REDIS_PASSWORD_FILE is set: "
            "give the password one way."
        )
    # Less the trailing newlines an editor or `echo` adds, as deploy/redis-start.sh reads it
    password = path.read_text().rstrip("\n")
    if not password:
        raise ValueError(f"PERCEPTRON_REDIS_PASSWORD_FILE: {path} is empty.")
    return password


def open_client(settings: Settings) -> Client:
    url = settings.redis_url
    options: dict[str, Any] = {
        "socket_timeout": settings.redis_timeout_s,
        "socket_connect_timeout": settings.redis_timeout_s,
        # No silent retries: a script whose reply was lost may have run, and running a
        # /learn twice would learn its example twice. An error before the command was sent
        # (NotSent) is a 503 with Retry-After; after it, a write's fate is unknown.
        "retry": Retry(NoBackoff(), 0),
    }
    password = redis_password(settings) if url else None
    if password is not None:
        options["password"] = password
    if not url:
        import fakeredis

        log.warning(
            "PERCEPTRON_REDIS_URL is not set: using the EMBEDDED in-process store. Weights live "
            "in this one process and are lost when it stops; do not run several workers so."
        )
        # A server of its own: clients made without one share a process-wide default.
        return embedded_client(fakeredis.FakeServer(version=(7, 0)), settings)
    for scheme in CLUSTER_SCHEMES:
        if url.startswith(scheme):
            plain = url.replace("+cluster", "", 1)
            return RedisCluster.from_url(plain, **options)
    if settings.redis_cluster:
        return RedisCluster.from_url(url, **options)
    # A connection idle for a second is PINGed before use, and one found dead is replaced
    # once (ReadyConnectionPool), so that one left over from before a Redis restart does
    # not fail the first request that takes it.
    pool = ReadyConnectionPool.from_url(
        url,
        health_check_interval=1,
        max_connections=settings.redis_max_connections,
        timeout=settings.redis_timeout_s,
        **options,
    )
    pool.connection_class = packed_by_hiredis(pool.connection_class)
    return Redis.from_pool(pool)


def embedded_client(server: Any, settings: Settings) -> Client:
    """A client of an in-process fakeredis ``server``, with the same pool as a real Redis's:
    past ``redis_max_connections`` busy connections, a caller waits for one."""
    import fakeredis

    client: Client = fakeredis.FakeAsyncRedis(
        server=server,
        connection_pool_class=WaitingConnectionPool,
        max_connections=settings.redis_max_connections,
        timeout=settings.redis_timeout_s,
    )
    return client


def describe_store(settings: Settings) -> str:
    """Which store the settings open, for the log: where, never with a password."""
    url = settings.redis_url
    if not url:
        return "the embedded in-process store (this process only; lost when it stops)"
    cluster = settings.redis_cluster or url.startswith(CLUSTER_SCHEMES)
    try:
        parts = parse_url(url.replace("+cluster", "", 1))  # type: ignore[no-untyped-call]
    except ValueError:
        return "Redis at a URL redis-py cannot read"
    tls = " over TLS" if url.startswith(("rediss://", "rediss+cluster://")) else ""
    if "path" in parts:
        return f"Redis on the socket {parts['path']}, db {parts.get('db', 0)}"
    where = f"{parts.get('host', 'localhost')}:{parts.get('port', 6379)}"
    if cluster:
        return f"a Redis Cluster reached at {where}{tls}"
    return f"Redis at {where}, db {parts.get('db', 0)}{tls}"


def open_store(settings: Settings) -> Store:
    return Store(open_client(settings), embedded=not settings.redis_url)
