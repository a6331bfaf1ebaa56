"""Typed dependencies for the routes: the engine, and who is calling with which role."""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from ..auth import NOBODY_NEEDED, KeyRing, Principal, Role, Unauthorized, key_from_headers
from ..engine import Engine


async def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


async def get_principal(request: Request) -> Principal:
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


def require(role: Role) -> Callable[[Principal], Awaitable[Principal]]:
    # Dependencies are coroutines: a plain function would cost a trip to a worker thread.
    async def check(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        return principal.check(role)

    return check


EngineDep = Annotated[Engine, Depends(get_engine)]
Reader = Annotated[Principal, Depends(require(Role.predict))]
Trainer = Annotated[Principal, Depends(require(Role.train))]
Admin = Annotated[Principal, Depends(require(Role.admin))]
