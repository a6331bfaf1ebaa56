"""JSON bodies in and out: a request's body checked (nesting depth, a key named twice) and
parsed with orjson, and an answer serialised by orjson."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import orjson
from starlette.responses import Response

from service.errors import ServiceError

# No request of this API nests more than 4 levels ({"features": [[...]]}, an export's config).
# Far deeper documents are what breaks: orjson parses up to 1024 levels, and the handlers'
# recursive work on such a value (repr, comparisons) runs out of stack around 1000.
MAX_DEPTH = 32
# Bodies larger than this are checked and parsed in a worker thread. orjson holds the GIL, so
# the event loop still waits while it parses, but parsing and the handler's own work (checks,
# encoding, learning) become two stalls instead of one as long as both: the other requests of
# this worker get answers in between. Below it parsing takes a few ms, less than the hop.
THREAD_BYTES = 1024 * 1024


class MalformedJSON(ServiceError):
    """The body cannot be read as a JSON document this service takes."""

    status = 400
    code = "malformed_json"


class TooDeep(MalformedJSON):
    def __init__(self) -> None:
        super().__init__(
            f"The request body is nested too deeply: arrays and objects more than {MAX_DEPTH} "
            "levels within each other."
        )


class DuplicateKey(MalformedJSON):
    def __init__(self, key: str) -> None:
        super().__init__(
            f"The request body names {key!r} twice in one object: each key at most once "
            "(which one would count is not defined)."
        )


def parse_json(body: bytes) -> Any:
    """The document in ``body``: TooDeep past MAX_DEPTH, DuplicateKey for an object that
    names a key twice, orjson.JSONDecodeError if orjson cannot read it."""
    if nesting_deeper_than(body, MAX_DEPTH):
        raise TooDeep()
    document = orjson.loads(body)
    # orjson keeps the last of two: count the members, and look only when the counts differ.
    # Parsed members are at most the colons outside strings, which are at most all colons:
    # when all colons are members, no key was named twice.
    parsed = members_parsed(document)
    if body.count(b":") != parsed and members_written(body) != parsed:
        refuse_duplicate_keys(body)
    return document


def refuse_duplicate_keys(body: bytes | str) -> None:
    """DuplicateKey when an object of the JSON text ``body`` names a key twice."""

    def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                raise DuplicateKey(key)
            obj[key] = value
        return obj

    try:
        json.loads(body, object_pairs_hook=once)
    except ValueError:
        pass  # not JSON to the standard parser either: its own error is answered


_LOOK_INTO = 64  # members of an object whose every value is looked at for more objects
_STRING = re.compile(rb'"[^"]*"')  # on the text of quotes and colons alone
_NOT_COLONS = bytes(sorted(set(range(256)) - set(b':"')))


def members_written(body: bytes) -> int:
    """How many members the objects of the JSON text ``body`` write: its colons outside
    strings. One pass in C keeps quotes and colons; strings then go, by pattern when few
    are left, else by the quotes' running count (numpy)."""
    if b"\\" in body:
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = body.translate(None, _NOT_COLONS).replace(b'""', b"")  # (no colon inside those)
    if len(marks) <= _CHUNK // 256:
        return _STRING.sub(b"", marks).count(b":")
    codes = np.frombuffer(marks, dtype=np.uint8)
    outside = (np.cumsum(codes == _QUOTE, dtype=np.int64) & 1) == 0
    return int(np.count_nonzero(outside & (codes == _COLON)))


def members_parsed(document: Any) -> int:
    """How many members the parsed objects of ``document`` hold. A list, or an object of
    more than 64 members, is looked into when its first item is an object or a list: lists of
    numbers (features) and large objects of numbers (sparse features) cost nothing. Where
    that misses an object (mixed items, which no request takes) the counts differ, and the
    exact check runs."""
    count, todo = 0, [document]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            count += len(item)
            values = item.values()
            if len(item) <= _LOOK_INTO or isinstance(next(iter(values)), dict | list):
                todo.extend(v for v in values if isinstance(v, dict | list))
        elif item and isinstance(item, list) and isinstance(item[0], dict | list):
            todo.extend(item)
    return count


_MARKS = b'[]{}"'
_NOT_MARKS = bytes(sorted(set(range(256)) - set(_MARKS)))
_STEP = np.zeros(256, dtype=np.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1
_QUOTE = ord('"')
_COLON = ord(":")
_CHUNK = 1 << 20


def nesting_deeper_than(body: bytes, limit: int) -> bool:
    """Whether the JSON text ``body`` nests arrays and objects more than ``limit`` levels deep.

    Exact for JSON (brackets inside strings do not count), without parsing it: one pass in C
    keeps the brackets and quotes (~0.7 ms per MiB), strings without brackets then vanish, and
    what is left, when it holds more than ``limit`` brackets at all, is counted with numpy.
    Text that is not JSON gets some answer: the parser refuses it either way.
    """
    if b"\\" in body:
        # In JSON a backslash only occurs in strings: drop escaped backslashes, then quotes.
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = body.translate(None, _NOT_MARKS)
    if len(marks) <= limit:
        return False
    # Two quotes in a row hold no bracket between them: dropping them moves no bracket into
    # or out of a string.
    marks = marks.replace(b'""', b"")
    if marks.count(b"[") + marks.count(b"{") <= limit:
        return False
    codes = np.frombuffer(marks, dtype=np.uint8)
    strings = b'"' in marks
    depth, in_string = 0, 0
    for start in range(0, len(codes), _CHUNK):  # in slices: memory stays small on any body
        part = codes[start : start + _CHUNK]
        steps = _STEP[part]
        if strings:
            quotes = np.cumsum(part == _QUOTE, dtype=np.int64) + in_string
            steps[(quotes & 1).astype(bool)] = 0
            in_string = int(quotes[-1]) & 1
        levels = np.cumsum(steps, dtype=np.int64) + depth
        if int(levels.max()) > limit:
            return True
        depth = int(levels[-1])
    return False


def as_utf8(body: bytes) -> bytes | None:
    """``body`` in UTF-8 when the standard parser would read it as UTF-16 or UTF-32."""
    encoding = json.detect_encoding(body)
    if encoding.startswith("utf-8"):
        return None  # already what nesting_deeper_than read
    try:
        return body.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
    except UnicodeError:
        return None  # the standard parser refuses it too


def json_response(
    body: dict[str, Any], status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """A JSON answer serialised by orjson, skipping the framework's generic encoder."""
    return Response(
        orjson.dumps(body), status_code=status_code, media_type="application/json", headers=headers
    )
