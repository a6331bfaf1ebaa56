"""Real servers for the tests: redis-server and the service, on free loopback ports."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType

import httpx
import redis
import uvicorn

from service.api.edge import BoundedHttpToolsProtocol
from service.app import create_app
from service.cli.loopback import free_port, redis_server_command, wait_until
from service.settings import Settings


class RedisServer:
    """A throwaway redis-server on loopback; stopped by its own PID."""

    def __init__(self, *extra: str) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="pcp-redis-")
        self.args = redis_server_command(self.port, self.dir, *extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        wait_until(client.ping, what="redis-server")
        client.close()
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)
        self.proc = None


class _Server(uvicorn.Server):
    """uvicorn's server, whose main loop ``stop`` wakes at once rather than at its next tick
    (every 0.1 s): a test's teardown does not wait for it. It shuts down as uvicorn's does."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)
            should_exit = await self.on_tick(counter)

    def stop(self) -> None:
        self.should_exit = True  # read by on_tick, whether or not the loop runs yet
        if self._loop is not None:
            with suppress(RuntimeError):  # the loop has closed: the server is gone already
                self._loop.call_soon_threadsafe(self._wake.set)


class ServiceThread:
    """The service's ASGI app under uvicorn, in a thread of the test process."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        self.port = free_port()
        self.app = create_app(settings, clock=clock)
        # The HTTP protocol perceptron serve runs (its bounds on a connection: api/edge.py)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            http=BoundedHttpToolsProtocol,
        )
        self.server = _Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> ServiceThread:
        self.thread.start()
        # Looked at more often than wait_until does (it starts in milliseconds, once a test)
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("service thread: it ended without starting")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:g} s waiting for service thread")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(10)

    def __enter__(self) -> ServiceThread:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def worker_pids(pid: int) -> list[int]:
    """The processes a service's process started (its uvicorn workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children]


class ServiceProcess:
    """``perceptron serve`` as a real process (with its own uvicorn workers)."""

    def __init__(self, redis_url: str | None, workers: int = 1, **env: str) -> None:
        self.port = free_port()
        self.env = {
            **os.environ,
            "PERCEPTRON_AUTH": "false",
            **env,
            "PERCEPTRON_LOG_LEVEL": "warning",
        }
        if redis_url:
            self.env["PERCEPTRON_REDIS_URL"] = redis_url
        self.cmd = [
            sys.executable,
            "-m",
            "service.cli.main",
            "serve",
            "--port",
            str(self.port),
            "--workers",
            str(workers),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ServiceProcess:
        """Start it and wait until it is ready (stopped again when it is not: no process of a
        test outlives it)."""
        proc = self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=Path(__file__).parents[1])
        try:
            wait_until(
                lambda: httpx.get(self.url + "/readyz", timeout=1).status_code == 200,
                timeout=timeout,
                what=f"service on port {self.port}",
                alive=lambda: proc.poll() is None,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@contextmanager
def running(server: ServiceProcess) -> Iterator[ServiceProcess]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


def load_topology() -> ModuleType:
    """``deploy/topology.py`` (nginx in front of replicas of the service), as a module."""
    path = Path(__file__).resolve().parents[1] / "deploy" / "topology.py"
    spec = importlib.util.spec_from_file_location("deploy_topology", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
