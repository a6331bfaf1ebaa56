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

from service.contract.store_protocol import BACKGROUND_BYTES
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


@dataclass
class _Learned:
    """What the segments learned so far, each example's and the log's, in order."""

    served: list[int] = field(default_factory=list)
    updated: list[bool] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    entries: list[bytes] = field(default_factory=list)
    swaps: list[tuple[int, int]] = field(default_factory=list)

    def add(self, seq: LearnedSequence) -> None:
        """The last segment, learned to its end without a drift."""
        self.served += seq.served
        self.updated += seq.updated
        self.steps += map(int, seq.updated)
        self.entries += seq.batch.entries


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
    examples, ``background`` holds, as of ``base``)."""
    detector = cfg.drift_detector
    assert detector is not None
    state, items = read_state(detector, background.state), list(background.items)
    done, at, weights = _Learned(), 0, base
    while True:
        seq = run_sequence(
            cfg=cfg, epoch=epoch, base=weights, xs=xs[at:], ts=ts[at:], provs=provs[at:]
        )
        state, warned, drift = _until_drift(detector, state, seq.served, ts[at:])
        if drift is None:
            done.add(seq)
            work, last, recent = seq.work, seq.last, seq.batch.recent
            break
        upto = sum(seq.updated[:drift])  # (the drift's own update is the new learner's)
        done.served += seq.served[: drift + 1]
        done.updated += [*seq.updated[:drift], True]
        done.entries += seq.batch.entries[:upto]
        done.swaps.append((at + drift + 1, len(done.entries)))
        end = at + drift + 1
        kept = label_entries(
            cfg=cfg, epoch=epoch, xs=xs[at:end], ts=ts[at:end], served=seq.served[: drift + 1],
            provs=provs[at:end],
        )  # fmt: skip
        for j in warned:  # (the store keeps one while they hold BACKGROUND_BYTES at most)
            item = _item(kept[j])
            if (len(items) + 1) * len(item) <= BACKGROUND_BYTES:
                items.append(item)
        items.append(_item(kept[drift]))
        weights = _replaced(cfg, weights.version + upto, items)
        done.steps += [*map(int, seq.updated[:drift]), len(items)]
        items, at = [], end
        if at == len(xs):  # (the drift's example the last: nothing learned after it)
            work, last, recent = weights, None, []
            break
    batch = replace(
        batch_of(done.served, ts, done.entries, recent),
        labels=label_entries(cfg=cfg, epoch=epoch, xs=xs, ts=ts, served=done.served, provs=provs),
        swaps=done.swaps,
    )
    return Retrained(LearnedSequence(work, batch, done.served, done.updated, last), done.steps)


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
