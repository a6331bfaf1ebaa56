"""Who is calling: the route class (the caller's key first, then the body, parsed with orjson:
``json_bodies.py``), and the routes' dependencies (who is calling, and this worker).

Each route takes one dependency (``Reader``, ``Trainer`` or ``Admin``): resolving a
dependency is a noticeable part of a request's cost, so the caller's key and this worker come
together. The key is resolved once per request and kept in ``request.state``: routes of
``FastJSONRoute`` resolve it, and check the route's role, before reading the body (a caller
without a valid key must not get a large body read and parsed); the dependency then finds it
there and checks the model, which only the body names.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

import anyio.to_thread
import orjson
from fastapi import Depends
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from service.admin.worker import Worker
from service.api.auth import (
    NOBODY_NEEDED,
    Forbidden,
    KeyRing,
    Principal,
    Role,
    Unauthorized,
    key_from_headers,
)
from service.api.json_bodies import (
    MAX_DEPTH,
    THREAD_BYTES,
    TooDeep,
    as_utf8,
    nesting_deeper_than,
    parse_json,
    refuse_duplicate_keys,
)


class FastJSONRoute(APIRoute):
    """Checks the caller's key before anything reads the body, then fills the request's
    parsed-JSON cache with orjson, several times faster on big bodies.

    A route whose dependency needs a key (``Reader``, ``Trainer``, ``Admin``) refuses a missing
    or wrong key (401) and a key without the route's role (403) before reading the body: a
    caller without one costs no reading, parsing or memory. The dependency finds the key's
    principal in ``request.state`` and checks the model, which only the body names.

    Bodies nested deeper than ``MAX_DEPTH`` are refused (400 ``malformed_json``) before they
    are parsed; so is an object that names a key twice (400 ``malformed_json``), whichever
    would win. Bodies over ``THREAD_BYTES`` are parsed in a worker thread. Bodies orjson
    refuses (NaN or Infinity literals, integers past 64 bits, bad JSON, UTF-16) are left to
    FastAPI's own parser, so every error keeps its usual, precise answer.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        # The route's own dependencies and body: the app adds none when it includes a router.
        role = role_needed(self.dependant)
        reads_body = self.body_field is not None

        async def route(request: Request) -> Response:
            if role is not None:
                checked(authenticate(request), role)
            if reads_body:
                body = await request.body()
                if body:
                    try:
                        if len(body) > THREAD_BYTES:
                            request._json = await anyio.to_thread.run_sync(parse_json, body)
                        else:
                            request._json = parse_json(body)
                    except orjson.JSONDecodeError:
                        # The standard parser, FastAPI's, also reads UTF-16 and UTF-32.
                        other = as_utf8(body)
                        if other is not None and nesting_deeper_than(other, MAX_DEPTH):
                            raise TooDeep() from None
                        refuse_duplicate_keys(body if other is None else other)
            return await handler(request)

        return route


def role_needed(dependant: Dependant) -> Role | None:
    """The highest role a dependency of the route asks for; None: the route needs no key."""
    roles = [d.call.role for d in dependant.dependencies if isinstance(d.call, CallerOf)]
    roles += filter(None, (role_needed(d) for d in dependant.dependencies))
    return max(roles, default=None)


# -- the routes' dependencies: who is calling ------------------------------------------


@dataclass(frozen=True, slots=True)
class Caller:
    """This worker, and who is calling."""

    worker: Worker
    principal: Principal

    def check(self, role: Role, model: str | None = None) -> None:
        checked(self.principal, role, model)

    def allows(self, model: str) -> bool:
        return allowed(self.principal, model)

    @property
    def source(self) -> str:
        """The key's name, which the model's history records for the updates it causes."""
        return self.principal.name


def allowed(principal: Principal, model: str) -> bool:
    """Whether ``principal``'s key may use ``model`` (a key limited to some models)."""
    return principal.models is None or model in principal.models


def checked(principal: Principal, role: Role, model: str | None = None) -> Principal:
    """``principal``, once it may act in ``role`` (on ``model``, when one is named): else 403."""
    if principal.role < role:
        raise Forbidden(f"This key has the '{principal.role.name}' role; '{role.name}' is needed.")
    if model is not None and not allowed(principal, model):
        raise Forbidden(f"This key is not allowed to use model {model[:64]!r}.")
    return principal


def principal_of(request: Request) -> Principal:
    """Who is calling: the principal ``authenticate`` kept, or else the key's, looked up now."""
    known: Principal | None = getattr(request.state, "principal", None)
    return known if known is not None else authenticate(request)


def authenticate(request: Request) -> Principal:
    """Who is calling, by the request's key (401 without a valid one); kept in
    ``request.state`` for the request's dependencies."""
    keys: KeyRing | None = request.app.state.keys
    if keys is None:
        principal = NOBODY_NEEDED
    else:
        key = key_from_headers(
            request.headers.getlist("authorization"), request.headers.getlist("x-api-key")
        )
        if key is None:
            raise Unauthorized("An API key is needed: send 'Authorization: Bearer <key>'.")
        found = keys.find(key)
        if found is None:
            raise Unauthorized("The API key is not valid.")
        principal = found
    request.state.principal = principal
    return principal


class CallerOf:
    """The dependency of a route that needs a key with ``role``: its ``Caller``.

    A class rather than a closure so that a route can see which role it needs
    (``FastJSONRoute`` checks it before reading the body).
    """

    __slots__ = ("role",)

    def __init__(self, role: Role) -> None:
        self.role = role

    # A coroutine: a plain function would cost a trip to a worker thread.
    async def __call__(self, request: Request) -> Caller:
        return Caller(request.app.state.worker, checked(principal_of(request), self.role))


def caller(role: Role) -> CallerOf:
    return CallerOf(role)


async def get_worker(request: Request) -> Worker:
    worker: Worker = request.app.state.worker
    return worker


WorkerDep = Annotated[Worker, Depends(get_worker)]
Reader = Annotated[Caller, Depends(caller(Role.predict))]
Trainer = Annotated[Caller, Depends(caller(Role.train))]
Admin = Annotated[Caller, Depends(caller(Role.admin))]
