"""Typed dependencies for the routes: who is calling, with which role, and this worker.

Each route takes one dependency (``Reader``, ``Trainer`` or ``Admin``): resolving a
dependency is a noticeable part of a request's cost, so the caller's key and this worker come
together.

The key is resolved once per request and kept in ``request.state``: routes of
``FastJSONRoute`` resolve it, and check the route's role, before reading the body (a caller
without a valid key must not get a large body read and parsed); the dependency then finds it
there and checks the model, which only the body names.
"""

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from service.api.auth import NOBODY_NEEDED, KeyRing, Principal, Role, Unauthorized, key_from_headers
from service.engine.worker import Worker


@dataclass(frozen=True, slots=True)
class Caller:
    """This worker, and who is calling."""

    worker: Worker
    principal: Principal

    def check(self, role: Role, model: str | None = None) -> None:
        self.principal.check(role, model)

    def allows(self, model: str) -> bool:
        return self.principal.allows(model)

    @property
    def source(self) -> str:
        """The key's name, which the model's history records for the updates it causes."""
        return self.principal.name


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
        return Caller(request.app.state.worker, principal_of(request).check(self.role))


def caller(role: Role) -> CallerOf:
    return CallerOf(role)


async def get_worker(request: Request) -> Worker:
    worker: Worker = request.app.state.worker
    return worker


WorkerDep = Annotated[Worker, Depends(get_worker)]
Reader = Annotated[Caller, Depends(caller(Role.predict))]
Trainer = Annotated[Caller, Depends(caller(Role.train))]
Admin = Annotated[Caller, Depends(caller(Role.admin))]
