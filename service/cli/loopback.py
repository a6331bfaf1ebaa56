"""Servers started on this machine, for those who start them: a free loopback port, a wait for
a server to answer, and the command line of a throwaway redis-server.

Used by the tests (``tests/servers.py``), the benchmarks (``deploy/bench/``) and the
plain-process topology (``deploy/topology.py``); standard library only. Everything binds to
127.0.0.1.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

HOST = "127.0.0.1"
POLL_S = 0.05


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def wait_until(
    check: Callable[[], object],
    timeout: float = 10.0,
    what: str = "condition",
    alive: Callable[[], bool] | None = None,
) -> None:
    """Call ``check`` until it answers truthy; an exception it raises counts as not yet.

    Raises TimeoutError after ``timeout`` seconds, and RuntimeError at once when ``alive`` (the
    process being waited for) says it has exited.
    """
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None and not alive():
            raise RuntimeError(f"{what}: the process exited")
        try:
            if check():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_S)


def redis_server_command(port: int, folder: str | Path, *extra: str) -> list[str]:
    """redis-server on ``port`` of loopback, persisting nothing, its files in ``folder``; then
    ``extra`` options (a later option overrides an earlier one)."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed: run deploy/setup.sh test")
    return [
        exe,
        "--port",
        str(port),
        "--bind",
        HOST,
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(folder),
        *extra,
    ]
