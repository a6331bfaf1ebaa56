"""What may name a model and what a prediction id is: the rules, written once.

A name is checked where it enters the service (a request's schema, a path parameter through
:func:`check_name`, a prediction id through :meth:`PredictionId.parse`); code past that point
takes it as given. The store builds Redis keys only from names that pass :func:`valid_name`
(``store/keys.py``), so a name can never reach into another model's keys.

>>> PredictionId.parse("iris:AbCdEfGhIjKlMnOp")
PredictionId(model='iris', token='AbCdEfGhIjKlMnOp')
>>> str(PredictionId("iris", "AbCdEfGhIjKlMnOp"))
'iris:AbCdEfGhIjKlMnOp'
>>> PredictionId.parse("iris:short") is None
True

A token the service issues tells its own time: its first ``ISSUED_CHARS`` characters are the
Unix ms it was issued at, the rest random; an older token (16 characters) tells none.

>>> issued_ms(new_token(1_700_000_000_000))
1700000000000
>>> issued_ms("AbCdEfGhIjKlMnOp") is None
True
"""

from __future__ import annotations

import base64
import re
import secrets
from typing import NamedTuple

from service.errors import InvalidInput

NAME_CHARS = "[A-Za-z0-9_.-]"  # what a model's name is made of
NAME_MAX = 64  # and at most this many of them
# ... not dots alone: ".", ".." are path segments that a client, a proxy or a browser folds
# away before the request leaves it ("DELETE /models/.." would become "DELETE /")
NAME_PATTERN = f"^{NAME_CHARS}*[A-Za-z0-9_-]{NAME_CHARS}*$"  # (the length apart: NAME_MAX)
TOKEN_CHARS = "[A-Za-z0-9_-]"  # the random part of a prediction id: URL-safe base64
ID_SEPARATOR = ":"  # between a prediction id's model name and its token
ISSUED_BYTES = 6  # a token's time: Unix ms, big-endian (until the year 10889)
ISSUED_CHARS = 8  # ... as URL-safe base64: the token's first characters
RANDOM_BYTES = 12  # then this much randomness: 16 characters
TIMED_TOKEN_LENGTH = ISSUED_CHARS + 16

# A key's name, as its entry gives it (``alice=train:<key>``): what the model's history records
# for the updates the key caused (never the key).
KEY_NAME_PATTERN = "[A-Za-z0-9_.-]{1,64}"

NAME_RE = re.compile(NAME_PATTERN)
KEY_NAME_RE = re.compile(KEY_NAME_PATTERN)
TOKEN_RE = re.compile(f"{TOKEN_CHARS}{{16,64}}")
NAME_RULE = "use 1-64 letters, digits, '_', '-' or '.', not dots alone"  # (a model's name)
CHALLENGER_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SERVED = "served"  # the id the served learner is shown under; no challenger takes it
CHALLENGER_ID_RULE = (
    "A challenger's id is 1 to 64 letters, digits, '_', '-' or '.', starting with a letter or "
    f"digit, and not {SERVED!r}"
)
_ID_RE = re.compile(f"({NAME_CHARS}{{1,{NAME_MAX}}}){ID_SEPARATOR}({TOKEN_CHARS}{{16,64}})")


def valid_name(name: str) -> bool:
    """Whether ``name`` may name a model: 1-64 of letters, digits, ``_``, ``-``, ``.``, not
    dots alone.

    >>> [valid_name(n) for n in ("iris", "v1.2", ".hidden", "..", "a" * 65, "x\\n")]
    [True, True, True, False, False, False]
    """
    # fullmatch, not match: "$" allows a final newline
    return len(name) <= NAME_MAX and NAME_RE.fullmatch(name) is not None


def valid_challenger_id(id: str) -> bool:
    """Whether ``id`` may name a challenger (``CHALLENGER_ID_RULE``).

    >>> [valid_challenger_id(i) for i in ("pa", "a.b-1", "_x", "served", "a/b", "")]
    [True, True, False, False, False, False]
    """
    return CHALLENGER_ID_RE.fullmatch(id) is not None and id != SERVED


def check_name(name: str) -> str:
    """``name``, or a 400 ``invalid_model_name`` that says what a name may hold."""
    if not valid_name(name):
        raise InvalidInput(
            f"Invalid model name {name[:80]!r}: {NAME_RULE}.", code="invalid_model_name"
        )
    return name


def valid_token(token: str) -> bool:
    """Whether ``token`` may be the random part of a prediction id."""
    return TOKEN_RE.fullmatch(token) is not None


def new_token(now_ms: int) -> str:
    """A prediction's token, issued at Unix ms ``now_ms``: that time, then random characters."""
    issued = base64.urlsafe_b64encode(now_ms.to_bytes(ISSUED_BYTES, "big")).decode()
    return issued + secrets.token_urlsafe(RANDOM_BYTES)


def issued_ms(token: str) -> int | None:
    """The Unix ms a valid token was issued at, or None for one that tells no time (an id of
    an older version of the service)."""
    if len(token) != TIMED_TOKEN_LENGTH:
        return None
    return int.from_bytes(base64.urlsafe_b64decode(token[:ISSUED_CHARS]), "big")


class PredictionId(NamedTuple):
    """A prediction's id, ``<model>:<token>``, parsed once where it enters the service."""

    model: str
    token: str

    @classmethod
    def parse(cls, text: str) -> PredictionId | None:
        """The id ``text`` holds, or None if it cannot be one (such a prediction is unknown)."""
        m = _ID_RE.fullmatch(text)
        return None if m is None else cls(m[1], m[2])

    def __str__(self) -> str:
        return f"{self.model}{ID_SEPARATOR}{self.token}"
