"""Typed dependencies for the routes: who is calling, with which role, and the engine.

Each route takes one dependency (``Reader``, ``Trainer`` or ``Admin``): resolving a
dependency is a noticeable part of a request's cost, so the caller's key and the engine come
together.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ..auth import NOBODY_NEEDED, KeyRing, Principal, Role, Unauthorized, key_from_headers
from ..engine import Engine


@dataclass(frozen=True, slots=True)
class Caller:
    """The engine of this worker, and who is calling."""

    engine: Engine
    principal: Principal

    def check(self, role: Role, model: str | None = None) -> None:
        self.principal.check(role, model)

    def allows(self, model: str) -> bool:
        return self.principal.allows(model)


def principal_of(request: Request) -> Principal:
    keys: KeyRing | None = request.app.state.keys
    if keys is None:
        return NOBODY_NEEDED
    key = key_from_headers(request.headers.get("authorization"), request.headers.get("x-api-key"))
    if key is None:
        raise Unauthorized("An API key is needed: send 'Authorization: Bearer <key>'.")
    principal = keys.find(key)
    if principal is None:
        raise Unauthorized("The API key is not valid.")
    return principal


def caller(role: Role) -> Callable[[Request], Awaitable[Caller]]:
    # A coroutine: a plain function would cost a trip to a worker thread.
    async def resolve(request: Request) -> Caller:
        return Caller(request.app.state.engine, principal_of(request).check(role))

    return resolve


async def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


EngineDep = Annotated[Engine, Depends(get_engine)]
Reader = Annotated[Caller, Depends(caller(Role.predict))]
Trainer = Annotated[Caller, Depends(caller(Role.train))]
Admin = Annotated[Caller, Depends(caller(Role.admin))]
