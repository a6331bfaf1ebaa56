"""Counts and times every HTTP request (prometheus-client's counters of ``metrics/``): the
ASGI side of the Prometheus figures, kept out of the domain layers, which record theirs."""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.metrics.prometheus import LATENCY, REQUESTS


class RequestMetrics:
    """Counts and times every HTTP request by its route template (not its raw path)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # Labelled children looked up once: ``labels(...)`` is a locked dict lookup per call.
        self._counts: dict[tuple[str, str, int], Any] = {}
        self._times: dict[tuple[str, str], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope["method"]
            count = self._counts.get((route, method, status))
            if count is None:
                count = self._counts[route, method, status] = REQUESTS.labels(
                    route, method, str(status)
                )
            timer = self._times.get((route, method))
            if timer is None:
                timer = self._times[route, method] = LATENCY.labels(route, method)
            count.inc()
            timer.observe(time.perf_counter() - start)
