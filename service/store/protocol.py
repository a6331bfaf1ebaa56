"""The store protocol's constants, written once: Python uses them, and the Lua scripts get
them as locals generated from here (``LUA``), so the two sides cannot drift apart.

The layout of a pending prediction's record is the learner's (``learner/codec.py``); the
scripts read its fields at the offsets computed here from that one definition.
"""

from __future__ import annotations

from enum import IntEnum

from ..learner.codec import ANSWERED, EPOCH_LENGTH, PENDING, SERVED_DIGITS


class Status(IntEnum):
    """What a script answers: for a whole call, or per feedback item."""

    DONE = 1  # applied (a feedback item: its update was logged)
    DUPLICATE = 2  # a feedback item given before, with the same label
    STALE_COPY = 0  # the caller's copy was behind: sync data follows
    NO_MODEL = -1
    STALE_EPOCH = -2  # the model was replaced since the caller's copy
    UNKNOWN = -3  # a feedback item whose prediction is unknown or expired
    CONFLICT = -4  # a feedback item given before with another label
    STATE_LOST = -5  # the model's keys are incomplete: {-5, what}
    PENDING_FULL = -6  # the model holds as many pending bytes as it may: {-6, s until some lapse}
    REQUESTS_GONE = -7  # handed-off learns that no longer wait for this commit: {-7, tokens...}
    HELD = -8  # the model is held for its writer's next commit: {-8, ms left}


RING_SIZE = 1000  # outcomes kept in the ring: the mistake rate of the last 1000
RECENT_KEPT = 100  # labelled examples kept for the mistake-bound estimate
RECENT_MAX_BYTES = 8192  # a larger example is not kept there (the window is then shorter)
PENDING_BUCKETS = 64  # a model's pending bytes are counted in ttl/64-second buckets
PENDING_OVERHEAD = 96  # bytes Redis spends on a key beyond its name and value (estimate)
ANSWER_TTL_S = 60  # an answer to a handed-off learn request that nobody took is dropped then
HOLD_MS = 1000  # feedback waits at most this long for a writer that holds the model and died
CURVE_POINTS = 100  # points kept in the learning curve: between half of it and all of it

# Where a pending record's fields start, 1-based as Lua's string.sub counts.
EPOCH_AT = 1 + len(PENDING)
SERVED_AT = EPOCH_AT + EPOCH_LENGTH
BITMAP_AT = SERVED_AT + SERVED_DIGITS

_NUMBERS = {
    "WINDOW": RING_SIZE,
    "RECENT_KEPT": RECENT_KEPT,
    "RECENT_MAX_BYTES": RECENT_MAX_BYTES,
    "PENDING_BUCKETS": PENDING_BUCKETS,
    "PENDING_OVERHEAD": PENDING_OVERHEAD,
    "ANSWER_TTL_S": ANSWER_TTL_S,
    "HOLD_MS": HOLD_MS,
    "CURVE_POINTS": CURVE_POINTS,
    "EPOCH_AT": EPOCH_AT,
    "EPOCH_END": SERVED_AT - 1,
    "SERVED_AT": SERVED_AT,
    "SERVED_END": BITMAP_AT - 1,
    "BITMAP_AT": BITMAP_AT,
    **{s.name: int(s) for s in Status},
}
_STRINGS = {"PENDING": PENDING.decode(), "ANSWERED": ANSWERED.decode()}

# The header of every script: the constants above as Lua locals.
LUA = "".join(f"local {k} = {v}\n" for k, v in _NUMBERS.items()) + "".join(
    f"local {k} = '{v}'\n" for k, v in _STRINGS.items()
)
