"""Byte layouts of what the store keeps: prediction payloads, update-log entries, snapshots.

A payload is everything a later update needs, written when a prediction is made: the raw
score of every row (float64) followed by the example, dense values (float64) or, for named
features, bucket indices (int32) then values (float64). A log entry is ``b"k|t|" + record``:
the ordinal of the labelled example, the true class index, and the pending record (a header,
then the payload; see ``pack_record``). Replaying the
entries in log order through the learner reproduces the weights bit for bit.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

from service.learner.config import ModelConfig
from service.learner.features import Example
from service.learner.kernel import Packed
from service.learner.perceptron import Weights

# A pending record (``pack_record``): its mark, then the model's epoch, then the served class.
PENDING = b"P"
ANSWERED = b"A"  # the mark of a record once its feedback was applied (the scripts write it)
# The marks of a log entry's record that a retraining writes in place of PENDING (``apply_entry``):
# learned as River's ``learn_one`` (the raw scores it carries are not used: the weights at replay
# decide), and the same on weights started afresh (the first example of a learner that replaced
# the served one at a drift).
RELEARNED = b"L"
RESTARTED = b"Z"
EPOCH_LENGTH = 16  # hex digits: a model's epoch is new_epoch()'s
SERVED_DIGITS = 4
ENTRY_SEP = b"|"  # a log entry: b"k|t|" + record (entry_head)
# Then, in entries written since updates carry their provenance: b"~source|ms|" before the
# record (``provenance``): the name of the key that caused the update (empty: keys are off)
# and when, unix ms. A record starts with PENDING, never with this mark.
SOURCE_MARK = b"~"


def new_epoch() -> str:
    """The epoch of a model made, imported or reset: it tells its records from any other's."""
    return secrets.token_hex(EPOCH_LENGTH // 2)


def entry_head(k: int, t: int) -> bytes:
    """A log entry's head, before the pending record: the labelled example's ordinal ``k``
    (0 where it does not matter) and its true class index ``t``."""
    return b"%d%s%d%s" % (k, ENTRY_SEP, t, ENTRY_SEP)


def provenance(source: str, ms: int) -> bytes:
    """What follows an entry's head: who caused the update (a key's name) and when."""
    return b"%s%s%s%d%s" % (SOURCE_MARK, source.encode(), ENTRY_SEP, ms, ENTRY_SEP)


def entry_provenance(entry: bytes) -> tuple[int, int, str | None, int | None]:
    """An entry's ordinal ``k``, true class index, and who caused it and when (None, None for
    an entry written before updates carried their provenance)."""
    k, t, rest = entry.split(ENTRY_SEP, 2)
    if rest[:1] != SOURCE_MARK:
        return int(k), int(t), None, None
    source, ms, _ = rest[1:].split(ENTRY_SEP, 2)
    return int(k), int(t), source.decode(), int(ms)


def pack_payload(raw: np.ndarray, x: Example) -> bytes:
    head = raw.astype(np.float64, copy=False).tobytes()
    if x.index is None:
        return head + x.values.tobytes()
    return head + x.index.astype(np.int32).tobytes() + x.values.tobytes()


def unpack_payload(config: ModelConfig, data: bytes) -> tuple[np.ndarray, Example]:
    n = config.n_scores
    raw = np.frombuffer(data, dtype=np.float64, count=n)
    rest = memoryview(data)[8 * n :]
    if config.dense:
        return raw, Example(np.frombuffer(rest, dtype=np.float64))
    nnz = len(rest) // 12
    index = np.frombuffer(rest, dtype=np.int32, count=nnz).astype(np.int64)
    values = np.frombuffer(rest, dtype=np.float64, offset=4 * nnz)
    return raw, Example(values, index)


def pack_record(epoch: str, served: int, updates: list[bool], payload: bytes) -> bytes:
    """A pending prediction: ``P``, the model's epoch (16 characters), the served class index
    (4 digits), one ``0``/``1`` per class (whether learning that class updates), the payload."""
    bitmap = b"".join(b"1" if u else b"0" for u in updates)
    head = PENDING + epoch.encode() + b"%0*d" % (SERVED_DIGITS, served)
    if len(head) != len(PENDING) + EPOCH_LENGTH + SERVED_DIGITS:
        raise ValueError("a record's epoch or served class does not fit its layout")
    return head + bitmap + payload


def record_header(config: ModelConfig) -> int:
    """Bytes before the payload in a pending record."""
    return len(PENDING) + EPOCH_LENGTH + SERVED_DIGITS + config.n_classes


def unpack_entry(config: ModelConfig, entry: bytes) -> tuple[int, int, np.ndarray, Example]:
    """Split a log entry into (example ordinal k, true class index, raw scores, example).

    An entry is ``b"k|t|"``, its provenance, and the prediction's whole pending record, so
    that the script that logs feedback copies the record once, without cutting it.
    """
    k, t, record, start = _entry_parts(entry)
    raw, x = unpack_payload(config, record[start + record_header(config) :])
    return int(k), int(t), raw, x


def entry_kind(entry: bytes) -> bytes:
    """How a log entry is applied: PENDING (the update decided when its prediction was served,
    from the scores it keeps), RELEARNED or RESTARTED."""
    _, _, record, start = _entry_parts(entry)
    return record[start : start + 1]


def apply_entry(config: ModelConfig, weights: Weights, entry: bytes) -> None:
    """Apply one log entry to ``weights``, as every replica and every rebuild does (bit for bit
    the same); an entry that starts the learner afresh zeroes its count too."""
    k, t, raw, x = unpack_entry(config, entry)
    kind = entry_kind(entry)
    learner = config.learner
    if kind == RESTARTED:
        weights.w.fill(0.0)
        weights.b.fill(0.0)
        for a in learner.state(config):
            weights.state[a.name].fill(a.start)
        weights.seen = 0
    if kind != PENDING:
        raw = learner.raw_scores(config, weights, x)
    learner.apply_logged(config, weights, x, raw=raw, t=t, k=k)


def relearned_entry(item: bytes, k: int, mark: bytes) -> bytes:
    """An example a background learner learned, as the store keeps it (a log entry without its
    ordinal), as the log entry that learns it again: the ``k``-th of its learner, its record's
    mark ``mark`` (RESTARTED or RELEARNED); the store's RETRAIN writes the same bytes."""
    t, rest = item.split(ENTRY_SEP, 1)
    start = 0
    if rest[:1] == SOURCE_MARK:  # past its provenance
        start = rest.index(ENTRY_SEP, rest.index(ENTRY_SEP) + 1) + 1
    return entry_head(k, int(t)) + rest[:start] + mark + rest[start + 1 :]


def entry_served(entry: bytes) -> int:
    """The class index the model served for the prediction a log entry labels."""
    _, _, record, start = _entry_parts(entry)
    at = start + len(PENDING) + EPOCH_LENGTH
    return int(record[at : at + SERVED_DIGITS])


def _entry_parts(entry: bytes) -> tuple[bytes, bytes, bytes, int]:
    """An entry's ``k``, its true class, the rest, and where its pending record starts in the
    rest (past the provenance, if it carries one)."""
    k, t, rest = entry.split(ENTRY_SEP, 2)
    start = 0
    if rest[:1] == SOURCE_MARK:  # past its provenance
        start = rest.index(ENTRY_SEP, rest.index(ENTRY_SEP) + 1) + 1
    return k, t, rest, start


def pack_weights(weights: Weights) -> bytes:
    """The weights, the biases, then each of the learner's state arrays, as float64."""
    return b"".join(np.ascontiguousarray(p, dtype=np.float64).tobytes() for p in weights.arrays())


def unpack_weights(config: ModelConfig, data: bytes, version: int, seen: int) -> Weights:
    """Weights from a snapshot; an empty snapshot means the learner's start (zero weights)."""
    weights = Weights.zeros(config)
    if data:
        flat = np.frombuffer(data, dtype=np.float64).copy()
        rows, dim = config.n_rows, config.dim
        state = config.learner.state(config)
        sizes = [rows * dim, rows] + [rows * dim if a.per_weight else rows for a in state]
        if len(flat) != sum(sizes):
            raise ValueError(f"Snapshot holds {len(flat)} numbers; this model needs {sum(sizes)}.")
        w, b, *kept = np.split(flat, np.cumsum(sizes)[:-1])
        weights.w, weights.b = w.reshape(rows, dim), b
        for a, values in zip(state, kept, strict=True):
            weights.state[a.name] = values.reshape(rows, dim) if a.per_weight else values
    weights.version, weights.seen = version, seen
    return weights


@dataclass
class Logged:
    """Log entries read at once (``read_logged``): each one's true class index, the class the
    model served, whether the model's default label labelled it, and the examples packed."""

    ts: list[int]
    served: list[int]
    by_default: list[bool]
    packed: Packed


def read_logged(config: ModelConfig, entries: list[bytes], default_source: str) -> Logged:
    """Every entry's parts in one pass (``unpack_entry``, ``entry_served`` and the provenance's
    source, each of every entry): the dense examples' values in one array."""
    default = SOURCE_MARK + default_source.encode() + ENTRY_SEP
    at_served = len(PENDING) + EPOCH_LENGTH
    header, raw = record_header(config), 8 * config.n_scores
    if config.dense:  # every record of the same length: its parts counted from the end
        tail = header + raw + 8 * config.dim
        # (k, t and a source's mark lie in an entry's first 64 bytes: k within 2**50, a
        # class index within 4 digits; the rest is never copied)
        parts = [entry[:64].split(ENTRY_SEP, 3) for entry in entries]
        source = default[:-1]  # (an entry without provenance: its third part is its record)
        first, last = at_served - tail, at_served + SERVED_DIGITS - tail
        joined = b"".join([entry[-8 * config.dim :] for entry in entries])
        return Logged(
            ts=[int(p[1]) for p in parts],
            served=[int(entry[first:last]) for entry in entries],
            by_default=[p[2] == source for p in parts],
            packed=Packed(
                np.frombuffer(joined, dtype=np.float64),
                np.zeros(0, dtype=np.int64),
                np.arange(len(entries) + 1, dtype=np.int64) * config.dim,
                True,
            ),
        )
    ts, served, by_default, payloads = [], [], [], []
    for entry in entries:
        first = entry.index(ENTRY_SEP)
        second = entry.index(ENTRY_SEP, first + 1)
        ts.append(int(entry[first + 1 : second]))
        start = second + 1
        by_default.append(entry.startswith(default, start))
        if entry[start : start + 1] == SOURCE_MARK:  # past its provenance
            start = entry.index(ENTRY_SEP, entry.index(ENTRY_SEP, start) + 1) + 1
        served.append(int(entry[start + at_served : start + at_served + SERVED_DIGITS]))
        payloads.append(entry[start + header + raw :])
    n = len(entries)
    lengths = np.array([len(p) // 12 for p in payloads], dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    sized = [(int(k), p) for p, k in zip(payloads, lengths.tolist(), strict=True)]
    index = [np.frombuffer(p, np.int32, count=k) for k, p in sized]
    vals = [np.frombuffer(p, np.float64, offset=4 * k) for k, p in sized]
    packed = Packed(
        np.concatenate(vals) if n else np.zeros(0),
        np.concatenate(index).astype(np.int64) if n else np.zeros(0, dtype=np.int64),
        offsets,
        False,
    )
    return Logged(ts, served, by_default, packed)
