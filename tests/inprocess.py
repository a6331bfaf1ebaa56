"""The service in-process: its app on an embedded store, driven through httpx's ASGI transport.

No server, no socket, no process: ``InProcessService`` builds the app with ``create_app`` on a
``Store`` over fakeredis (the same Lua scripts as on Redis, run by fakeredis[lua]), runs its
lifespan on an event loop of its own, and hands out httpx clients, sync and async, whose
requests reach the app through ``httpx.ASGITransport``. Several
services on one ``fakeredis.FakeServer`` are several workers on one Redis.

``Clock`` is the time both the service and its store see: real time plus what a test skipped,
so that a test of a 1 s TTL skips a second instead of sleeping it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, TypeVar

import fakeredis
import httpx
import pytest
from fakeredis._socket import _base as fakeredis_socket
from fakeredis.commands_mixins import server_mixin as fakeredis_server

from service.app import create_app
from service.settings import Settings
from service.store import Store, embedded_client

T = TypeVar("T")
BASE_URL = "http://service.test"
WAIT_S = 60.0  # the longest one call into the app may take before the test fails


class Clock:
    """Real time plus the seconds a test skipped: hand ``clock`` to the service."""

    def __init__(self) -> None:
        self.skipped = 0.0
        self.stopped_at: float | None = None

    def __call__(self) -> float:
        now = time.time() if self.stopped_at is None else self.stopped_at
        return now + self.skipped

    def advance(self, seconds: float) -> None:
        self.skipped += seconds

    def stop(self) -> None:
        """From now on only ``advance`` moves it: two readings between two advances are of one
        moment, however long the test takes between them (on a busy machine too)."""
        self.stopped_at = time.time()


class WaitingClock(Clock):
    """A ``Clock`` that can also ``wait(s)``: skip ``s`` seconds on the in-process backend,
    sleep them on the real one, whose Redis keeps its own time."""

    def __init__(self, backend: str) -> None:
        super().__init__()
        self.backend = backend

    def wait(self, seconds: float) -> None:
        if self.backend == "inprocess":
            self.advance(seconds)
        else:
            time.sleep(seconds)


class _StoreTime:
    """Stands for the ``time`` module inside fakeredis, so that key expiry and Redis's TIME
    (the scripts' clock) follow a ``Clock``; everything else is the real module."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def time(self) -> float:
        return self._clock()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def clock_the_store(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every fakeredis server of this test keep ``clock``'s time (TTLs, TIME)."""
    shim = _StoreTime(clock)
    monkeypatch.setattr(fakeredis_socket, "time", shim)
    monkeypatch.setattr(fakeredis_server, "time", shim)


def fake_server() -> fakeredis.FakeServer:
    """An empty in-process Redis (the version the embedded store runs)."""
    return fakeredis.FakeServer(version=(7, 0))


class InProcessService:
    """The app, its lifespan run on an event loop in a thread of its own."""

    def __init__(
        self,
        settings: Settings,
        server: fakeredis.FakeServer | None = None,
        clock: Clock | None = None,
        embedded: bool = True,
        threaded: bool = False,
    ) -> None:
        self.server = server or fake_server()
        self.clock = clock or Clock()
        self.settings = settings
        # embedded=False: the store of several workers (one writer per model, store checks)
        self.store = Store(embedded_client(self.server, settings), embedded=embedded)
        # What Redis's INFO answers (fakeredis has no INFO): the store checks it when it is
        # not embedded; a test sets another eviction policy or memory use here.
        self.redis_info: dict[str, Any] = {
            "maxmemory_policy": "noeviction",
            "maxmemory": 0,
            "used_memory": 1,
        }
        self.store.client.info = self._info  # type: ignore[method-assign]
        self._app = _App.take(settings)
        self._app.store, self._app.clock = self.store, self.clock
        self.app = self._app.app
        # The app's event loop runs while a sync request (or run()) waits on it, in the
        # caller's thread: no thread to hand each request to. Once an async client needs it
        # (or threaded=True) it runs in a thread of its own, as under a server, for good.
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        # raise_app_exceptions=False: a bug answers 500, as behind a server
        self._asgi = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
        self._stop: asyncio.Event | None = None
        self._life: asyncio.Task[None] | None = None
        self._opened: list[httpx.Client] = []
        if threaded:
            self.in_thread()

    async def _info(self, section: str | None = None, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(self.redis_info)

    @property
    def worker(self) -> Any:
        return self.app.state.worker

    def in_thread(self) -> None:
        """From now on, run the app's loop in a thread of its own (async clients need it)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.loop.run_forever, name="app", daemon=True)
            self._thread.start()

    def start(self) -> InProcessService:
        self.run(self._begin())
        return self

    async def _begin(self) -> None:
        started = self.loop.create_future()
        self._life = self.loop.create_task(self._lifespan(started))
        await started

    async def _lifespan(self, started: asyncio.Future[None]) -> None:
        # One task runs the whole lifespan, as a server does: start-up, then shutdown.
        self._stop = asyncio.Event()
        try:
            async with self.app.router.lifespan_context(self.app):
                started.set_result(None)
                await self._stop.wait()
        except BaseException as e:
            if not started.done():
                started.set_exception(e)
            raise

    async def _end(self) -> None:
        if self._stop is not None and self._life is not None:
            self._stop.set()
            await self._life

    def stop(self) -> None:
        for client in self._opened:
            client.close()
        self.run(self._end())
        if self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(WAIT_S)
        self.loop.close()
        self._app.give_back()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the app's event loop (e.g. the engine's methods); its result."""
        if self._thread is None:
            return self.loop.run_until_complete(asyncio.wait_for(coro, WAIT_S))
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT_S)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        response = await self._asgi.handle_async_request(request)
        content = await response.aread()
        return httpx.Response(
            response.status_code, headers=response.headers, stream=httpx.ByteStream(content)
        )

    def transport(self) -> httpx.BaseTransport:
        return _SyncTransport(self)

    def async_transport(self) -> httpx.AsyncBaseTransport:
        """A transport for an async client on any event loop (the app keeps its own)."""
        self.in_thread()
        return _AsyncTransport(self)

    def client(self, **options: Any) -> httpx.Client:
        """A sync httpx client of the app; closed with the service."""
        c = httpx.Client(base_url=BASE_URL, transport=self.transport(), **options)
        self._opened.append(c)
        _SERVICES[c] = self
        return c


_SERVICES: weakref.WeakKeyDictionary[httpx.Client, InProcessService] = weakref.WeakKeyDictionary()


def reach(http: httpx.Client, asynchronous: bool = False) -> dict[str, Any]:
    """What another client (``perceptron_client``'s, the replay's) needs to reach the service
    ``http`` talks to: its ``transport`` when the service runs in-process, nothing else."""
    service = _SERVICES.get(http)
    if service is None:
        return {}
    return {"transport": service.async_transport() if asynchronous else service.transport()}


class _App:
    """An app built once for given settings and used again by later services (one at a
    time): FastAPI prepares each route's validation on an app's first requests, tens of
    milliseconds that every test would pay again. Each lifespan opens the store and keeps
    the clock of the service that runs it."""

    _free: ClassVar[dict[tuple[str, str | None], list[_App]]] = {}

    def __init__(self, key: tuple[str, str | None], settings: Settings) -> None:
        self.key = key
        self.store: Store | None = None
        self.clock: Callable[[], float] = time.time
        self.app = create_app(settings, store=self._store, clock=lambda: self.clock())

    def _store(self) -> Store:
        assert self.store is not None
        return self.store

    @classmethod
    def take(cls, settings: Settings) -> _App:
        secret = settings.api_keys.get_secret_value() if settings.api_keys else None
        key = (settings.model_dump_json(), secret)
        free = cls._free.setdefault(key, [])
        return free.pop() if free else cls(key, settings)

    def give_back(self) -> None:
        self.store = None
        self._free[self.key].append(self)


class _SyncTransport(httpx.BaseTransport):
    def __init__(self, service: InProcessService) -> None:
        self._service = service

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        return self._service.run(self._service._handle(request))


class _AsyncTransport(httpx.AsyncBaseTransport):
    def __init__(self, service: InProcessService) -> None:
        self._service = service

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        done = asyncio.run_coroutine_threadsafe(self._service._handle(request), self._service.loop)
        return await asyncio.wrap_future(done)
