"""A redis-server of the service's own: ``perceptron serve`` with ``PERCEPTRON_LOCAL_REDIS_DIR``
(what ``deploy/serve.sh`` sets when no ``PERCEPTRON_REDIS_URL`` is given).

It keeps its data in that folder as an append-only file, so models outlive the service; it
listens on a Unix socket only, readable by this user alone (no TCP port: nothing else on the
machine or the network reaches it); it runs in a session of its own, so that a Ctrl-C in the
terminal stops the service first and the store after it; and it stops when the service stops
(SIGTERM: Redis writes the append-only file out and exits), or, on Linux, when the process that
started it dies. A lock on the folder keeps a second one from running on the same data.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import redis

SOCKET = "redis.sock"
LOG = "redis.log"
LOCK = "lock"
MAX_SOCKET_PATH = 100  # a Unix socket's path holds at most 107 bytes
PR_SET_PDEATHSIG = 1


class LocalRedisError(RuntimeError):
    """The local redis-server could not be started; the message says why and what to do."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class LocalRedis:
    """One redis-server keeping its data in ``folder``; :meth:`start` it, then :meth:`stop`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder.resolve()
        self.socket = self.folder / SOCKET
        self.temporary: Path | None = None  # a short folder for the socket, when needed
        if len(str(self.socket).encode()) > MAX_SOCKET_PATH:
            self.temporary = Path(tempfile.mkdtemp(prefix="perceptron-redis-"))
            self.socket = self.temporary / SOCKET
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock: TextIO | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}?db=0"

    def _answers(self) -> bool:
        """Whether a Redis answers on the socket (one still loading its data counts)."""
        client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1)
        try:
            client.ping()
        except redis.BusyLoadingError:
            return True
        except (redis.ConnectionError, redis.TimeoutError):
            return False
        finally:
            client.close()
        return True

    def start(self, timeout_s: float = 30.0) -> str:
        """Start redis-server and wait until it answers; returns its URL."""
        exe = shutil.which("redis-server")
        if exe is None:
            raise LocalRedisError(
                "redis-server is not installed: run deploy/setup.sh (or apt-get install "
                "redis-server), or set PERCEPTRON_REDIS_URL to a Redis of your own."
            )
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # One redis-server per folder: the lock is held by this process and by the
        # redis-server it starts (which inherits it), until both have exited.
        self.lock = (self.folder / LOCK).open("w")
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.lock.close()
            self.lock = None
            raise LocalRedisError(
                f"Another process uses {self.folder}: a `perceptron serve` (or deploy/serve.sh) "
                "running on it, or its redis-server, still stopping. Stop it first, or use a "
                "folder of its own (PERCEPTRON_LOCAL_REDIS_DIR)."
            ) from None
        log = self.folder / LOG
        options = {
            "port": "0",  # no TCP port
            "unixsocket": str(self.socket),
            "unixsocketperm": "700",
            "dir": str(self.folder),
            "appendonly": "yes",
            "appendfsync": "everysec",
            "save": "",  # the append-only file only
            "maxmemory-policy": "noeviction",
            "logfile": str(log),
        }
        args = [exe, *(x for name, value in options.items() for x in (f"--{name}", value))]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            pass_fds=[self.lock.fileno()],
        )
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
                raise LocalRedisError(
                    f"redis-server did not start with its data in {self.folder}; the end of "
                    f"{log}:\n" + "\n".join(tail)
                )
            time.sleep(0.05)
        return self.url

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop redis-server: it writes its append-only file out first."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def serving_local_redis(folder: str, serve: Callable[[], int]) -> int:
    """Start a local redis-server on ``folder``, run ``serve`` on it (its workers too: they
    read ``PERCEPTRON_REDIS_URL``), then stop it, however the service stops."""
    store = LocalRedis(Path(folder))
    try:
        os.environ["PERCEPTRON_REDIS_URL"] = store.start()
    except LocalRedisError as e:
        store.stop()
        sys.stderr.write(f"perceptron serve: {e}\n")
        return 2
    sys.stderr.write(
        f"Store: a redis-server of the service's own, its data in {store.folder} (socket "
        f"{store.socket}); it stops with the service.\n"
    )
    # After its graceful shutdown uvicorn raises SIGTERM again: exit through the finally.
    signal.signal(signal.SIGTERM, _exit)
    try:
        return serve()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        store.stop()
