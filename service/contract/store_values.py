"""The typed values the store's calls take and answer (``service/store``), pure: what a
worker's copy of a model lacks, a learn commit's batch and result, feedback's items, a model's
observations and memory, a writer's lease. The constants and layouts they carry are
``store_protocol.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from service.contract.store_protocol import PENDING_BUCKETS, Status


@dataclass(frozen=True, slots=True)
class SyncData:
    """What a worker's copy of a model lacks: maybe a snapshot, then log entries."""

    epoch: str
    version: int
    seen: int
    base: int  # the version just before the first entry (and of the snapshot, if any)
    snapshot: bytes | None
    entries: list[bytes]


@dataclass(frozen=True, slots=True)
class Made:
    """The state of the worker's copy a prediction was made with."""

    version: int
    # The seen count the commit must find: "" for none (only averaged predictions depend on
    # it: ``perceptron.seen_depended``)
    seen: int | str
    r2: float = 0.0  # largest squared feature norm among the examples


@dataclass(frozen=True, slots=True)
class Bucket:
    """The time bucket outcomes are counted in, and how many buckets the series keeps."""

    bucket: int
    keep: int


@dataclass(frozen=True, slots=True)
class LearnBatch:
    """Examples learned in order, as the store counts and logs them."""

    n: int
    mistakes: int
    marks: bytes  # b"0" or b"1" (a mistake) per example, in order, one for each of the n
    # meta fields to add to: the confusion matrix's "cm:<served>:<true>", and the per-source
    # counts (``source_fields``) the caller adds
    cells: dict[str, int]
    entries: list[bytes]  # the log entries of the examples that updated, in order
    recent: list[bytes]  # entries of the latest (at most 100) examples, oldest first
    labels: list[bytes] | None = None  # every example's entry, for the model's challengers
    # or, for challengers small enough, their states after these examples instead
    states: ChallengerStates | None = None
    # A model that retrains at a drift (its labels then always sent): each drift at which the
    # background learner replaced the served one, as (the example's place, from 1; the
    # entries before it), where the store puts the background learner's entries in the log
    swaps: list[tuple[int, int]] | None = None


@dataclass(frozen=True, slots=True)
class Background:
    """A model that retrains at a drift, read at once: its version, its served learner's count,
    its detector's state (as the store keeps it), its background learner's examples (each a
    log entry without its ordinal: ``ops/drift.py``'s RETRAIN) and their bytes as the store
    counts them (``Meta.BLOG_BYTES``), which its bound is held to."""

    version: int
    seen: int
    state: str
    items: list[bytes]
    held: int


@dataclass(frozen=True, slots=True)
class ChallengerStates:
    """Every challenger's state after a commit's examples, written by the commit in place of
    their labels: valid only while the challengers are ``gen``'s and their labels' log ends
    at label number ``at`` (the commit's first example's)."""

    gen: str
    at: int
    tails: list[tuple[str, bytes]]  # (id, its packed state with its weights) of each


@dataclass(frozen=True, slots=True)
class Observations:
    """A model's counters and outcome records, as kept in Redis."""

    meta: dict[str, str]
    ring: bytes  # byte (k - 1) % RING_SIZE: b"1" when the k-th labelled example was a mistake
    series: dict[str, int]  # "<bucket>:n" / "<bucket>:m" counts, and "last"
    recent: list[bytes]  # newest first: log entries (b"k|t|" + payload) of the latest examples
    curve: dict[str, int]  # "<k>": mistakes among the first k labelled examples, and "every"
    delays: dict[str, int] = field(default_factory=dict)  # labels by delay (DELAY_BUCKETS_S)
    awaiting_default: int = 0  # predictions whose default label is still to come


def pending_width(ttl_s: int) -> int:
    """Seconds of one bucket of a model's pending bytes (``parts.PENDING``'s pending_width)."""
    return max(1, -(-ttl_s // PENDING_BUCKETS))


def pending_held(buckets: Mapping[str, int], ttl_s: int, now_s: float) -> int:
    """Bytes of predictions a model holds awaiting their label, as PREDICT counts them
    against PERCEPTRON_MAX_PENDING_BYTES at ``now_s`` (Redis's clock): the buckets of its
    ``pend`` hash whose keys have not all lapsed. ``parts.PENDING``'s pending_held, read
    without the script (which drops the lapsed buckets as it goes)."""
    width = pending_width(ttl_s)
    held = sum(
        v for k, v in buckets.items() if k.isdigit() and (int(k) + 1) * width + ttl_s > now_s
    )
    return max(0, held)


@dataclass(frozen=True, slots=True)
class MemoryUse:
    """Redis's memory on one node, as its INFO says: bytes used, and its maxmemory (0: no
    limit). Past maxmemory a noeviction Redis refuses writes (``store_full``)."""

    node: str  # host:port (or socket path) of the node
    used_bytes: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FeedbackItem:
    status: Status  # DONE, DUPLICATE, UNKNOWN or CONFLICT
    mistake: bool
    updated: bool
    version: int  # the model's version after it (DONE, DUPLICATE)
    given: int | None = None  # CONFLICT: the class index given before
    by_default: bool = False  # DUPLICATE, CONFLICT: the prediction was labelled by default


@dataclass(frozen=True, slots=True)
class FeedbackBatch:
    version: int
    log_length: int
    items: list[FeedbackItem]
    label_log: int = -1  # the challengers' labels' log length after it (-1: none added)


@dataclass(frozen=True, slots=True)
class LearnResult:
    version: int
    seen: int
    log_length: int
    label_log: int = -1  # the challengers' labels' log length after it (-1: none added)
    # With labels logged: the label number of the log's first entry, and the challengers' gen
    # (``store/ops/challenger_states.py``): this commit's entries are the log's last ``n``.
    label_base: int = 0
    label_gen: str = ""


@dataclass(frozen=True, slots=True)
class Challenged:
    """A learn commit refused: the model has challengers, and the commit carried no labels for
    them (the worker learns that the model has some, and commits again)."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A model writer's lease (``writer.py``): its holder, and how long a renewal keeps it."""

    holder: str
    ms: int


@dataclass(frozen=True, slots=True)
class Held:
    """Feedback refused for now: the model's writer holds it for its next commit."""

    ms: int


@dataclass(frozen=True, slots=True)
class RequestsGone:
    """A writer's commit refused: these handed-off requests no longer wait for it (learned
    by another writer, or withdrawn). Nothing was written."""

    tokens: frozenset[str]


class DriftEvent(NamedTuple):
    """One of a drift detector's events as the model's hash keeps it."""

    at: int  # the examples the model had counted when it came
    kind: str  # "warning" or "drift"
    ms: int  # when, unix ms (0: not known)
    retrained: bool  # a drift at which the background learner replaced the served one
    version: int | None  # the model's version just before that (None: not known, or none)


def drift_events(text: str) -> list[DriftEvent]:
    """A drift detector's events as the model's hash keeps them (``Meta.DRIFT_EVENTS``, lines
    of ``"<seen> <warning|drift> <unix ms>"``, then `` retrained <version>`` after a drift at
    which the served learner was replaced, its version just before), oldest first."""
    out = []
    for line in text.splitlines():
        at, kind, ms, *healed = line.split()
        version = int(healed[1]) if len(healed) > 1 else None
        out.append(DriftEvent(int(at), kind, int(ms), bool(healed), version))
    return out
