"""A route class that parses JSON bodies with orjson, falling back to the standard parser."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response


class FastJSONRoute(APIRoute):
    """Fills the request's parsed-JSON cache with orjson, several times faster on big bodies.

    Bodies orjson refuses (NaN or Infinity literals, integers past 64 bits, bad JSON) are left
    to FastAPI's own parser, so every error keeps its usual, precise answer.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            if request.method in ("POST", "PUT"):
                body = await request.body()
                if body:
                    try:
                        request._json = orjson.loads(body)
                    except orjson.JSONDecodeError:
                        pass
            return await handler(request)

        return route
