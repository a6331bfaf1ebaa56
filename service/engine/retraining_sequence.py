"""A /learn sequence of a model that retrains at a drift (``"on_drift": "retrain"``), learned
as River's ``DriftRetrainingClassifier`` learns it (``learner/retraining.py``) and as the store
will log it (pure).

The served learner learns the examples (``run_sequence``) while the model's detector, fed its
mistakes, finds no drift; at a drift, the background learner (the examples it learned, as the
store keeps them: ``Background``) learns the drift's example and takes the served learner's
place, exactly as every replica will replay it (``codec.apply_entry``), and the examples after
it are learned on from there. The store's commit checks the detector drifts where this says,
and writes the background learner's entries at each place (``LearnBatch.swaps``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from service.contract.store_protocol import BACKGROUND_BYTES, RECENT_KEPT
from service.contract.store_values import Background
from service.engine.sequence import LearnedSequence, batch_of, run_sequence
from service.engine.standings import label_entries
from service.learner import Example, ModelConfig, Weights
from service.learner.codec import (
    ENTRY_SEP,
    RELEARNED,
    RESTARTED,
    apply_entry,
    relearned_entry,
)
from service.learner.drift_detectors import Detector, read_state


@dataclass
class Retrained:
    """A sequence learned with its drifts: the sequence as the commit sends it, and the
    versions each example added (one per update; a swap's, the background learner's
    examples and the drift's)."""

    seq: LearnedSequence
    steps: list[int]


FIRST_WINDOW = 8  # examples learned at once after a drift, doubled while none comes


@dataclass
class _Learned:
    """What the windows learned so far, each example's and the log's, in order; and the
    background learner's examples (as the store keeps them) and their bytes."""

    items: list[bytes]
    held: int
    served: list[int] = field(default_factory=list)
    updated: list[bool] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    entries: list[bytes] = field(default_factory=list)
    recent: list[bytes] = field(default_factory=list)
    swaps: list[tuple[int, int]] = field(default_factory=list)

    def add(self, seq: LearnedSequence, upto: int) -> None:
        """The window's first ``upto`` examples, as the served learner learned them."""
        ups = seq.updated[:upto]
        self.served += seq.served[:upto]
        self.updated += ups
        self.steps += map(int, ups)
        self.entries += seq.batch.entries[: sum(ups)]
        # (its recent entries are its last examples': those of the first ``upto``)
        self.recent += seq.batch.recent[: max(0, upto - (len(seq.served) - len(seq.batch.recent)))]

    def keep(self, kept: list[bytes]) -> None:
        """Examples the background learner learned, while they hold BACKGROUND_BYTES at
        most, all together, as the store keeps them."""
        for entry in kept:
            item = _item(entry)
            if self.held + len(item) <= BACKGROUND_BYTES:
                self.items.append(item)
                self.held += len(item)


def run_retraining(
    cfg: ModelConfig,
    epoch: str,
    base: Weights,
    background: Background,
    *,
    xs: Sequence[Example],
    ts: Sequence[int],
    provs: Sequence[bytes],
) -> Retrained:
    """Learn ``xs`` in order from ``base`` (never changed), the served learner replaced by the
    background one at each drift of the detector (whose state, and the background learner's
    examples, ``background`` holds, as of ``base``). The examples are learned at once until a
    drift, then a window at a time, from FIRST_WINDOW, doubled while no drift comes (a batch
    of many drifts is not learned again to its end after each; one without a drift is learned
    in one pass, its weights copied once)."""
    detector = cfg.drift_detector
    assert detector is not None
    state = read_state(detector, background.state)
    done, at, weights, window = _Learned(list(background.items), background.held), 0, base, len(xs)
    work, last = base, None
    while at < len(xs):
        end = min(len(xs), at + window)
        seq = run_sequence(
            cfg=cfg, epoch=epoch, base=weights, xs=xs[at:end], ts=ts[at:end], provs=provs[at:end]
        )
        state, warned, drift = _until_drift(detector, state, seq.served, ts[at:end])
        upto = end - at if drift is None else drift
        done.add(seq, upto)
        done.keep(_labels(cfg, epoch, seq, (xs, ts, provs), start=at, at=[at + j for j in warned]))
        if drift is None:
            work, last = seq.work, seq.last
            if end < len(xs):
                weights, window = _after(cfg, seq, weights, xs[end - 1], end - at), window * 2
            at = end
            continue
        done.served.append(seq.served[drift])
        done.updated.append(True)  # (the drift's example: the new learner's, learned afresh)
        done.swaps.append((at + drift + 1, len(done.entries)))
        done.items += [
            _item(_labels(cfg, epoch, seq, (xs, ts, provs), start=at, at=[at + drift])[0])
        ]
        version = weights.version + sum(seq.updated[:drift])
        weights = work = _replaced(cfg, version, done.items)
        done.steps.append(len(done.items))
        done.items, done.held, at, window, last = [], 0, at + drift + 1, FIRST_WINDOW, None
    batch = replace(
        batch_of(done.served, ts, done.entries, done.recent[-RECENT_KEPT:]),
        labels=label_entries(cfg=cfg, epoch=epoch, xs=xs, ts=ts, served=done.served, provs=provs),
        swaps=done.swaps,
    )
    return Retrained(LearnedSequence(work, batch, done.served, done.updated, last), done.steps)


def _labels(
    cfg: ModelConfig,
    epoch: str,
    seq: LearnedSequence,
    learned: tuple[Sequence[Example], Sequence[int], Sequence[bytes]],
    *,
    start: int,
    at: list[int],
) -> list[bytes]:
    """The entries of the examples at ``at``, within the window ``seq`` learned from example
    ``start`` on, as the challengers' labels carry them (what the store keeps of each)."""
    if not at:
        return []
    xs, ts, provs = learned
    return label_entries(
        cfg=cfg, epoch=epoch, xs=[xs[i] for i in at], ts=[ts[i] for i in at],
        served=[seq.served[i - start] for i in at], provs=[provs[i] for i in at],
    )  # fmt: skip


def _after(cfg: ModelConfig, seq: LearnedSequence, base: Weights, x: Example, n: int) -> Weights:
    """The weights after the whole window ``seq`` learned from ``base`` (``n`` examples): its
    last example's update applied, as a commit applies it once the store accepts it."""
    work = seq.work.copy() if seq.work is base else seq.work
    work.seen = base.seen + n
    if seq.last:
        cfg.learner.apply(cfg, work, x, seq.last, work.seen)
    return work


def _until_drift(
    detector: Detector, state: list[float], served: Sequence[int], ts: Sequence[int]
) -> tuple[list[float], list[int], int | None]:
    """The detector fed the served learner's mistakes until its first drift that swaps (the
    warning flag down): its state after, the examples at which the background learner learned
    (the warning flag up), and the drift's place (None: none)."""
    warned = []
    for j, (s, t) in enumerate(zip(served, ts, strict=True)):
        state = detector.update(state, int(s != t))
        warning, drift = detector.flags(state)
        if warning:
            warned.append(j)
        elif drift:
            return state, warned, j
    return state, warned, None


def _item(entry: bytes) -> bytes:
    """An example's entry as the background learner keeps it: without its ordinal."""
    return entry.split(ENTRY_SEP, 1)[1]


def _replaced(cfg: ModelConfig, version: int, items: list[bytes]) -> Weights:
    """The background learner that replaces the served one at ``version``: its examples
    learned afresh, as every replica replays the entries the store writes for them."""
    weights = Weights.zeros(cfg)
    weights.version = version
    for k, item in enumerate(items, 1):
        apply_entry(cfg, weights, relearned_entry(item, k, RESTARTED if k == 1 else RELEARNED))
    weights.seen = len(items)
    return weights
