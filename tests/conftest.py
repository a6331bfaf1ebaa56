"""Fixtures: a real redis-server for the session, the service started per test; or the
service in-process (``tests/inprocess.py``), for the fast layer.

Every test is marked ``fast`` (in-process: no server, no process) or ``servers`` (a real
redis-server, service processes, nginx, Prometheus, Chromium); ``pytest -m fast`` runs the fast
layer alone. A test is ``servers`` when it is marked so, or uses a fixture that starts a real
server or a process: ``redis_server`` (and so ``redis_url``), ``store``, ``compose_schema``
(pip), or ``make_service``/``client``/``redis_client`` on the real backend. A test marked
``in_process`` (and not ``servers``) runs twice: on the service in-process (``fast``) and on
the real one (``servers``); its ``make_service``, ``client``, ``redis_client`` and ``clock``
follow the backend. A ``fast`` test that starts a server or a process anyway fails, naming the
marker it lacks.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import httpx
import pytest
import redis

from service.cli.loopback import wait_until
from service.settings import Settings

from .inprocess import Clock, InProcessService, WaitingClock, clock_the_store, fake_server
from .servers import RedisServer, ServiceProcess, ServiceThread

BACKENDS = ("inprocess", "server")
# These start real servers or processes, whatever the backend (compose_schema: pip download)
SERVER_FIXTURES = {"redis_server", "store", "compose_schema"}
SERVICE_FIXTURES = {"make_service", "redis_client"}  # these follow the test's backend


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    d = metafunc.definition
    in_process = d.get_closest_marker("in_process") and not d.get_closest_marker("servers")
    if in_process and "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", BACKENDS)


def _backend(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return str(callspec.params.get("backend", "server")) if callspec else "server"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        servers = (
            item.get_closest_marker("servers") is not None
            or bool(SERVER_FIXTURES & names)
            or (bool(SERVICE_FIXTURES & names) and _backend(item) == "server")
        )
        item.add_marker(pytest.mark.servers if servers else pytest.mark.fast)


class _Forbidden:
    def __init__(self, what: str) -> None:
        self.what = what

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(
            f"a test marked 'fast' started {self.what}: mark it 'servers' (tests/conftest.py)"
        )


def pytest_sessionstart(session: pytest.Session) -> None:
    """matplotlib's font cache, built before any test: on a machine that has none yet, the
    first figure lists the system's fonts with ``fc-list`` (a process), which a fast test that
    draws a learning curve must not start."""
    try:
        import matplotlib.font_manager  # noqa: F401  (builds and saves the cache)
    except ImportError:  # an environment without the replay extra draws no curve
        pass


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A fast test starts no server and no process (before any of its fixtures is set up)."""
    if item.get_closest_marker("fast") is None:
        return
    patch = pytest.MonkeyPatch()
    item.stash[_GUARD] = patch
    patch.setattr(subprocess, "Popen", _Forbidden("a process"))
    for cls in (RedisServer, ServiceProcess, ServiceThread):
        patch.setattr(cls, "start", _Forbidden(f"a server ({cls.__name__})"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    patch = item.stash.get(_GUARD, None)
    if patch is not None:
        patch.undo()


_GUARD = pytest.StashKey[pytest.MonkeyPatch]()


# --- real servers ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def two_workers(redis_server: RedisServer) -> Iterator[ServiceProcess]:
    """``perceptron serve --workers 2`` on the session's redis-server, for a module's tests
    (each on models of its own names)."""
    service = ServiceProcess(redis_server.url, workers=2).start()
    yield service
    service.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    client = redis.Redis(port=redis_server.port)
    client.flushall()
    client.close()
    return redis_server.url


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


# --- the service, on either backend -----------------------------------------------------------


@pytest.fixture
def backend() -> str:
    """'server' (the service in a thread on a real redis-server), or 'inprocess' for tests
    marked ``in_process`` (parametrized: they run on both)."""
    return "server"


@pytest.fixture
def clock(backend: str, monkeypatch: pytest.MonkeyPatch) -> WaitingClock:
    """The service's clock (the time of its buckets and deadlines), and on the in-process
    backend its store's too (TTLs): ``advance(s)`` skips ``s`` seconds of the service's time;
    ``wait(s)`` skips them in-process and sleeps them on the real backend, whose Redis keeps
    its own time."""
    c = WaitingClock(backend)
    if backend == "inprocess":
        clock_the_store(c, monkeypatch)
    return c


@pytest.fixture
def fake_redis() -> fakeredis.FakeServer:
    """The in-process Redis the in-process services of a test share."""
    return fake_server()


@pytest.fixture
def redis_client(
    backend: str, request: pytest.FixtureRequest, fake_redis: fakeredis.FakeServer
) -> Iterator[redis.Redis]:
    """A sync client of the Redis the test's services use."""
    if backend == "inprocess":
        client: redis.Redis = fakeredis.FakeRedis(server=fake_redis)
    else:
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    yield client
    client.close()


MakeService = Callable[..., httpx.Client]


@pytest.fixture
def make_service(
    backend: str, request: pytest.FixtureRequest, fake_redis: fakeredis.FakeServer, clock: Clock
) -> Iterator[MakeService]:
    """Start the service with settings overridden: in a thread on the test's Redis, or, for
    the in-process backend, in-process on the test's fakeredis server."""
    started: list[Callable[[], None]] = []

    def make(**overrides: Any) -> httpx.Client:
        if backend == "inprocess":
            settings = Settings(**{"auth": False, **overrides})
            service = InProcessService(settings, fake_redis, clock).start()
            started.append(service.stop)
            return service.client(timeout=30)
        redis_url = request.getfixturevalue("redis_url")
        # A Redis call may wait 10 s here, not 2: the tests share two cores with image builds
        # and other servers, and a commit once waited past 2 s there. Tests of timeouts set
        # their own.
        base = {"redis_url": redis_url, "auth": False, "redis_timeout_s": 10.0}
        settings = Settings(**{**base, **overrides})
        server = ServiceThread(settings, clock).start()
        client = httpx.Client(base_url=server.url, timeout=30)
        if settings.default_model:
            with redis.Redis.from_url(redis_url) as r:
                wait_until(lambda: r.exists("pcp:{default}:meta"), what="default model")
        started.append(client.close)
        started.append(server.stop)
        return client

    yield make
    for stop in started:
        stop()


@pytest.fixture
def client(make_service: MakeService) -> httpx.Client:
    return make_service()
