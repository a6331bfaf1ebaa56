"""The reference of retraining (``service/learner/retraining.py``) against River's
``drift.DriftRetrainingClassifier`` around a River classifier written here from the service's
own rule: every prediction of the stream equal, for each learner, on streams whose concept
stays, turns at once, or turns slowly; and no retrain on a stable stream of 12,000 examples."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from river import base, drift

from service.contract.store_values import SyncData
from service.engine.replica import Replica
from service.engine.sequence import run_sequence
from service.learner.codec import (
    PENDING,
    RELEARNED,
    RESTARTED,
    apply_entry,
    entry_head,
    entry_kind,
    pack_payload,
    pack_record,
)
from service.learner.config import ModelConfig
from service.learner.drift_detectors import DDM, EDDM, Detector
from service.learner.features import encode
from service.learner.online import OnlineLearner
from service.learner.perceptron import Weights
from service.learner.retraining import Retraining

from .test_drift_detectors import river_of

CONFIGS: dict[str, dict[str, Any]] = {
    "perceptron": {},
    "averaged": {"averaged": True},
    "pa1": {"algorithm": "pa1"},
    "arow": {"algorithm": "arow"},
    "logistic": {"algorithm": "logistic"},
    "three classes": {"classes": [0, 1, 2]},
}


class RiverLearner(base.Classifier):
    """A River classifier that learns by the service's rule (its ``learn_one`` predicts, then
    learns the label), so that River's wrapper can clone it afresh."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.learner = OnlineLearner(config)

    def learn_one(self, x: dict[Any, Any], y: Any, **kwargs: Any) -> None:
        self.learner.learn(list(x.values()), y)

    def predict_one(self, x: dict[Any, Any], **kwargs: Any) -> Any:
        return self.learner.predict(list(x.values()))

    def predict_proba_one(self, x: dict[Any, Any], **kwargs: Any) -> dict[Any, float]:
        return {self.predict_one(x): 1.0}  # River's wrapper predicts through it


def stream(kind: str, n: int, classes: int, seed: int) -> tuple[list[list[float]], list[int]]:
    """Two features and a noisy label from the angle of (x0, x1), whose concept stays (stable),
    turns half round at the middle (abrupt), or turns as far over the second half (slow)."""
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, 2))
    at = np.arange(n) / n
    turn = {"stable": 0 * at, "abrupt": (at >= 0.5) * 1.0, "slow": np.clip(2 * at - 1, 0, 1)}
    angle = np.arctan2(xs[:, 1], xs[:, 0]) + turn[kind] * math.pi
    ys = (np.floor((angle % (2 * math.pi)) / (2 * math.pi) * classes)).astype(int)
    noisy = rng.random(n) < 0.05
    ys[noisy] = rng.integers(0, classes, noisy.sum())
    if classes == 2:
        ys = ys * 2 - 1
    return xs.tolist(), ys.tolist()


@pytest.mark.parametrize("detector", [DDM(), EDDM(warm_start=10)], ids=["ddm", "eddm"])
@pytest.mark.parametrize("kind", ["stable", "abrupt", "slow"])
@pytest.mark.parametrize("learner", CONFIGS)
def test_every_prediction_is_rivers_drift_retraining_classifiers(
    learner: str, kind: str, detector: Detector
) -> None:
    settings = CONFIGS[learner]
    config = ModelConfig(n_features=2, **settings)
    ours = Retraining(config, detector)
    river = drift.DriftRetrainingClassifier(RiverLearner(config), river_of(detector))
    xs, ys = stream(kind, 3000, len(config.classes), seed=len(learner) + len(kind))
    retrains = 0
    for x, y in zip(xs, ys, strict=True):
        one: dict[Any, Any] = dict(enumerate(x))
        assert ours.predict(x) == river.predict_one(one)
        retrains += ours.learn(x, y).retrained
        river.learn_one(one, y)
    # the two served learners hold the same arrays (weights, averages, variances), bit for bit
    assert isinstance(river.model, RiverLearner)
    theirs = river.model.learner.weights.arrays()
    for a, b in zip(ours.served.weights.arrays(), theirs, strict=True):
        np.testing.assert_array_equal(a, b)
    # a perceptron and PA-I turn within a few mistakes, which DDM does not take for a drift
    if kind == "abrupt" and (learner not in ("perceptron", "pa1") or isinstance(detector, EDDM)):
        assert retrains > 0


def test_no_retrain_on_a_stable_stream_of_12000_examples() -> None:
    config = ModelConfig(n_features=2, averaged=True)
    ours = Retraining(config, DDM())
    xs, ys = stream("stable", 12_000, 2, seed=1)
    assert not any(ours.learn(x, y).retrained for x, y in zip(xs, ys, strict=True))


def test_a_retrained_learner_counts_and_averages_over_its_own_examples() -> None:
    config, detector = ModelConfig(n_features=2, averaged=True), DDM()
    ours = Retraining(config, detector)
    xs, ys = stream("abrupt", 3000, 2, seed=3)
    healed = [ours.learn(x, y) for x, y in zip(xs, ys, strict=True)]
    state, warned = detector.start(), []
    for h in healed:
        state = detector.update(state, int(h.outcome.mistake))
        warned.append(detector.flags(state)[0])
    swaps = [i for i, h in enumerate(healed) if h.retrained]
    last, before = swaps[-1], ([-1, *swaps])[-2]
    # the warning's examples since the swap before, the drift's, then every one after it
    assert ours.served.weights.seen == sum(warned[before + 1 : last]) + len(xs) - last


def retraining_log(config: ModelConfig, detector: Detector, xs: Any, ys: Any) -> tuple[Any, Any]:
    """The reference retraining the stream, and the update log the store writes for it: each
    update of the served learner as decided when it served (PENDING), and at a drift the
    background learner's examples then the drift's, to be learned afresh (RESTARTED first,
    RELEARNED after), each with its ordinal in the learner that learns it."""
    ours, log, background = Retraining(config, detector), [], []
    for x, y in zip(xs, ys, strict=True):
        p = ours.serve(x)
        t, own = config.classes.index(y), ours.served.weights.seen + 1
        record = pack_record("0123456789abcdef", p.served, [False] * config.n_classes,
                             pack_payload(p.raw, p.x))  # fmt: skip
        healed = ours.feedback(p, y)
        warning, _ = detector.flags(ours.state)
        if healed.retrained:
            background.append((t, record))
            for i, (bt, br) in enumerate(background):
                mark = RESTARTED if i == 0 else RELEARNED
                log.append(entry_head(i + 1, bt) + mark + br[len(PENDING) :])
            background = []
            continue
        if warning:
            background.append((t, record))
        if healed.outcome.updated:
            log.append(entry_head(own, t) + record)
    return ours, log


@pytest.mark.parametrize("learner", CONFIGS)
def test_the_log_of_a_retraining_replays_to_its_served_learner(learner: str) -> None:
    config = ModelConfig(n_features=2, **CONFIGS[learner])
    xs, ys = stream("abrupt", 3000, len(config.classes), seed=7)
    ours, log = retraining_log(config, DDM(warm_start=10, drift_threshold=2.5), xs, ys)
    assert any(entry_kind(e) == RESTARTED for e in log)
    replayed = Weights.zeros(config)
    for entry in log:
        apply_entry(config, replayed, entry)
    for a, b in zip(replayed.arrays(), ours.served.weights.arrays(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert replayed.version == len(log)


def test_a_copys_count_follows_the_store_down_at_a_retrain_and_never_back_to_an_older_answer() -> (
    None
):
    """A retrain lowers the served learner's count at a new version. A worker's copy takes the
    count of a newer version's answer, lower too, and keeps its own against an answer of an
    older version that arrives late (two requests' syncs overtaking one another); at one
    version the count only grows. (Taking the larger count always, a copy once ahead of the
    store stayed so: every learn commit of a retraining model, which the count guards, was
    refused 50 times, 503 model_busy, under concurrent feedback.)"""
    config = ModelConfig(n_features=2)
    x = encode(config, [1.0, 2.0])
    seq = run_sequence(config, "e" * 16, Weights.zeros(config), xs=[x, x], ts=[1, 1])
    rep = Replica("m", config, "e" * 16)
    rep.weights.version, rep.weights.seen = 0, 7
    rep.catch_up(SyncData("e" * 16, 1, 2, 0, None, seq.batch.entries[:1]))  # a retrain's
    assert (rep.weights.version, rep.weights.seen) == (1, 2)
    rep.catch_up(SyncData("e" * 16, 0, 9, 0, None, []))  # an older answer, come late
    assert (rep.weights.version, rep.weights.seen) == (1, 2)
    rep.catch_up(SyncData("e" * 16, 1, 4, 1, None, []))  # labels without an update
    rep.catch_up(SyncData("e" * 16, 1, 3, 1, None, []))  # (and an earlier answer of them)
    assert (rep.weights.version, rep.weights.seen) == (1, 4)
    rep.committed(None, 1, 6)
    assert rep.weights.seen == 6
    work = rep.weights.copy()
    work.version = 2
    rep.committed(work, 2, 1)  # a commit that retrained: its count, lower
    assert rep.weights is work and work.seen == 1
