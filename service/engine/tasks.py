"""Ending asyncio tasks for sure: ``cancel_all``.

A cancellation can be lost. On Python 3.11, ``asyncio.wait_for`` swallows one that comes as
what it awaits completes, and its task goes on; redis-py sends every command through it when a
socket timeout is set (``PERCEPTRON_REDIS_TIMEOUT_S``), and the embedded store's client awaits
so too. So a task is cancelled again until it has ended, never cancelled once and awaited.

Light on purpose (asyncio alone): ``api/streams.py`` uses it, imported before any worker
starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

AGAIN_S = 0.1  # how soon a task still running is cancelled again


async def cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel each task, and again every ``AGAIN_S`` until each has ended. Nothing is
    raised: how each ended (its result, error or cancellation) stays on it, retrieved, so
    none is logged as an error nobody saw. ``tasks`` is read once, at the call: a set of them
    that changes meanwhile may be passed as it is."""
    tasks = list(tasks)
    while pending := [t for t in tasks if not t.done()]:
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=AGAIN_S)
    await asyncio.gather(*tasks, return_exceptions=True)
