"""Keep-alive connections that move between workers: each is closed once it is a few seconds
old, or (``ShedWhileWriting``) at once while its worker writes a model the others feed.

Workers share one listening socket, and a keep-alive connection stays with the worker that
accepted it. A burst of new connections can land mostly on one worker, and a producer with
a handful of long-lived connections then leaves the other cores idle for as long as they
live. Answering with ``Connection: close`` once a connection is ``max_age_s`` old makes the
client open a new one (HTTP clients do so transparently), and a new connection goes to
whichever worker accepts first: an idle worker, waiting on the socket, wins over a busy one.
So the spread corrects itself within seconds, for the price of one TCP handshake per
connection per ``max_age_s``. Installed only when ``PERCEPTRON_CONNECTION_MAX_AGE_S`` is set,
for clients that reach the service directly: behind nginx, its ``keepalive_time``
(``deploy/nginx.conf``) recycles nginx's connections instead.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PRUNE_AT = 4096  # connections remembered before forgetting those that must have gone


class RecycleConnections:
    """Ask each client to reconnect once its connection is ``max_age_s`` old (0: never)."""

    def __init__(
        self, app: ASGIApp, max_age_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.app = app
        self.max_age_s = max_age_s
        self.clock = clock
        self._opened: dict[tuple[str, int], float] = {}  # client (host, port) -> first seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if scope["type"] != "http" or not self.max_age_s or not client:
            await self.app(scope, receive, send)
            return
        now = self.clock()
        key = (client[0], client[1])
        opened = self._opened.setdefault(key, now)
        if now - opened < self.max_age_s:
            if len(self._opened) > PRUNE_AT:
                self._prune(now)
            await self.app(scope, receive, send)
            return
        del self._opened[key]  # the client's next connection may reuse the port: start afresh
        await self.app(scope, receive, closing(send))

    def _prune(self, now: float) -> None:
        """Forget connections older than the age limit: a live one would have been recycled."""
        limit = now - 2 * self.max_age_s
        self._opened = {k: t for k, t in self._opened.items() if t > limit}


CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # a cgroup's CPU quota: "quota period", or "max ..."


def usable_cores(cpu_max: Path = CPU_MAX) -> int:
    """The cores this process may use: those it may run on (its CPU affinity), and no more
    than its cgroup's CPU quota (e.g. a container's ``cpus:``), rounded up."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux)
        cores = os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no such cgroup file, or not one it can read: the affinity alone
    return cores


def writer_sheds(workers: int, shed_from: int, cores: int) -> bool:
    """Whether a writer sheds its connections (``ShedWhileWriting``) in a service of
    ``workers`` workers on ``cores`` cores: from ``shed_from`` workers (0: never), and only
    where each worker has a core of its own. With more workers than cores, the others have no
    core to spare for the HTTP work it sheds: moved there, it costs as much, and every request
    of the writer's clients becomes a hand-over besides (figure 24 of docs/performance.md)."""
    return 0 < shed_from <= workers <= cores


class ShedWhileWriting:
    """While this worker writes a model that other workers hand requests to (its writers are
    fed: ``Writers.fed``), ask each client to reconnect after its answer
    (PERCEPTRON_WRITER_SHEDS_FROM_WORKERS).

    A model's writer learns every /learn of the model: those of its own connections, each a
    whole HTTP request to serve, and those the other workers hand over, each a small part of
    one. With many workers, the writer's process is where one model's learning stops growing
    (figure 16 of docs/performance.md), while the others have cores to spare. Closing its
    connections sends their clients to the other workers: a new connection goes to whichever
    worker accepts first, and a busy writer is the last to. Its core then goes to learning.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            # (asked as the answer starts: the request itself may have made it the writer)
            if message["type"] == "http.response.start":
                worker = getattr(scope["app"].state, "worker", None)
                if worker is not None and worker.learning.writers.fed():
                    message = _closed(message)
            await send(message)

        await self.app(scope, receive, sending)


def closing(send: Send) -> Send:
    """``send`` with the answer's headers saying ``Connection: close`` (and only that)."""

    async def closing_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = _closed(message)
        await send(message)

    return closing_send


def _closed(start: Message) -> Message:
    headers = [(k, v) for k, v in start.get("headers", []) if k != b"connection"]
    return {**start, "headers": [*headers, (b"connection", b"close")]}
