"""The service's code run inside a benchmark's process rather than behind HTTP: on the event
loop a worker of ``perceptron serve`` runs on, and in a child process that runs a tree's code
(this one's or a baseline's) on a fresh redis-server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from harness.servers import fresh_redis

T = TypeVar("T")


def on_service_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on the event loop a worker of ``perceptron serve`` runs on: uvloop where
    it is installed (it is a dependency), as uvicorn picks it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def child_env(tree: Path) -> dict[str, str]:
    """The environment of a benchmark's child process that runs ``tree``'s service."""
    return {**os.environ, "PYTHONPATH": str(tree)}


def child_on_fresh_redis(
    script: str, tree: Path, args: list[str], redis_cpu: int | None = None
) -> Any:
    """``script --child URL *args`` run in ``tree`` (its service on the path) against a fresh
    redis-server (pinned to ``redis_cpu``, if given): the JSON of its output's last line."""
    with fresh_redis(redis_cpu) as url:
        out = subprocess.run(
            [sys.executable, script, "--child", url, *args],
            cwd=tree,
            env=child_env(tree),
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])
