"""The store protocol, written once and pure (no I/O): the constants, which the Lua scripts
get as locals generated from here (``LUA``) so the two sides cannot drift apart (the typed
values the store's calls take and answer: ``store_values.py``). Learning code imports this,
never the store.

The layout of a pending prediction's record is the learner's (``learner/codec.py``); the
scripts read its fields at the offsets computed here from that one definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

from service.learner.challenger import CURVE_POINTS
from service.learner.codec import (
    ANSWERED,
    ENTRY_SEP,
    EPOCH_LENGTH,
    PENDING,
    RELEARNED,
    RESTARTED,
    SERVED_DIGITS,
    SOURCE_MARK,
)
from service.learner.drift_detectors import EVENTS_KEPT


class Status(IntEnum):
    """What a script answers: for a whole call, or per feedback item."""

    DONE = 1  # applied (a feedback item: its update was logged)
    DUPLICATE = 2  # a feedback item given before, with the same label
    STALE_COPY = 0  # the caller's copy was behind: sync data follows
    NO_MODEL = -1
    STALE_EPOCH = -2  # the model was replaced since the caller's copy
    UNKNOWN = -3  # a feedback item whose prediction is unknown (never issued, or gone early)
    CONFLICT = -4  # a feedback item given before with another label
    STATE_LOST = -5  # the model's keys are incomplete: {-5, what}
    PENDING_FULL = -6  # the model holds as many pending bytes as it may: {-6, s until some lapse}
    REQUESTS_GONE = -7  # handed-off learns that no longer wait for this commit: {-7, tokens...}
    HELD = -8  # the model is held for its writer's next commit: {-8, ms left}
    BAD_LABEL = -9  # a feedback item's label is none of the classes of its prediction's model
    NOT_WRITER = -10  # a writer's commit whose lease another worker holds now, or none does
    # (-10 also: a lease another worker holds: CLAIM {-10, ms left}, TAKE)
    EXPIRED = -11  # a feedback item whose prediction is gone, its wait over (its id tells)
    NAME_TAKEN = 3  # CREATE: the name is taken, {3, its config JSON}
    UNCHANGED = 4  # nothing done: a snapshot not newer (COMPACT), a lease kept (RELEASE)
    QUEUED = 5  # HANDOFF: the request waits for the model's writer
    LEASED = 6  # the caller holds the model's lease (HANDOFF, CLAIM, TAKE {6, requests...})
    REPLIED = 7  # WITHDRAW: the request was answered meanwhile, {7, answer}
    NOT_STAGED = 8  # weights staged for the script are missing or not whole: nothing done
    HAS_CHALLENGERS = 9  # REPLACE, ROLLBACK, UNDO: refused while the model has challengers
    CHALLENGED = 10  # LEARN: the model has challengers and the commit carried no labels
    TOO_MANY = 11  # a challenger added to a model that has as many as it may


NO_CLASS = -1  # the class index the store is given for a label that is none of the classes
RING_SIZE = 1000  # outcomes kept in the ring: the mistake rate of the last 1000
# A ring's mark for an example whose outcome it does not know (one learned before an import, or
# a promotion's learner's before it served): neither a mistake nor not, left out of rates
RING_UNKNOWN = b"-"
RECENT_KEPT = 100  # labelled examples kept for the mistake-bound estimate
DRIFT_EVENTS_KEPT = EVENTS_KEPT  # a drift detector's last warnings and drifts, kept
# A retraining's background learner keeps an example while its examples, all together, hold
BACKGROUND_BYTES = 4 << 20  # this many bytes at most (ops/drift.py, retraining_sequence.py)
RECENT_MAX_BYTES = 8192  # a larger example is not kept there (the window is then shorter)
PENDING_BUCKETS = 64  # a model's pending bytes are counted in ttl/64-second buckets
PENDING_OVERHEAD = 96  # bytes Redis spends on a key beyond its name and value (estimate)
ANSWER_TTL_S = 60  # an answer to a handed-off learn request that nobody took is dropped then
# A writer's queue keys (learns, taken, reqs) live this long past the last request put in
# them: long after any deadline, and long enough that a volatile-* policy evicts pending
# predictions (which live a feedback_ttl_s) before a queue that is in use.
QUEUE_KEEP_S = 86_400
# A prediction of a model with a default_label is kept this much longer than its wait, so that
# the sweep that labels it by default (ops/defaults.py) finds it whenever a worker runs it,
# through restarts of workers and of Redis; it counts as pending (``pend``) until then.
DEFAULT_GRACE_S = 86_400
DEFAULTS_PER_SWEEP = 256  # predictions one sweep labels by default at most (bounded work)
# Bytes of pending records one script stores (predict), or reads and logs (feedback, the sweep
# of defaults), at most past its first: a record of a wide example is large (20,000 dense
# features: 160 kB), and a labelled one is copied into the update log and the challengers'
# log. The rest is left to the next call.
RECORD_CALL_BYTES = 1 << 20
# Provenance of an update by default: no key caused it (a key's name never holds brackets).
DEFAULT_SOURCE = "(default)"
DEFAULTED = "|d"  # ends an answered record whose label was its model's default
# Upper bounds, in seconds, of the buckets of the delay from prediction to label (/metrics);
# a model's ``delays`` hash counts each label in field "<i>" (i: the first bound it is within,
# len(...) past the last) and their sum in ms (``Field.DELAY_MS``).
DELAY_BUCKETS_S = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 43200, 86400)
HOLD_MS = 500  # feedback waits at most this long for a writer that holds the model and died
# A promotion (store/ops/promote.py) holds the model this long at most (should its worker die):
# its ``hold`` is then PROMOTING plus the calls waiting on it; a writer's hold is below that.
PROMOTE_HOLD_MS = 1000
PROMOTING = 2**40
# Promotions whose epochs' predictions stay labelable while their records live (Meta.PREV_EPOCH);
# one more within that time is refused.
PROMOTIONS_KEPT = 64
# Log entries a sync reply carries itself; past that, the worker reads the log with LRANGE.
SYNC_INLINE = 64
# A handed-over learn request longer than this is written and read with plain commands, not
# through a script: a value a script reads or writes is copied into Lua and out again, which
# for a packed batch cost Redis more than all the rest of its hand-over (ops/handoff, ops/take).
REQUEST_INLINE = 64 * 1024
# Values a script passes to one Redis command at most (Lua's unpack has a stack limit).
UNPACK_CHUNK = 4000
# The most a version or a counter may be where it enters the store (an import; a count that
# reaches it by learning would take a century at ten million examples a second). Lua counts in
# doubles, exact to 2**53: the headroom keeps every sum a script makes exact, and so every
# loop over a count finite.
MAX_COUNT = 2**50


class Field:
    """The fields of a model's other hashes, and of the confusion matrix in ``meta``, declared
    here only: the scripts get each as a Lua local ``FIELD_<NAME>`` (``LUA``)."""

    CELL = "cm:"  # meta: "cm:<served>:<true>" = how many labelled examples had that pair
    # meta: "src:<key name>" then EXAMPLES, MISTAKES or UPDATES = the labelled examples,
    # mistakes and updates the API key of that name caused (empty name: keys are off)
    SOURCE = "src:"
    UPDATES = ":u"
    EXAMPLES = ":n"  # series: "<bucket>:n" = examples labelled in that time bucket
    MISTAKES = ":m"  # series: "<bucket>:m" = mistakes among them
    LAST = "last"  # series: the latest bucket written
    EVERY = "every"  # curve: "<k>" = mistakes among the first k, for k a multiple of this
    BYTES = "bytes"  # pend: the bytes of pending predictions, all buckets together
    OLDEST = "oldest"  # pend: the oldest creation bucket held
    DELAY_MS = "ms"  # delays: the sum of the delays counted, ms

    @staticmethod
    def fields() -> dict[str, str]:
        return {k: v for k, v in vars(Field).items() if k.isupper()}


def pending_life_s(ttl_s: int, default_label: bool) -> int:
    """How long a prediction's record is kept: its wait, and DEFAULT_GRACE_S more when its model
    labels it by default; its pending bytes are counted over this time (``parts.PENDING``)."""
    return ttl_s + (DEFAULT_GRACE_S if default_label else 0)


def delay_bucket(delay_s: float) -> int:
    """The bucket of DELAY_BUCKETS_S a delay falls in (len(DELAY_BUCKETS_S): past the last)."""
    return next((i for i, b in enumerate(DELAY_BUCKETS_S) if delay_s <= b), len(DELAY_BUCKETS_S))


@lru_cache(maxsize=1 << 16)  # (the cells of every commit: made once each)
def cell_field(served: int, true: int) -> str:
    return f"{Field.CELL}{served}:{true}"


def parse_cell(field: str) -> tuple[int, int] | None:
    """``(served, true)`` of a confusion field, or None for another field."""
    if not field.startswith(Field.CELL):
        return None
    try:
        served, true = (int(v) for v in field[len(Field.CELL) :].split(":"))
    except ValueError:
        return None
    return served, true


class Meta:
    """The fields of a model's hash (``meta``) besides its counters, declared here only: the
    scripts get each as a Lua local ``META_<NAME>`` (``LUA``), and Python reads them by name."""

    CONFIG = "cfg"  # the model's configuration, JSON
    EPOCH = "epoch"  # which model under this name: new at every create, reset and import
    VERSION = "version"  # updates so far (the log's last version)
    SEEN = "seen"  # labelled examples so far (a counter too)
    # What the served learner's own count (an averaged one's mean divides by it) leaves out of
    # SEEN after a rollback to an earlier count: its count is SEEN minus this (absent: 0).
    SEEN_OFFSET = "seenoff"
    BLOG_BYTES = "blogb"  # the bytes of a retraining's background learner's examples (blog)
    SNAP_VERSION = "snapv"  # the version of the snapshot ``snap``
    SNAP_LENGTH = "snaplen"  # the snapshot's length in bytes (0: none, all zeros)
    CREATED = "created"  # unix seconds
    R2 = "r2"  # the largest squared feature norm learned from, for the mistake bound
    # The model's history (store/ops/history.py): checkpoints made so far (their last id), the
    # version and unix ms of the last one made by a compaction, and the retained log ``past``:
    # the checkpoint it starts from (absent: none yet, the snapshot is where history starts),
    # that checkpoint's version, and the bytes ever added to ``past`` (for its size).
    CHECKPOINTS = "ckseq"
    CHECKPOINT_VERSION = "ckv"
    CHECKPOINT_MS = "ckms"
    PAST_BASE = "pastck"
    PAST_VERSION = "pastv"
    PAST_IN = "pastin"
    # Challengers (store/ops/challenger_states.py): how many the model has (0 or absent: none, and
    # no label is logged for them), a count bumped by each add and removal, and the position
    # in the labels' stream of the first entry ``clog`` holds.
    CHALLENGERS = "chn"
    CHALLENGER_GEN = "cgen"
    CHALLENGER_BASE = "cbase"
    # The epochs before promotions, "<epoch>:<unix ms of the promotion>," each, those whose
    # records may still live: their predictions are labelled as this epoch's (parts.OURS).
    PREV_EPOCH = "pepoch"
    # The drift detector of the served learner (store/ops/drift.py): its state (its numbers
    # as %.17g, separated by spaces) and its last DRIFT_EVENTS_KEPT events,
    # "<seen> <warning|drift> <unix ms>\n" each.
    DRIFT_STATE = "dstate"
    DRIFT_EVENTS = "devents"

    @classmethod
    def fields(cls) -> dict[str, str]:
        """NAME -> field, every one."""
        return {k: v for k, v in vars(cls).items() if k.isupper()}


@dataclass(frozen=True, slots=True)
class Counter:
    """One of a model's counters, as the API, an export, Prometheus and the dashboard show it."""

    name: str  # its field in the model's meta hash (updates: the model's version)
    title: str  # a few words, for the dashboard
    help: str  # one sentence
    exported: bool = True  # carried by an export (seen and updates follow from the weights)
    warns: bool = False  # above zero, a sign of something wrong (the dashboard marks it)


# Every counter of a model, in the order the dashboard lists them: declared here only.
COUNTERS = (
    Counter(Meta.SEEN, "Labelled examples", "Labelled examples (feedback and learned).", False),
    Counter("mistakes", "Mistakes", "Served labels that were wrong."),
    Counter("updates", "Weight updates", "Times the weights changed (the version).", False),
    Counter("predictions", "Predictions", "Predictions served."),
    Counter("feedback", "Feedback", "Feedback applied (labels of served predictions)."),
    Counter("learned", "Learned", "Examples learned through /learn."),
    Counter(
        "defaulted",
        "Labelled by default",
        "Predictions learned with the model's default_label: no label came within their wait.",
    ),
    Counter(
        "defaulted_mistakes",
        "Mistakes by default",
        "Mistakes among the predictions labelled by default (counted in mistakes too).",
    ),
    Counter(
        "duplicates",
        "Duplicate feedback",
        "Repeated feedback, answered without changing anything.",
    ),
    Counter(
        "conflicts",
        "Conflicting feedback",
        "Feedback refused for giving a prediction a second, different label.",
        warns=True,
    ),
    Counter(
        "unknown_feedback",
        "Unknown feedback",
        "Feedback for unknown predictions (never issued, or gone within their wait).",
        warns=True,
    ),
    Counter("drift_warnings", "Drift warnings", "Warnings of the model's drift detector."),
    Counter("drifts", "Drifts", "Drifts its detector found in the served learner's mistakes."),
    Counter("retrains", "Retrains", "Drifts at which a background learner came to serve."),
    Counter(
        "expired",
        "Expired feedback",
        "Labels that came after their prediction's wait (feedback_ttl_s) ran out.",
        warns=True,
    ),
)


class Reason:
    """Why a checkpoint was made, declared here only (Lua: ``REASON_<NAME>``)."""

    SCHEDULED = "scheduled"  # a compaction found the last one old enough (updates or time)
    START = "start"  # the snapshot the retained log starts from, kept at its first compaction
    BEFORE_RESET = "before reset"
    BEFORE_IMPORT = "before import"
    BEFORE_ROLLBACK = "before rollback"
    BEFORE_UNDO = "before undo"  # of a key's updates, or a time's
    BEFORE_PROMOTION = "before promotion"  # of a challenger (store/ops/promote.py)
    LEFT = "left"  # scheduled on the line of versions a rollback went back from

    @staticmethod
    def fields() -> dict[str, str]:
        return {k: v for k, v in vars(Reason).items() if k.isupper()}


CHECKPOINT_SEP = "|"  # between the fields of a checkpoint's record (config JSON comes last)
TAIL_SEP = ":"  # a checkpoint's tail: each entry after its length in digits and this


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a checkpoint records (``ckinfo``): written by the scripts (ops/history.py) as
    ``version|base|seen|ms|reason|mistakes|window|bytes|past_in|config``."""

    id: int
    version: int  # the model's version it restores
    base: int  # the version of its packed weights; its tail's entries lead to ``version``
    seen: int  # labelled examples by then
    ms: int  # unix ms when it was made
    reason: str
    mistakes: int  # mistakes among the last ``window`` labelled examples, then
    window: int
    bytes: int  # its weights and tail
    past_in: int  # Meta.PAST_IN then: where it is in the retained log, counted in bytes
    config: str  # the model's configuration (JSON)

    @classmethod
    def parse(cls, id: int, text: str) -> Checkpoint:
        v, base, seen, ms, reason, m, w, n, pin, config = text.split(CHECKPOINT_SEP, 9)
        return cls(
            id=id, version=int(v), base=int(base), seen=int(seen), ms=int(ms), reason=reason,
            mistakes=int(m), window=int(w), bytes=int(n), past_in=int(pin), config=config,
        )  # fmt: skip

    @property
    def mistake_rate(self) -> float | None:
        return self.mistakes / self.window if self.window else None

    def record(self) -> str:
        """The record as ``parse`` reads it (the scripts write their own the same way)."""
        return CHECKPOINT_SEP.join(str(getattr(self, f)) for f in self.__slots__[1:])


# Where each field of a checkpoint's record is, 1-based (Lua: ``CK_<FIELD>``).
CHECKPOINT_FIELDS = {f.upper(): i for i, f in enumerate(Checkpoint.__slots__[1:], start=1)}


def split_tail(tail: bytes) -> list[bytes]:
    """A checkpoint's tail as its log entries, in order."""
    entries, at, sep = [], 0, TAIL_SEP.encode()
    while at < len(tail):
        colon = tail.index(sep, at)
        n = int(tail[at:colon])
        entries.append(tail[colon + 1 : colon + 1 + n])
        at = colon + 1 + n
    return entries


# Where a pending record's fields start, 1-based as Lua's string.sub counts.
EPOCH_AT = 1 + len(PENDING)
SERVED_AT = EPOCH_AT + EPOCH_LENGTH
BITMAP_AT = SERVED_AT + SERVED_DIGITS

_NUMBERS = {
    "NO_CLASS": NO_CLASS,
    "WINDOW": RING_SIZE,
    "RECENT_KEPT": RECENT_KEPT,
    "DRIFT_EVENTS_KEPT": DRIFT_EVENTS_KEPT,
    "BACKGROUND_BYTES": BACKGROUND_BYTES,
    "RECENT_MAX_BYTES": RECENT_MAX_BYTES,
    "PENDING_BUCKETS": PENDING_BUCKETS,
    "PENDING_OVERHEAD": PENDING_OVERHEAD,
    "ANSWER_TTL_S": ANSWER_TTL_S,
    "HOLD_MS": HOLD_MS,
    "PROMOTE_HOLD_MS": PROMOTE_HOLD_MS,
    "PROMOTING": PROMOTING,
    "PROMOTIONS_KEPT": PROMOTIONS_KEPT,
    "DEFAULT_GRACE_S": DEFAULT_GRACE_S,
    "CURVE_POINTS": CURVE_POINTS,
    "SYNC_INLINE": SYNC_INLINE,
    "REQUEST_INLINE": REQUEST_INLINE,
    "UNPACK_CHUNK": UNPACK_CHUNK,
    "RECORD_CALL_BYTES": RECORD_CALL_BYTES,
    "EPOCH_AT": EPOCH_AT,
    "EPOCH_END": SERVED_AT - 1,
    "SERVED_AT": SERVED_AT,
    "SERVED_END": BITMAP_AT - 1,
    "BITMAP_AT": BITMAP_AT,
    **{s.name: int(s) for s in Status},
    **{f"CK_{k}": v for k, v in CHECKPOINT_FIELDS.items()},
}
_STRINGS = {
    "PENDING": PENDING.decode(),
    "RELEARNED": RELEARNED.decode(),
    "RESTARTED": RESTARTED.decode(),
    "RING_UNKNOWN": RING_UNKNOWN.decode(),
    "ANSWERED": ANSWERED.decode(),
    "ENTRY_SEP": ENTRY_SEP.decode(),
    "SOURCE_MARK": SOURCE_MARK.decode(),
    "DEFAULT_SOURCE": DEFAULT_SOURCE,
    "DEFAULTED": DEFAULTED,
    "CHECKPOINT_SEP": CHECKPOINT_SEP,
    "TAIL_SEP": TAIL_SEP,
    **{f"REASON_{k}": v for k, v in Reason.fields().items()},
    **{f"FIELD_{k}": v for k, v in Field.fields().items()},
    **{f"META_{k}": v for k, v in Meta.fields().items()},
    # the counters a script adds to (seen is META_SEEN; updates is the version)
    **{
        f"COUNT_{c.name.upper()}": c.name
        for c in COUNTERS
        if c.name not in Meta.fields().values() and c.name != "updates"
    },
}

# The header of every script: the constants above as Lua locals.
LUA = "".join(f"local {k} = {v}\n" for k, v in _NUMBERS.items()) + "".join(
    f"local {k} = '{v}'\n" for k, v in _STRINGS.items()
)
