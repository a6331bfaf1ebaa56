"""What every store operation (``ops/``) is made of: its Lua script with its named slots,
the store that runs it (``Runner``), and its reply's values read as text or bytes.

A script's named slots are the one declaration of its KEYS and
ARGV, from which both the script's header and its caller's lists are made.

A key slot is named after the ``ModelKeys`` property it holds (``meta``, ``log``, ...), so the
caller's keys come from the model's names in the declared order; a key that is no model's
property (an answer's key, the registry) is given by name. An argument slot ending in ``#`` is
a number: the header reads it with ``tonumber``. A script may take more keys or arguments
past its fixed slots (``rest_keys``, ``rest_args``): the header then says where they start,
as ``<NAME>_AT``. Every script starts with the protocol's constants it names (of
``protocol.LUA``, only those: Lua allows 200 locals in a chunk), then its slots as Lua locals
(key ``meta`` is ``META``, argument ``epoch`` is ``EPOCH``), then the shared functions it uses
(``ops/parts.py``), then its body.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from service.contract.store_protocol import LUA, Status
from service.contract.store_values import SyncData
from service.errors import Conflict, ModelNotFound, ModelStateLost, StaleModel
from service.store.keys import ModelKeys

Arg = bytes | str | int | float
log = logging.getLogger("perceptron")
NUMBER = "#"


@dataclass(frozen=True)
class Script:
    name: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    body: str
    parts: tuple[str, ...] = ()
    rest_keys: str | None = None
    rest_args: str | None = None
    # Sent behind a blocking wait (Store.run_with_wait): every new connection loads it before
    # its first command (store/connect.py), so that a Redis that does not hold it (new, or
    # restarted) does not fail it with NOSCRIPT after the wait in front of it ran its course.
    waited: bool = False
    constants: str = field(init=False, repr=False)  # the protocol's constants it names
    header: str = field(init=False, repr=False)
    lua: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        names = [*self.keys, *self.arg_names]
        for rest in (self.rest_keys, self.rest_args):
            if rest is not None:
                names.append(f"{rest}_at")
        taken = set(_declared(LUA))
        clash = [n for n in names if n.upper() in taken or names.count(n) > 1]
        if clash:
            raise ValueError(f"{self.name}: slot names {clash} clash with a constant or another")
        header = [f"local {k.upper()} = KEYS[{i}]" for i, k in enumerate(self.keys, 1)]
        for i, a in enumerate(self.args, 1):
            name = a.rstrip(NUMBER).upper()
            header.append(
                f"local {name} = tonumber(ARGV[{i}])"
                if a.endswith(NUMBER)
                else f"local {name} = ARGV[{i}]"
            )
        if self.rest_keys is not None:
            header.append(f"local {self.rest_keys.upper()}_AT = {len(self.keys) + 1}")
        if self.rest_args is not None:
            header.append(f"local {self.rest_args.upper()}_AT = {len(self.args) + 1}")
        object.__setattr__(self, "header", "\n".join(header) + "\n")
        code = "".join(self.parts) + self.body
        object.__setattr__(self, "constants", constants_named(code))
        object.__setattr__(self, "lua", self.constants + self.header + code)

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.rstrip(NUMBER) for a in self.args)

    def key_list(
        self, k: ModelKeys, given: Mapping[str, str] | None = None, rest: Sequence[str] = ()
    ) -> list[str]:
        """KEYS in the declared order: each the model's key of that name, or ``given``'s."""
        given = given or {}
        if not given.keys() <= set(self.keys) or (rest and self.rest_keys is None):
            raise ValueError(f"{self.name} takes the keys {self.keys}, not {sorted(given)}")
        return [given[s] if s in given else getattr(k, s) for s in self.keys] + list(rest)

    def arg_list(self, rest: Sequence[Arg] = (), **values: Arg) -> list[Arg]:
        """ARGV in the declared order, from every slot's value by name (and any more)."""
        names = self.arg_names
        if len(values) != len(names) or (rest and self.rest_args is None):
            raise ValueError(f"{self.name} takes the arguments {names}, not {sorted(values)}")
        return [values[n] for n in names] + list(rest)


def _declared(lua: str) -> list[str]:
    return [line.split()[1] for line in lua.splitlines() if line.startswith("local ")]


def constants_named(code: str) -> str:
    """The lines of ``protocol.LUA`` that declare a constant ``code`` names, in their order."""
    words = set(re.findall(r"\b[A-Z_][A-Z0-9_]*\b", code))
    return "".join(
        line + "\n"
        for line in LUA.splitlines()
        if line.startswith("local ") and line.split()[1] in words
    )


# -- the store that runs an operation's script ------------------------------------------

Client = Redis | RedisCluster


class Runner(Protocol):
    client: Client
    said_lost: set[str]  # the models this store logged as not served (``state_lost``)

    @property
    def sharded(self) -> bool:
        """Under Redis Cluster: the registry lives on another shard than a model's keys."""

    async def run(self, script: Script, keys: list[str], args: list[Arg]) -> Any:
        """The script's reply."""

    async def run_with_wait(
        self,
        script: Script,
        keys: list[str],
        args: list[Arg],
        *,
        before: tuple[Arg, ...] | None = None,
        after: tuple[Arg, ...] | None = None,
        first: tuple[Arg, ...] | None = None,
    ) -> tuple[Any, Any]:
        """The script with a blocking wait sent before or after it in one round trip (and a
        plain write ``first``)."""

    async def sync_data(self, keys: ModelKeys, reply: list[Any], from_version: int) -> SyncData:
        """A sync reply (``parts.SYNC``): its entries, or read from where it says."""


def status_of(store: Runner, name: str, reply: list[Any]) -> Status:
    """The status every script's reply starts with, once the model is known to exist at the
    caller's epoch: NO_MODEL, STALE_EPOCH and STATE_LOST (with its reason next) are raised."""
    status = int(reply[0])
    if status == Status.NO_MODEL:
        raise ModelNotFound(name)
    if status == Status.STALE_EPOCH:
        raise StaleModel(name)
    if status == Status.STATE_LOST:
        raise state_lost(store, name, text(reply[1]))
    if status == Status.HAS_CHALLENGERS:
        raise has_challengers(name)
    return Status(status)


def has_challengers(name: str) -> Conflict:
    """A rollback, an undo, an import or a reset refused: the model has challengers, whose
    states follow its stream of labels and would not follow such a change exactly."""
    return Conflict(
        f"Model {name!r} has challengers: delete them first (DELETE "
        f"/models/{name}/challengers/<id>); a rollback, an undo, an import or a reset would "
        "leave them learning a stream the model no longer has.",
        code="model_has_challengers",
    )


def state_lost(store: Runner, name: str, what: str) -> ModelStateLost:
    """The error of a model that is not served as its keys are incomplete; logged once per
    model by a store (a worker answers every request for it so, and would log each)."""
    if name not in store.said_lost:
        store.said_lost.add(name)
        log.error("model %r is not served: %s", name, what)
    return ModelStateLost(name, what)


def text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def raw(v: bytes | str) -> bytes:
    return v if isinstance(v, bytes) else v.encode()
