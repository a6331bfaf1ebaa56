"""A model's history: which checkpoints and how much of the update log to keep, and the
weights of a kept version, rebuilt exactly.

What is kept (``README.md``, "Model history"):

- the retained log reaches back far enough that every version of the last
  ``PERCEPTRON_HISTORY_KEEP_S`` seconds, or of the last ``PERCEPTRON_HISTORY_KEEP_UPDATES``
  updates, whichever is less, can be restored: it starts at the newest checkpoint of the
  model's current line that is older than either;
- of the checkpoints, the one the retained log starts from, the newest ``KEEP_LAST``, the
  newest of each of the last ``HOURLY`` hours and of each of the last ``DAILY`` days;
- and all of it within ``PERCEPTRON_HISTORY_MAX_BYTES``: past it, the oldest goes first,
  the retained log's start included (the versions it restores then go with it); the newest
  checkpoint stays, even one alone past the bound (a model about as large as the bound).

A reset, an import, a rollback and an undo hold it so as they write: first they let go of
what would not fit with what they add (:func:`make_room`), after, of what the policy no
longer keeps (:func:`prune`, which a compaction runs after too). Pure but for those two,
which read the model's history and let go, in one script.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from service.contract.store_protocol import Checkpoint, Reason
from service.errors import ModelBusy, ServiceError
from service.learner import ModelConfig, Weights
from service.learner.codec import apply_entry, unpack_weights
from service.settings import Settings
from service.store import Store, StoreError
from service.store.ops.history import HistoryState, Restorable

log = logging.getLogger("perceptron")

KEEP_LAST = 10
HOURLY = 24
DAILY = 7
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
MAKE_ROOM_ATTEMPTS = 3  # reads of a model's history that changed before its old part went


@dataclass(frozen=True, slots=True)
class Kept:
    """What the policy keeps: the retained log's start, and the checkpoints to let go."""

    base: int | None
    base_version: int
    drop: list[int]


# The checkpoints that may be of the model's current line: the retained log's start, and those
# compactions make of it. Each made before a rollback, an undo, a reset, an import or a
# promotion is of what the model stopped being (a rollback's may share a version with the line
# it goes on as, not its weights).
ON_LINE = (Reason.START, Reason.SCHEDULED)


def on_line(state: HistoryState) -> list[Checkpoint]:
    """The checkpoints of the model's current line (from the retained log's start on): the
    others were made before a reset, an import, a rollback, an undo or a promotion, or on the
    line a rollback left."""
    if state.base is None:
        return []
    return [
        c
        for c in state.checkpoints
        if c.id >= state.base and c.base == c.version and c.reason in ON_LINE
    ]


def policy(state: HistoryState, settings: Settings, now_ms: int, adding: int = 0) -> Kept:
    """What to keep of a model's history (see the module's docstring); with ``adding``, what
    to keep so that that many bytes more, about to be written, fit too (and a newer
    checkpoint with them: none kept now is the newest then)."""
    line = sorted(on_line(state), key=lambda c: c.version)
    by_id = {c.id: c for c in state.checkpoints}
    base = by_id.get(state.base) if state.base is not None else None
    if base is not None:
        oldest_kept_version = state.version - settings.history_keep_updates
        oldest_kept_ms = now_ms - 1000 * settings.history_keep_s
        for c in line:  # the newest one old enough by either measure
            if c.version >= base.version and (
                settings.history_keep_updates == 0
                or c.version <= oldest_kept_version
                or c.ms <= oldest_kept_ms
            ):
                base = c
    keep = _thinned(state.checkpoints, now_ms)
    if base is not None:
        keep.add(base.id)

    # Within the bytes: the oldest first, the retained log's start moving up the line.
    def size() -> int:
        kept = sum(by_id[i].bytes for i in keep)
        return kept + (state.past_in - base.past_in if base is not None else 0)

    by_age = sorted(state.checkpoints, key=lambda c: (c.ms, c.id))
    newest = None if adding else next((c for c in reversed(by_age) if c.id != state.base), None)
    for c in by_age:
        if size() <= settings.history_max_bytes - adding:
            break
        if c is newest:
            continue  # whatever its size
        if base is not None and c.id == base.id:
            newer = [n for n in line if n.version > base.version]
            if not newer:
                continue  # the newest of the line: the log after it is the model's own
            keep.discard(base.id)
            base = newer[0]
            keep.add(base.id)
        else:
            keep.discard(c.id)
    drop = sorted(c.id for c in state.checkpoints if c.id not in keep)
    if base is None:
        return Kept(None, state.past_version, drop)
    return Kept(base.id, base.version, drop)


def _thinned(checkpoints: list[Checkpoint], now_ms: int) -> set[int]:
    """The newest KEEP_LAST, then the newest of each of the last HOURLY hours and DAILY days."""
    newest = sorted(checkpoints, key=lambda c: (c.ms, c.id), reverse=True)
    keep = {c.id for c in newest[:KEEP_LAST]}
    for span, count in ((HOUR_MS, HOURLY), (DAY_MS, DAILY)):
        buckets: set[int] = set()
        for c in newest:
            age = (now_ms - c.ms) // span
            if age < count and age not in buckets:
                buckets.add(age)
                keep.add(c.id)
    return keep


async def prune(store: Store, name: str, settings: Settings, now_ms: int) -> bool:
    """Let go of the model's history the policy does not keep; whether anything went."""
    state = await store.read_history(name)
    kept = policy(state, settings, now_ms)
    if kept.base == state.base and not kept.drop:
        return False
    return await _forget(store, name, state, kept)


async def _forget(store: Store, name: str, state: HistoryState, kept: Kept) -> bool:
    """Let go of what the policy did not keep of ``state``; whether it went (not when the
    history moved since it was read)."""
    return await store.forget_history(
        name,
        epoch=state.epoch,
        base=state.base,
        new_base=kept.base,
        new_version=kept.base_version,
        ids=kept.drop,
    )


async def make_room(
    store: Store, name: str, settings: Settings, *, now_ms: int, adding: int, starting: int = 0
) -> Kept:
    """Before an operation writes ``adding`` bytes of the model's history (and ``starting``
    more when the model has no retained log yet: it starts one): let go of what would not fit
    with them. What is kept then."""
    for _ in range(MAKE_ROOM_ATTEMPTS):
        state = await store.read_history(name)
        more = adding + (starting if state.base is None else 0)
        kept = policy(state, settings, now_ms, more)
        if kept.base == state.base and not kept.drop:
            return kept
        if await _forget(store, name, state, kept):
            return kept
    raise ModelBusy(f"Model {name!r}'s history kept changing; retry shortly.")


def rebuild(restorable: Restorable) -> tuple[ModelConfig, Weights]:
    """The weights that ``restorable`` holds: its packed weights, then each entry applied in
    order, as every worker's replica applies the log (bit for bit the same)."""
    config = ModelConfig.from_json(restorable.config)
    weights = unpack_weights(config, restorable.weights, restorable.base, 0)
    for entry in restorable.entries:
        apply_entry(config, weights, entry)
    return config, weights


async def prune_quietly(store: Store, name: str, settings: Settings, now_ms: int) -> None:
    """After an operation that added to the model's history: let go of what the policy no
    longer keeps (done: a failure here is the next operation's to make up)."""
    try:
        await prune(store, name, settings, now_ms)
    except (StoreError, ServiceError) as e:
        log.warning("letting model %r's old history go failed (%s)", name, e)
