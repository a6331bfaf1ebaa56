"""The learner core (service.learner) against a naive reference, plus its contracts.

The reference below is written from the conventions in service/learner/perceptron.py alone:
plain Python loops over lists, reusing nothing of the service but ``ModelConfig`` (as a
parameter bag) and ``bucket`` (the feature hash). With small integer features and dyadic
learning rates and margins every number is exact, so the service must agree bit for bit.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.learner import (
    ConfigError,
    Example,
    FeatureError,
    Label,
    ModelConfig,
    Perceptron,
    Weights,
    encode,
)
from service.learner.codec import (
    pack_payload,
    pack_record,
    pack_weights,
    unpack_entry,
    unpack_payload,
    unpack_weights,
)
from service.learner.features import bucket
from service.learner.perceptron import apply, raw_scores, update_plan

Features = list[Any] | dict[str, Any]
Stream = list[tuple[Features, Label]]
Number = float | Fraction
Steps = list[tuple[int, float]]  # (row, coefficient of x) for each row an update changes

N_EXAMPLES = 300
DIM = 5

# ---------------------------------------------------------------------------------------------
# The naive reference: one prediction rule and one update rule per strategy.
# ---------------------------------------------------------------------------------------------


def argmax_first(values: Sequence[Number]) -> int:
    best = 0
    for c in range(1, len(values)):
        if values[c] > values[best]:
            best = c
    return best


def binary_predict(cfg: ModelConfig, scores: Sequence[Number]) -> int:
    return 1 if scores[0] > 0 else 0


def binary_update(cfg: ModelConfig, scores: Sequence[float], t: int) -> Steps:
    y = 1 if t == 1 else -1
    if y * scores[0] <= cfg.margin:
        return [(0, cfg.learning_rate * y)]
    return []


def multiclass_predict(cfg: ModelConfig, scores: Sequence[Number]) -> int:
    return argmax_first(scores)


def multiclass_update(cfg: ModelConfig, scores: Sequence[float], t: int) -> Steps:
    rival = argmax_first([-math.inf if c == t else s for c, s in enumerate(scores)])
    wrong = argmax_first(scores) != t
    if wrong or (cfg.margin > 0 and scores[t] - scores[rival] <= cfg.margin):
        return [(t, cfg.learning_rate), (rival, -cfg.learning_rate)]
    return []


def ovr_predict(cfg: ModelConfig, scores: Sequence[Number]) -> int:
    return argmax_first(scores)


def ovr_update(cfg: ModelConfig, scores: Sequence[float], t: int) -> Steps:
    steps: Steps = []
    for c, s in enumerate(scores):
        y = 1 if c == t else -1
        if y * s <= cfg.margin:
            steps.append((c, cfg.learning_rate * y))
    return steps


def pairs(cfg: ModelConfig) -> list[tuple[int, int]]:
    return list(itertools.combinations(range(len(cfg.classes)), 2))


def ovo_predict(cfg: ModelConfig, scores: Sequence[Number]) -> int:
    votes = [0] * len(cfg.classes)
    for (i, j), s in zip(pairs(cfg), scores, strict=True):
        votes[j if s > 0 else i] += 1
    return argmax_first(votes)


def ovo_update(cfg: ModelConfig, scores: Sequence[float], t: int) -> Steps:
    steps: Steps = []
    for row, ((i, j), s) in enumerate(zip(pairs(cfg), scores, strict=True)):
        if t not in (i, j):
            continue
        y = 1 if t == j else -1
        if y * s <= cfg.margin:
            steps.append((row, cfg.learning_rate * y))
    return steps


Rules = tuple[
    Callable[[ModelConfig, Sequence[Number]], int],
    Callable[[ModelConfig, Sequence[float], int], Steps],
]
RULES: dict[str, Rules] = {
    "binary": (binary_predict, binary_update),
    "multiclass": (multiclass_predict, multiclass_update),
    "ovr": (ovr_predict, ovr_update),
    "ovo": (ovo_predict, ovo_update),
}


class Reference:
    """A loop-based perceptron that keeps every weight vector it ever had (for averaging)."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        k = len(cfg.classes)
        strategy = "binary" if k == 2 else cfg.multiclass
        self.predict_rule, self.update_rule = RULES[strategy]
        rows = {"binary": 1, "multiclass": k, "ovr": k, "ovo": k * (k - 1) // 2}[strategy]
        dim = cfg.n_features if cfg.n_features is not None else 2**cfg.hash_bits
        self.w = [[0.0] * dim for _ in range(rows)]
        self.b = [0.0] * rows
        self.history: list[tuple[list[list[float]], list[float]]] = []

    def vector(self, features: Features) -> list[float]:
        if self.cfg.n_features is not None:
            assert isinstance(features, list)
            return [float(v) for v in features]
        x = [0.0] * len(self.w[0])
        named = features.items() if isinstance(features, dict) else enumerate(features)
        for name, v in named:
            x[bucket(str(name), self.cfg.hash_bits)] += v  # colliding names are summed
        return x

    @staticmethod
    def dot(w: Sequence[Number], x: Sequence[Number]) -> Number:
        total: Number = 0.0
        for wi, xi in zip(w, x, strict=True):
            total += wi * xi
        return total

    def raw_scores(self, x: list[float]) -> list[float]:
        return [float(self.dot(w, x)) + b for w, b in zip(self.w, self.b, strict=True)]

    def mean_weights(self) -> tuple[list[list[Fraction]], list[Fraction]]:
        """The exact mean of the weights after each labelled example so far."""
        n = len(self.history)
        w = [
            [Fraction(math.fsum(h[0][r][i] for h in self.history)) / n for i in range(len(row))]
            for r, row in enumerate(self.w)
        ]
        b = [Fraction(math.fsum(h[1][r] for h in self.history)) / n for r in range(len(self.b))]
        return w, b

    def served_scores(self, x: list[float]) -> list[Number]:
        if not self.cfg.averaged or not self.history:
            return list(self.raw_scores(x))
        mean_w, mean_b = self.mean_weights()
        xs = [Fraction(v) for v in x]
        return [self.dot(w, xs) + b for w, b in zip(mean_w, mean_b, strict=True)]

    def learn(self, features: Features, label: Label) -> tuple[Label, bool, bool]:
        """Returns the served prediction, whether it was a mistake, and whether w/b changed."""
        x = self.vector(features)
        t = self.cfg.classes.index(label)
        served = self.predict_rule(self.cfg, self.served_scores(x))
        steps = self.update_rule(self.cfg, self.raw_scores(x), t)
        for row, coef in steps:
            for i, xi in enumerate(x):
                self.w[row][i] += coef * xi
            if self.cfg.fit_bias:
                self.b[row] += coef
        self.history.append(([list(row) for row in self.w], list(self.b)))
        return self.cfg.classes[served], served != t, bool(steps)


# ---------------------------------------------------------------------------------------------
# Random streams.
# ---------------------------------------------------------------------------------------------

NAMES = [f"tok{i}" for i in range(20)] + ["colour=red", "colour=rouge", "größe", "", "a|b"]


def dense_stream(cfg: ModelConfig, seed: int, *, floats: bool = False) -> Stream:
    """Labels from a noisy linear teacher, so the model learns something and also errs."""
    rng = np.random.default_rng(seed)
    assert cfg.n_features is not None
    k, d = len(cfg.classes), cfg.n_features
    teacher = rng.integers(-2, 3, size=(k, d))
    x: np.ndarray = (
        rng.normal(0.0, 2.0, size=(N_EXAMPLES, d))
        if floats
        else rng.integers(-3, 4, size=(N_EXAMPLES, d))
    )
    labels = (x @ teacher.T + rng.normal(0.0, 1.5, size=(N_EXAMPLES, k))).argmax(axis=1)
    return [(row, cfg.classes[c]) for row, c in zip(x.tolist(), labels.tolist(), strict=True)]


def named_stream(cfg: ModelConfig, seed: int, *, floats: bool = False) -> Stream:
    rng = np.random.default_rng(seed)
    k = len(cfg.classes)
    teacher = {name: rng.integers(-2, 3, size=k) for name in NAMES}
    stream: Stream = []
    for _ in range(N_EXAMPLES):
        chosen = rng.choice(len(NAMES), size=int(rng.integers(1, 7)), replace=False)
        if floats:
            values = rng.normal(0.0, 2.0, size=len(chosen)).tolist()
        else:
            values = rng.integers(-3, 4, size=len(chosen)).tolist()
        features = {NAMES[i]: v for i, v in zip(chosen.tolist(), values, strict=True)}
        logits = sum(v * teacher[n] for n, v in features.items()) + rng.normal(0.0, 1.5, size=k)
        stream.append((features, cfg.classes[int(np.argmax(logits))]))
    return stream


def run_both(cfg: ModelConfig, stream: Stream) -> tuple[Perceptron, Reference]:
    """Feed ``stream`` to the service and the reference, comparing every outcome."""
    model, ref = Perceptron(cfg), Reference(cfg)
    for n, (features, label) in enumerate(stream):
        expected = ref.learn(features, label)
        assert model.predict(features) == expected[0], f"prediction before example {n}"
        got = model.learn(features, label)
        assert (got.label, got.mistake, got.updated) == expected, f"example {n}: {features}"
    assert model.weights.seen == len(stream)
    return model, ref


def assert_weights_match(model: Perceptron, ref: Reference, *, exact: bool) -> None:
    weights = model.weights
    ref_w, ref_b = np.array(ref.w), np.array(ref.b)
    if exact:
        np.testing.assert_array_equal(weights.w, ref_w)
        np.testing.assert_array_equal(weights.b, ref_b)
    else:
        assert np.allclose(weights.w, ref_w, rtol=1e-9, atol=1e-9)
        assert np.allclose(weights.b, ref_b, rtol=1e-9, atol=1e-9)
    if not model.config.averaged:
        assert weights.wsum is None and weights.bsum is None
        return
    mean_w, mean_b = ref.mean_weights()
    avg_w, avg_b = weights.averaged()
    # w - wsum/seen is rounded twice, so the mean can differ from the exact one in the last bit.
    assert np.allclose(avg_w, np.array(mean_w, dtype=float), rtol=1e-12, atol=1e-12)
    assert np.allclose(avg_b, np.array(mean_b, dtype=float), rtol=1e-12, atol=1e-12)
    if exact:
        # With exact arithmetic the bookkeeping identity seen * mean == seen * w - wsum holds
        # to the bit: both sides are sums of small multiples of the learning rate.
        assert weights.wsum is not None and weights.bsum is not None
        history_w = [
            [math.fsum(h[0][r][i] for h in ref.history) for i in range(len(row))]
            for r, row in enumerate(ref.w)
        ]
        history_b = [math.fsum(h[1][r] for h in ref.history) for r in range(len(ref.b))]
        np.testing.assert_array_equal(weights.seen * weights.w - weights.wsum, history_w)
        np.testing.assert_array_equal(weights.seen * weights.b - weights.bsum, history_b)


def check_dense(params: dict[str, Any], seed: int) -> None:
    cfg = ModelConfig(n_features=DIM, **params)
    model, ref = run_both(cfg, dense_stream(cfg, seed))
    assert model.weights.version > 0
    assert_weights_match(model, ref, exact=True)


# ---------------------------------------------------------------------------------------------
# 1. Every strategy against the reference.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"classes": ("no", "yes")}, id="string-classes"),
        pytest.param({"margin": 1.0, "learning_rate": 0.5}, id="margin-1-lr-0.5"),
        pytest.param({"fit_bias": False}, id="no-bias"),
        pytest.param(
            {"fit_bias": False, "margin": 2.5, "learning_rate": 2.0}, id="no-bias-margin-2.5-lr-2"
        ),
    ],
)
def test_binary_matches_reference(params: dict[str, Any]) -> None:
    check_dense(params, seed=11)


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"classes": ("a", "b", "c")}, id="3-classes"),
        pytest.param({"classes": (0, 1, 2, 3), "margin": 1.5}, id="4-classes-margin-1.5"),
        pytest.param(
            {"classes": ("x", 7, "z"), "learning_rate": 0.25, "margin": 0.5}, id="lr-0.25-margin"
        ),
        pytest.param({"classes": ("a", "b", "c", "d"), "fit_bias": False}, id="no-bias"),
    ],
)
def test_multiclass_matches_reference(params: dict[str, Any]) -> None:
    check_dense({"multiclass": "multiclass", **params}, seed=12)


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"classes": ("a", "b", "c")}, id="3-classes"),
        pytest.param({"classes": (0, 1, 2, 3), "margin": 1.0}, id="4-classes-margin-1"),
        pytest.param({"classes": ("a", "b", "c"), "learning_rate": 0.5}, id="lr-0.5"),
        pytest.param({"classes": ("a", "b", "c", "d"), "fit_bias": False}, id="no-bias"),
    ],
)
def test_ovr_matches_reference(params: dict[str, Any]) -> None:
    check_dense({"multiclass": "ovr", **params}, seed=13)


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"classes": ("a", "b", "c")}, id="3-classes"),
        pytest.param({"classes": (0, 1, 2, 3), "margin": 1.0}, id="4-classes-margin-1"),
        pytest.param({"classes": tuple("abcde"), "learning_rate": 0.5}, id="5-classes-lr-0.5"),
        pytest.param({"classes": ("a", "b", "c", "d"), "fit_bias": False}, id="no-bias"),
    ],
)
def test_ovo_matches_reference(params: dict[str, Any]) -> None:
    check_dense({"multiclass": "ovo", **params}, seed=14)


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({}, id="binary"),
        pytest.param({"fit_bias": False, "margin": 1.0}, id="binary-no-bias-margin-1"),
        pytest.param({"learning_rate": 0.5, "margin": 0.5}, id="binary-lr-0.5"),
        pytest.param({"classes": ("a", "b", "c"), "multiclass": "multiclass"}, id="multiclass"),
        pytest.param({"classes": (0, 1, 2, 3), "multiclass": "ovr", "margin": 1.0}, id="ovr"),
        pytest.param({"classes": ("a", "b", "c", "d"), "multiclass": "ovo"}, id="ovo"),
    ],
)
def test_averaged_matches_reference(params: dict[str, Any]) -> None:
    check_dense({"averaged": True, **params}, seed=15)


STRATEGY_PARAMS = [
    pytest.param({}, id="binary"),
    pytest.param({"averaged": True, "margin": 0.5}, id="binary-averaged"),
    pytest.param({"classes": ("a", "b", "c"), "margin": 0.5}, id="multiclass"),
    pytest.param({"classes": ("a", "b", "c"), "multiclass": "ovr"}, id="ovr"),
    pytest.param({"classes": ("a", "b", "c", "d"), "multiclass": "ovo"}, id="ovo"),
    pytest.param(
        {"classes": ("a", "b", "c", "d"), "multiclass": "ovo", "averaged": True},
        id="ovo-averaged",
    ),
]


@pytest.mark.parametrize("params", STRATEGY_PARAMS)
def test_float_stream_matches_reference_closely(params: dict[str, Any]) -> None:
    cfg = ModelConfig(n_features=DIM, learning_rate=0.3, **params)
    model, ref = run_both(cfg, dense_stream(cfg, seed=16, floats=True))
    assert_weights_match(model, ref, exact=False)


# ---------------------------------------------------------------------------------------------
# 2. Named (hashed) features.
# ---------------------------------------------------------------------------------------------


def test_names_collide_in_four_hash_bits() -> None:
    """Precondition of the named-feature tests: 25 names in 16 buckets do share buckets."""
    buckets = [bucket(name, 4) for name in NAMES]
    assert len(set(buckets)) < len(buckets)
    assert all(0 <= b < 16 for b in buckets)
    assert bucket("colour=red", 18) == 170420  # the documented, process-independent value


@pytest.mark.parametrize("params", STRATEGY_PARAMS)
def test_named_features_match_hashed_reference(params: dict[str, Any]) -> None:
    cfg = ModelConfig(n_features=None, hash_bits=4, **params)
    model, ref = run_both(cfg, named_stream(cfg, seed=21))
    assert_weights_match(model, ref, exact=True)


@pytest.mark.parametrize("params", STRATEGY_PARAMS[:3])
def test_named_float_stream_matches_reference_closely(params: dict[str, Any]) -> None:
    cfg = ModelConfig(n_features=None, hash_bits=4, learning_rate=0.3, **params)
    model, ref = run_both(cfg, named_stream(cfg, seed=22, floats=True))
    assert_weights_match(model, ref, exact=False)


def test_list_features_on_a_named_model_are_named_by_position() -> None:
    cfg = ModelConfig(hash_bits=6)
    as_list, as_dict = Perceptron(cfg), Perceptron(cfg)
    for features, label in [([1, -2, 3], 1), ([0, 2], -1), ([4, 0, 0, 1], 1)]:
        named = {str(i): v for i, v in enumerate(features)}
        assert as_list.learn(features, label) == as_dict.learn(named, label)
    np.testing.assert_array_equal(as_list.weights.w, as_dict.weights.w)
    np.testing.assert_array_equal(as_list.weights.b, as_dict.weights.b)


def test_colliding_names_are_summed_into_one_bucket() -> None:
    cfg = ModelConfig(hash_bits=1)
    same = [n for n in NAMES if bucket(n, 1) == bucket(NAMES[0], 1)][:3]
    x = encode(cfg, {same[0]: 1.5, same[1]: -4.0, same[2]: 0.25})
    assert x.index is not None
    assert x.index.tolist() == [bucket(NAMES[0], 1)]
    assert x.values.tolist() == [1.5 - 4.0 + 0.25]


# ---------------------------------------------------------------------------------------------
# 3. Behaviours (in the spirit of River's generic estimator checks).
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, features",
    [
        pytest.param({"n_features": 3}, [1.0, -2, 3.5], id="dense-list"),
        pytest.param({"hash_bits": 4}, {"a": 1.0, "b": -2, "c": 3.5}, id="named-dict"),
        pytest.param({"hash_bits": 4, "averaged": True}, {"a": 1.0, "b": 2}, id="named-averaged"),
        pytest.param({"hash_bits": 4}, [1.0, -2, 3.5], id="named-list"),
    ],
)
def test_inputs_are_not_mutated(params: dict[str, Any], features: Features) -> None:
    model = Perceptron(ModelConfig(**params))
    before = copy.deepcopy(features)
    for label in (1, -1, 1):
        model.predict(features)
        model.learn(features, label)
        model.encode(features)
        assert features == before
        assert type(features) is type(before)
        assert [type(v) for v in features] == [type(v) for v in before]


@pytest.mark.parametrize("params", STRATEGY_PARAMS)
def test_feature_order_has_no_effect_for_named_features(params: dict[str, Any]) -> None:
    """One bucket, values of very different magnitudes: a naive sum would depend on order."""
    cfg = ModelConfig(hash_bits=1, learning_rate=0.3, **params)
    rng = np.random.default_rng(31)
    forward, shuffled = Perceptron(cfg), Perceptron(cfg)
    for n in range(60):
        chosen = rng.choice(len(NAMES), size=8, replace=False)
        values = (rng.normal(size=8) * 10.0 ** rng.integers(-8, 14, size=8)).tolist()
        features = {NAMES[i]: v for i, v in zip(chosen.tolist(), values, strict=True)}
        keys = list(features)
        rng.shuffle(keys)
        reordered = {k: features[k] for k in keys}
        x, y = encode(cfg, features), encode(cfg, reordered)
        assert x.index is not None and y.index is not None
        assert x.index.tolist() == y.index.tolist()
        assert x.values.tobytes() == y.values.tobytes()
        label = cfg.classes[n % len(cfg.classes)]
        assert forward.learn(features, label) == shuffled.learn(reordered, label)
    assert forward.weights.w.tobytes() == shuffled.weights.w.tobytes()
    assert forward.weights.b.tobytes() == shuffled.weights.b.tobytes()


@pytest.mark.parametrize("params", STRATEGY_PARAMS)
def test_unseen_feature_names_are_handled(params: dict[str, Any]) -> None:
    cfg = ModelConfig(hash_bits=10, **params)
    model = Perceptron(cfg)
    for features, label in named_stream(cfg, seed=41)[:50]:
        model.learn(features, label)
    seen_buckets = {bucket(name, 10) for name in NAMES}
    unseen = next(f"new{i}" for i in range(1000) if bucket(f"new{i}", 10) not in seen_buckets)
    assert not model.weights.w[:, bucket(unseen, 10)].any()
    served_b = model.weights.averaged()[1] if cfg.averaged else model.weights.b
    # Only the bias counts for a feature the model never saw.
    np.testing.assert_array_equal(model.scores(model.encode({unseen: 3.0})), served_b)
    assert model.predict({unseen: 3.0}) in cfg.classes
    assert model.predict({unseen: 3.0, NAMES[0]: 1.0}) == model.predict({NAMES[0]: 1.0})
    outcome = model.learn({unseen: 3.0}, cfg.classes[0])
    assert outcome.label in cfg.classes
    assert model.weights.w[:, bucket(unseen, 10)].any() == outcome.updated


@pytest.mark.parametrize(
    "params",
    [
        *STRATEGY_PARAMS,
        pytest.param({"margin": 3.0, "learning_rate": 0.5}, id="binary-margin-3"),
        pytest.param({"classes": (0, 1, 2), "multiclass": "ovr", "margin": 2.0}, id="ovr-margin-2"),
    ],
)
def test_correct_prediction_outside_margin_changes_nothing(params: dict[str, Any]) -> None:
    cfg = ModelConfig(n_features=3, **params)
    model = Perceptron(cfg)
    x, label = [2, -1, 1], cfg.classes[-1]
    for _ in range(20):
        if not model.learn(x, label).updated:
            break
    else:
        pytest.fail("the model never stopped updating on one repeated example")
    before = copy.deepcopy(model.weights)
    outcome = model.learn(x, label)
    assert (outcome.label, outcome.mistake, outcome.updated) == (label, False, False)
    after = model.weights
    assert after.version == before.version and after.seen == before.seen + 1
    for name in ("w", "b", "wsum", "bsum"):
        assert (
            getattr(after, name) is None
            or getattr(after, name).tobytes() == getattr(before, name).tobytes()
        ), name


def test_binary_updates_on_the_margin_but_not_beyond() -> None:
    model = Perceptron(ModelConfig(n_features=1, classes=(0, 1), margin=2.0))
    assert model.learn([1], 1).updated  # s = 0
    assert (model.weights.w.tolist(), model.weights.b.tolist()) == ([[1.0]], [1.0])
    outcome = model.learn([1], 1)  # s = 2 == margin: still updates, yet was no mistake
    assert (outcome.label, outcome.mistake, outcome.updated) == (1, False, True)
    assert not model.learn([1], 1).updated  # s = 4 > margin
    assert model.weights.version == 2


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({}, id="binary"),
        pytest.param({"classes": ("no", "yes")}, id="binary-strings"),
        pytest.param({"averaged": True}, id="binary-averaged"),
        pytest.param({"classes": ("a", "b", "c")}, id="multiclass"),
        pytest.param({"classes": ("a", "b", "c"), "multiclass": "ovr"}, id="ovr"),
        pytest.param({"classes": ("a", "b", "c", "d"), "multiclass": "ovo"}, id="ovo"),
    ],
)
def test_tie_at_score_zero_predicts_first_class(params: dict[str, Any]) -> None:
    model = Perceptron(ModelConfig(n_features=2, **params))
    assert model.predict([1.0, -1.0]) == model.config.classes[0]
    assert model.learn([1.0, -1.0], model.config.classes[-1]).label == model.config.classes[0]


def test_binary_tie_at_zero_updates_with_zero_margin() -> None:
    model = Perceptron(ModelConfig(n_features=2, classes=("neg", "pos"), learning_rate=0.5))
    outcome = model.learn([2.0, -4.0], "neg")  # y * s = -0.0 <= 0
    assert (outcome.label, outcome.mistake, outcome.updated) == ("neg", False, True)
    assert model.weights.w.tolist() == [[-1.0, 2.0]]
    assert model.weights.b.tolist() == [-0.5]

    model = Perceptron(ModelConfig(n_features=2, fit_bias=False))
    outcome = model.learn([2.0, -4.0], 1)
    assert (outcome.label, outcome.mistake, outcome.updated) == (-1, True, True)
    assert (model.weights.w.tolist(), model.weights.b.tolist()) == ([[2.0, -4.0]], [0.0])


def test_multiclass_tie_won_by_the_true_class_needs_a_margin_to_update() -> None:
    no_margin = Perceptron(ModelConfig(n_features=2, classes=("a", "b", "c")))
    outcome = no_margin.learn([1.0, 1.0], "a")
    assert (outcome.label, outcome.mistake, outcome.updated) == ("a", False, False)
    margin = Perceptron(ModelConfig(n_features=2, classes=("a", "b", "c"), margin=0.5))
    outcome = margin.learn([1.0, 1.0], "a")
    assert (outcome.label, outcome.mistake, outcome.updated) == ("a", False, True)
    # Reward the true class, punish the first of the tied others.
    assert margin.weights.w.tolist() == [[1.0, 1.0], [-1.0, -1.0], [0.0, 0.0]]
    assert margin.weights.b.tolist() == [1.0, -1.0, 0.0]


def test_ovo_rows_only_learn_their_own_classes() -> None:
    model = Perceptron(ModelConfig(n_features=1, classes=("a", "b", "c"), multiclass="ovo"))
    model.learn([1.0], "b")  # rows (a,b), (a,c), (b,c): b is positive in the first, negative last
    assert model.weights.w.tolist() == [[1.0], [0.0], [-1.0]]
    assert model.weights.b.tolist() == [1.0, 0.0, -1.0]


def test_averaged_prediction_uses_the_mean_of_past_weights() -> None:
    model = Perceptron(ModelConfig(n_features=1, classes=(0, 1), averaged=True))
    model.learn([1.0], 1)  # w = 1, b = 1
    for _ in range(3):
        model.learn([1.0], 1)  # s = 2 > 0: no update
    model.learn([3.0], 0)  # raw s = 4, served 4 too: w = -2, b = 0
    avg_w, avg_b = model.weights.averaged()
    # w - wsum / seen = -2 - (-12 / 5): the mean of 1, 1, 1, 1, -2 up to rounding.
    assert avg_w.tolist() == [[pytest.approx(0.4, rel=1e-15)]]
    assert avg_b.tolist() == [pytest.approx(0.8, rel=1e-15)]
    # The current weights would say 0 (s = -2 + 0 < 0); the mean of the five says 1 (s = 1.2).
    assert model.predict([1.0]) == 1
    assert float(raw_scores(model.weights, model.encode([1.0]))[0]) == -2.0


# ---------------------------------------------------------------------------------------------
# 4. Configuration validation.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, message",
    [
        pytest.param(
            {"margin": -1},
            "The 'margin' parameter must be a float in [0, 1e12]. Got -1 instead.",
            id="margin",
        ),
        pytest.param(
            {"margin": math.nan},
            "The 'margin' parameter must be a float in [0, 1e12]. Got nan instead.",
            id="margin-nan",
        ),
        pytest.param(
            {"learning_rate": 0},
            "The 'learning_rate' parameter must be a float in (0, 1e6]. Got 0 instead.",
            id="learning-rate-zero",
        ),
        pytest.param(
            {"learning_rate": math.inf},
            "The 'learning_rate' parameter must be a float in (0, 1e6]. Got inf instead.",
            id="learning-rate-inf",
        ),
        pytest.param(
            {"learning_rate": "1"},
            "The 'learning_rate' parameter must be a float in (0, 1e6]. Got '1' instead.",
            id="learning-rate-string",
        ),
        pytest.param(
            {"hash_bits": 31},
            "The 'hash_bits' parameter must be an int in [1, 30]. Got 31 instead.",
            id="hash-bits-31",
        ),
        pytest.param(
            {"hash_bits": True},
            "The 'hash_bits' parameter must be an int in [1, 30]. Got True instead.",
            id="hash-bits-bool",
        ),
        pytest.param(
            {"n_features": 0},
            "The 'n_features' parameter must be an int >= 1 or null. Got 0 instead.",
            id="n-features-zero",
        ),
        pytest.param(
            {"n_features": 2.0},
            "The 'n_features' parameter must be an int >= 1 or null. Got 2.0 instead.",
            id="n-features-float",
        ),
        pytest.param(
            {"multiclass": "ova"},
            "The 'multiclass' parameter must be one of 'multiclass', 'ovr', 'ovo'. "
            "Got 'ova' instead.",
            id="multiclass",
        ),
        pytest.param(
            {"classes": ("a", "b", "a")},
            "The 'classes' parameter must be a list of distinct labels. "
            "Got ['a', 'b', 'a'] instead.",
            id="classes-duplicate",
        ),
        pytest.param(
            {"classes": (1.5, 2)},
            "The 'classes' parameter must be a list of integers or strings. Got [1.5, 2] instead.",
            id="classes-float",
        ),
        pytest.param(
            {"classes": (True, False)},
            "The 'classes' parameter must be a list of integers or strings. "
            "Got [True, False] instead.",
            id="classes-bool",
        ),
        pytest.param(
            {"feedback_ttl_s": 0},
            "The 'feedback_ttl_s' parameter must be an int in [1, 2592000] (30 days). "
            "Got 0 instead.",
            id="feedback-ttl",
        ),
        pytest.param(
            {"fit_bias": 1},
            "The 'fit_bias' parameter must be a boolean. Got 1 instead.",
            id="fit-bias",
        ),
        pytest.param(
            {"averaged": "yes"},
            "The 'averaged' parameter must be a boolean. Got 'yes' instead.",
            id="averaged",
        ),
    ],
)
def test_bad_parameters_raise_config_error(params: dict[str, Any], message: str) -> None:
    (parameter,) = params
    with pytest.raises(ConfigError) as info:
        ModelConfig(**params)
    assert str(info.value) == message
    assert info.value.parameter == parameter
    assert isinstance(info.value, ValueError)
    with pytest.raises(ConfigError, match=r"^The '\w+' parameter must be .+\. Got .+ instead\.$"):
        Perceptron(**params)


@pytest.mark.parametrize(
    "classes",
    [pytest.param((), id="none"), pytest.param(("a",), id="one"), pytest.param("ab", id="string")],
)
def test_fewer_than_two_classes_are_rejected(classes: Any) -> None:
    with pytest.raises(ConfigError, match=r"^The 'classes' parameter must be a list of at least 2"):
        ModelConfig(classes=classes)


def test_boundary_parameters_are_accepted_and_round_trip() -> None:
    cfg = ModelConfig(classes=(0, "a", 2), multiclass="ovo", hash_bits=1, learning_rate=1, margin=0)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.to_dict()["classes"] == [0, "a", 2]
    assert ModelConfig(hash_bits=30).dim == 2**30
    assert ModelConfig.from_dict({"classes": ["x", "y"], "unknown": 1}).classes == ("x", "y")


# ---------------------------------------------------------------------------------------------
# 5. Feature errors.
# ---------------------------------------------------------------------------------------------

DENSE = {"n_features": 3}
NAMED = {"hash_bits": 4}


@pytest.mark.parametrize(
    "params, features, code",
    [
        pytest.param(DENSE, [1.0, 2.0], "wrong_dimension", id="too-few"),
        pytest.param(DENSE, [1.0, 2.0, 3.0, 4.0], "wrong_dimension", id="too-many"),
        pytest.param(DENSE, [], "wrong_dimension", id="empty-list-dense"),
        pytest.param(DENSE, {"a": 1.0}, "wrong_dimension", id="named-on-dense"),
        pytest.param(DENSE, [1.0, math.nan, 3.0], "non_finite_feature", id="nan"),
        pytest.param(DENSE, [math.inf, 0.0, 0.0], "non_finite_feature", id="inf"),
        pytest.param(DENSE, [0.0, 0.0, -math.inf], "non_finite_feature", id="minus-inf"),
        pytest.param(NAMED, {"a": 1.0, "b": math.nan}, "non_finite_feature", id="named-nan"),
        pytest.param(NAMED, {"a": -math.inf}, "non_finite_feature", id="named-inf"),
        pytest.param(DENSE, [1.0, "2", 3.0], "invalid_features", id="string-value"),
        pytest.param(DENSE, [1.0, None, 3.0], "invalid_features", id="none-value"),
        pytest.param(DENSE, [True, 0.0, 1.0], "invalid_features", id="bool-value"),
        pytest.param(DENSE, [1.0, [2.0], 3.0], "invalid_features", id="nested-list"),
        pytest.param(NAMED, {"a": "x"}, "invalid_features", id="named-string-value"),
        pytest.param(NAMED, {"a": False}, "invalid_features", id="named-bool-value"),
        pytest.param(DENSE, "abc", "invalid_features", id="string"),
        pytest.param(DENSE, b"abc", "invalid_features", id="bytes"),
        pytest.param(DENSE, 3.0, "invalid_features", id="number"),
        pytest.param(DENSE, {1.0, 2.0, 3.0}, "invalid_features", id="set"),
        pytest.param(NAMED, {}, "empty_features", id="empty-dict"),
        pytest.param(NAMED, [], "empty_features", id="empty-list-named"),
    ],
)
def test_bad_features_raise_feature_error(params: dict[str, Any], features: Any, code: str) -> None:
    cfg = ModelConfig(**params)
    with pytest.raises(FeatureError) as info:
        encode(cfg, features)
    assert info.value.code == code
    assert isinstance(info.value, ValueError) and str(info.value)
    model = Perceptron(cfg)
    with pytest.raises(FeatureError) as info:
        model.learn(features, 1)
    assert info.value.code == code
    with pytest.raises(FeatureError):
        model.predict(features)
    assert (model.weights.seen, model.weights.version) == (0, 0)


def test_wrong_dimension_message_names_both_sizes() -> None:
    with pytest.raises(FeatureError, match=r"^This model takes exactly 3 features; got 2\.$"):
        encode(ModelConfig(n_features=3), [1.0, 2.0])


@pytest.mark.parametrize(
    "label",
    [pytest.param("z", id="unknown"), pytest.param(True, id="bool"), pytest.param(1.0, id="float")],
)
def test_unknown_label_raises_feature_error(label: Any) -> None:
    model = Perceptron(ModelConfig(n_features=2, classes=(0, 1, 2)))
    with pytest.raises(FeatureError) as info:
        model.learn([1.0, 2.0], label)
    assert info.value.code == "unknown_label"
    assert (model.weights.seen, model.weights.version) == (0, 0)


def test_huge_integer_feature_raises_feature_error() -> None:
    with pytest.raises(FeatureError) as info:
        encode(ModelConfig(n_features=2), [10**400, 1])
    assert info.value.code == "value_too_large"


@pytest.mark.parametrize("value", [1e16, -1e300, 10**16])
def test_values_past_the_limit_are_refused(value: float) -> None:
    with pytest.raises(FeatureError) as info:
        encode(ModelConfig(n_features=2), [value, 1])
    assert info.value.code == "value_too_large"
    assert "1e+15" in str(info.value)


def test_colliding_values_that_overflow_raise_feature_error() -> None:
    a, b = [n for n in NAMES if bucket(n, 1) == 0][:2]
    with pytest.raises(FeatureError):
        encode(ModelConfig(hash_bits=1), {a: 1e308, b: 1e308})


def test_scores_cannot_overflow_at_the_value_limit() -> None:
    model = Perceptron(ModelConfig(n_features=2, learning_rate=1e6))
    for i in range(50):
        model.learn([1e15, -1e15], 1 if i % 2 else -1)
    assert np.isfinite(model.weights.w).all()


def test_classes_may_be_given_as_a_list() -> None:
    assert ModelConfig(classes=["a", "b"]).classes == ("a", "b")


@pytest.mark.parametrize("param", ["learning_rate", "margin"])
def test_huge_integer_parameters_are_config_errors(param: str) -> None:
    parameters: dict[str, Any] = {param: 10**400}
    with pytest.raises(ConfigError):
        ModelConfig(**parameters)


def test_non_string_feature_names_are_refused() -> None:
    with pytest.raises(FeatureError) as info:
        encode(ModelConfig(), {1: 1.0})  # type: ignore[dict-item]
    assert info.value.code == "invalid_features"


# ---------------------------------------------------------------------------------------------
# 6. Byte layouts.
# ---------------------------------------------------------------------------------------------

CODEC_PARAMS = [
    pytest.param({"n_features": DIM}, id="dense-binary"),
    pytest.param({"n_features": DIM, "averaged": True}, id="dense-binary-averaged"),
    pytest.param(
        {"n_features": DIM, "classes": ("a", "b", "c"), "multiclass": "ovo", "averaged": True},
        id="dense-ovo-averaged",
    ),
    pytest.param({"hash_bits": 4, "classes": (0, 1, 2), "multiclass": "ovr"}, id="named-ovr"),
    pytest.param({"hash_bits": 5, "averaged": True}, id="named-binary-averaged"),
    pytest.param(
        {"hash_bits": 4, "classes": ("a", "b", "c"), "averaged": True},
        id="named-multiclass-averaged",
    ),
]


def float_stream(cfg: ModelConfig, seed: int) -> Stream:
    maker = dense_stream if cfg.dense else named_stream
    return maker(cfg, seed, floats=True)[:80]


def assert_same_bits(a: Weights, b: Weights) -> None:
    for name in ("w", "b", "wsum", "bsum"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.shape == y.shape and x.dtype == y.dtype == np.float64, name
            assert x.tobytes() == y.tobytes(), name
    assert (a.version, a.seen) == (b.version, b.seen)


@pytest.mark.parametrize("params", CODEC_PARAMS)
def test_weights_round_trip_bit_for_bit(params: dict[str, Any]) -> None:
    cfg = ModelConfig(learning_rate=0.1, **params)
    model = Perceptron(cfg)
    for features, label in float_stream(cfg, seed=51):
        model.learn(features, label)
    model.weights.w[0, 0] = -0.0  # signed zeros and subnormals survive too
    model.weights.b[-1] = 5e-324
    data = pack_weights(model.weights)
    assert len(data) == 8 * (cfg.n_rows * cfg.dim + cfg.n_rows) * (2 if cfg.averaged else 1)
    restored = unpack_weights(cfg, data, model.weights.version, model.weights.seen)
    assert_same_bits(restored, model.weights)
    assert pack_weights(restored) == data
    probe = float_stream(cfg, seed=52)[0][0]
    clone = Perceptron(cfg)
    clone.weights = restored
    assert clone.predict(probe) == model.predict(probe)


@pytest.mark.parametrize("params", CODEC_PARAMS)
def test_empty_snapshot_unpacks_to_zeros(params: dict[str, Any]) -> None:
    cfg = ModelConfig(**params)
    weights = unpack_weights(cfg, b"", 0, 0)
    assert_same_bits(weights, Weights.zeros(cfg))
    with pytest.raises(ValueError, match="^Snapshot holds 3 numbers; this model needs"):
        unpack_weights(cfg, b"\0" * 24, 0, 0)


@pytest.mark.parametrize("params", CODEC_PARAMS)
def test_payload_round_trip_bit_for_bit(params: dict[str, Any]) -> None:
    cfg = ModelConfig(learning_rate=0.1, **params)
    model = Perceptron(cfg)
    for features, label in float_stream(cfg, seed=53):
        x = model.encode(features)
        raw = raw_scores(model.weights, x)
        assert raw.shape == (cfg.n_scores,)
        got_raw, got_x = unpack_payload(cfg, pack_payload(raw, x))
        assert got_raw.tobytes() == raw.tobytes()
        assert got_x.values.dtype == np.float64
        assert got_x.values.tobytes() == x.values.tobytes()
        if x.index is None:
            assert got_x.index is None
        else:
            assert got_x.index is not None and got_x.index.dtype == np.int64
            assert got_x.index.tolist() == x.index.tolist()
        model.learn(features, label)


@pytest.mark.parametrize("params", CODEC_PARAMS)
def test_unpack_entry_parses_ordinal_label_and_payload(params: dict[str, Any]) -> None:
    cfg = ModelConfig(**params)
    # Every byte of these scores and values is b"|": the split must stop after two fields.
    pipes = float(np.frombuffer(b"|" * 8, dtype=np.float64)[0])
    raw = np.full(cfg.n_scores, pipes)
    # The value is past the feature limit, so build the example directly, not through encode.
    x = (
        Example(np.full(DIM, pipes))
        if cfg.dense
        else Example(np.array([pipes, -0.0]), np.array([bucket("a", 18), bucket("b", 18)]))
    )
    record = pack_record("0123456789abcdef", 1, [True] * cfg.n_classes, pack_payload(raw, x))
    entry = b"%d|%d|" % (1234, 2) + record
    k, t, got_raw, got_x = unpack_entry(cfg, entry)
    assert (k, t) == (1234, 2)
    assert got_raw.tobytes() == raw.tobytes()
    assert got_x.values.tobytes() == x.values.tobytes()
    assert (got_x.index is None) == (x.index is None)
    if x.index is not None:
        assert got_x.index is not None and got_x.index.tolist() == x.index.tolist()


@pytest.mark.parametrize("params", CODEC_PARAMS)
def test_replaying_the_log_reproduces_the_weights(params: dict[str, Any]) -> None:
    cfg = ModelConfig(learning_rate=0.1, margin=0.5, **params)
    model = Perceptron(cfg)
    log: list[bytes] = []
    for features, label in float_stream(cfg, seed=54):
        x = model.encode(features)
        payload = pack_payload(raw_scores(model.weights, x), x)
        model.learn(features, label)
        t = cfg.classes.index(label)
        record = pack_record("0123456789abcdef", 0, [False] * cfg.n_classes, payload)
        log.append(b"%d|%d|" % (model.weights.seen, t) + record)
    replayed = Weights.zeros(cfg)
    for entry in log:
        k, t, raw, x = unpack_entry(cfg, entry)
        plan = update_plan(cfg, raw, t)
        replayed.seen = k
        apply(cfg, replayed, x, plan, k)
    assert_same_bits(replayed, model.weights)


def test_mapping_type_is_not_required_to_be_a_dict() -> None:
    class Frozen(Mapping[str, float]):
        def __init__(self, data: dict[str, float]) -> None:
            self._data = data

        def __getitem__(self, key: str) -> float:
            return self._data[key]

        def __iter__(self) -> Any:
            return iter(self._data)

        def __len__(self) -> int:
            return len(self._data)

    cfg = ModelConfig(hash_bits=4)
    x, y = encode(cfg, Frozen({"a": 1.0, "b": 2.0})), encode(cfg, {"a": 1.0, "b": 2.0})
    assert x.index is not None and y.index is not None
    assert x.index.tolist() == y.index.tolist() and x.values.tolist() == y.values.tolist()


@given(
    classes=st.sampled_from([(-1, 1), (0, 1, 2), ("a", "b", "c"), ("1", "2")]),
    labels=st.lists(
        st.one_of(
            st.integers(-2, 3),
            st.sampled_from(["a", "b", "c", "1", "d"]),
            st.booleans(),
            st.floats(-2, 2),
            st.none(),
        ),
        max_size=20,
    ),
)
def test_a_batch_of_labels_maps_to_classes_as_each_label_does(
    classes: tuple[int | str, ...], labels: list[Any]
) -> None:
    """A batch's class indices (one pass in C when every label is an int or a str) are each
    label's ``class_index``: a bool is not 1, a float not an int, "1" not 1."""
    cfg = ModelConfig(n_features=2, classes=classes)
    assert cfg.class_indices(labels) == [cfg.class_index(label) for label in labels]
