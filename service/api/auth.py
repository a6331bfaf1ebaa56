"""API keys with roles. Keys are kept only as SHA-256 digests and compared in constant time.
(The routes' dependencies that resolve them per request: ``callers.py``.)"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from service.contract.names import KEY_NAME_RE
from service.errors import ServiceError


class Role(enum.IntEnum):
    """Each role may do what the roles below it may."""

    predict = 1  # predict, read models, weights and metrics
    train = 2  # also feedback and learn
    admin = 3  # also create, delete, reset, export and import models


class Unauthorized(ServiceError):
    status = 401
    code = "unauthorized"


class Forbidden(ServiceError):
    status = 403
    code = "forbidden"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a role, the models the key is limited to (None: every model), and the
    name the history records (the entry's, else ``key-`` and 8 hex digits of the key's
    SHA-256: never the key; empty when keys are off)."""

    role: Role
    models: frozenset[str] | None = None
    name: str = ""


NOBODY_NEEDED = Principal(Role.admin)  # when auth is off


class KeyError_(ValueError):
    """A key entry that cannot be read; the message never contains the key."""


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The configured keys, as digests with their principals."""

    entries: tuple[tuple[bytes, Principal], ...]

    @classmethod
    def parse(cls, lines: Iterable[str]) -> KeyRing:
        """Entries ``role:key`` or ``role:key:model1|model2``, each after an optional
        ``name=``, one per line or comma."""
        entries = []
        for n, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(":")
            name, named, parts[0] = parts[0].rpartition("=")
            if len(parts) not in (2, 3) or parts[0] not in Role.__members__ or not parts[1]:
                raise KeyError_(
                    f"API key entry {n} is not 'role:key' or 'role:key:model|model' with a role "
                    "among predict, train, admin (after an optional 'name=')."
                )
            if named and not KEY_NAME_RE.fullmatch(name):
                raise KeyError_(
                    f"API key entry {n}: a key's name is 1 to 64 letters, digits, '_', '.' or '-'."
                )
            if len(parts[1]) < 16:
                raise KeyError_(f"API key entry {n}: keys must be at least 16 characters long.")
            models = frozenset(parts[2].split("|")) if len(parts) == 3 else None
            digest = _digest(parts[1])
            name = name or f"key-{digest.hex()[:8]}"
            entries.append((digest, Principal(Role[parts[0]], models, name)))
        return cls(tuple(entries))

    @classmethod
    def load(cls, inline: str | None, path: Path | None) -> KeyRing:
        lines: list[str] = []
        if inline:
            lines += inline.replace(",", "\n").splitlines()
        if path is not None:
            lines += path.read_text().splitlines()
        return cls.parse(lines)

    def find(self, key: str) -> Principal | None:
        """The principal of ``key``; every entry is compared, so timing tells nothing."""
        digest = _digest(key)
        found = None
        for stored, principal in self.entries:
            if hmac.compare_digest(stored, digest):
                found = principal
        return found


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def key_from_headers(authorizations: list[str], api_keys: list[str]) -> str | None:
    """The key a request carries, in ``Authorization: Bearer`` or ``X-API-Key`` (each header
    as often as it was sent); None without one. Two different keys are refused, whichever is
    valid: a request is one caller's.
    """
    keys = {k.strip() for k in api_keys if k.strip()}
    for authorization in authorizations:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            keys.add(value.strip())
    if len(keys) > 1:
        raise Unauthorized(
            "The request carries more than one API key (Authorization: Bearer and X-API-Key "
            "differ, or a header is repeated): send one."
        )
    return next(iter(keys), None)
