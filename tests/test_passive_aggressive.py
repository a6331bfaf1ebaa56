"""The passive-aggressive learners (service/learner/passive_aggressive.py).

Binary and one-vs-rest PA-I and PA-II against scikit-learn's ``SGDClassifier(loss="hinge",
penalty=None, learning_rate="pa1"|"pa2", eta0=C)`` on real data, fed one ``partial_fit`` at a
time in file order: the same predictions before each row, so the same mistakes, and the same
weights and biases bit for bit. Every strategy (``multiclass`` and ``ovo`` included) against
a plain loop-based reference written below from docs/conventions.md alone, bit for bit. Then
the rules' properties, and the configuration's checks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import SGDClassifier

from service.learner import ConfigError, ModelConfig, Perceptron, encode
from service.learner.passive_aggressive import (
    LearnerConfig,
    PassiveAggressive,
    learner,
    scores,
    sq_norm,
)

from .test_learner import dense_stream
from .test_sklearn_parity import Dataset, Replay, breast_cancer, digits, phishing
from .test_sklearn_parity import replay_sklearn as replay_estimator

# ---------------------------------------------------------------------------------------------
# Parity with scikit-learn on real data: binary and one-vs-rest.
# ---------------------------------------------------------------------------------------------

# Several C for each dataset, the smallest of each such that PA-I's step is C (not loss/sq) on
# many of its updates: breast_cancer's squared norms are ~1e6, digits' ~1e3, Phishing's ~1.
CASES = [
    (load, algorithm, c)
    for load, cs in (
        (breast_cancer, (1e-6, 1e-3, 1.0)),
        (digits, (1e-4, 1.0)),  # (the slowest: ten one-vs-rest rows a step)
        (phishing, (0.01, 0.1, 1.0)),
    )
    for algorithm in ("pa1", "pa2")
    for c in cs
]


def replay_sklearn(data: Dataset, algorithm: str, c: float) -> Replay:
    sgd = SGDClassifier(loss="hinge", penalty=None, learning_rate=algorithm, eta0=c)
    return replay_estimator(data, sgd)


def replay_learner(data: Dataset, algorithm: Any, c: float) -> Replay:
    strategy: Any = data.multiclass
    model = ModelConfig(
        classes=tuple(data.classes), n_features=data.X.shape[1], multiclass=strategy
    )
    pa = PassiveAggressive(LearnerConfig(model, algorithm=algorithm, C=c))
    labels, mistakes = [], 0
    for x, y in zip(data.X.tolist(), data.y.tolist(), strict=True):
        outcome = pa.learn(x, y)
        labels.append(outcome.label)
        mistakes += outcome.mistake
    return Replay(
        predictions=np.array(labels, dtype=np.int64),
        mistakes=mistakes,
        coef=pa.weights.w,
        intercept=pa.weights.b,
    )


@pytest.mark.parametrize(
    ("load", "algorithm", "c"),
    CASES,
    ids=[f"{load.__name__}-{a}-C={c:g}" for load, a, c in CASES],
)
def test_binary_and_ovr_match_sklearn_bit_for_bit(
    load: Callable[[], Dataset], algorithm: str, c: float
) -> None:
    data = load()
    expected = replay_sklearn(data, algorithm, c)
    got = replay_learner(data, algorithm, c)

    diverged = np.flatnonzero(got.predictions != expected.predictions)
    assert diverged.size == 0, (
        f"first divergence at row {diverged[0]}: learner predicted "
        f"{got.predictions[diverged[0]]}, sklearn {expected.predictions[diverged[0]]}"
    )
    assert 0 < expected.mistakes < len(data.y)
    assert got.mistakes == expected.mistakes
    assert got.coef.shape == expected.coef.shape == (len(expected.intercept), data.X.shape[1])
    gap = max(
        np.abs(got.coef - expected.coef).max(), np.abs(got.intercept - expected.intercept).max()
    )
    assert np.array_equal(got.coef, expected.coef), f"weights differ by up to {gap:g}"
    assert np.array_equal(got.intercept, expected.intercept), f"biases differ by up to {gap:g}"
    assert np.abs(got.coef).max() > 0  # it learned something


@pytest.mark.parametrize("algorithm", ["pa1", "pa2"])
@pytest.mark.parametrize("fit_bias", [True, False])
def test_zero_vectors_are_learned_as_sklearn_learns_them(algorithm: Any, fit_bias: bool) -> None:
    """PA-I skips an example with ||x|| = 0; PA-II moves the bias alone, by 2C * loss."""
    rows = [[0.0, 0.0], [1.0, -2.0], [0.0, 0.0], [-3.0, 0.5], [0.0, 0.0], [0.0, 0.0]]
    labels = [1, 0, 1, 1, 0, 1]
    c = 0.75
    clf = SGDClassifier(
        loss="hinge", penalty=None, learning_rate=algorithm, eta0=c, fit_intercept=fit_bias
    )
    model = ModelConfig(classes=(0, 1), n_features=2, fit_bias=fit_bias)
    pa = PassiveAggressive(LearnerConfig(model, algorithm=algorithm, C=c))
    for x, y in zip(rows, labels, strict=True):
        pa.learn(x, y)
        clf.partial_fit(np.array([x]), [y], classes=[0, 1])
        assert np.array_equal(pa.weights.w, clf.coef_)
        assert np.array_equal(pa.weights.b, clf.intercept_)
    first = PassiveAggressive(LearnerConfig(model, algorithm=algorithm, C=c))
    assert first.learn([0.0, 0.0], 1).updated == (algorithm == "pa2" and fit_bias)
    assert first.weights.b.tolist() == [2 * c if algorithm == "pa2" and fit_bias else 0.0]


# ---------------------------------------------------------------------------------------------
# The reference: plain loops over lists, from docs/conventions.md alone.
# ---------------------------------------------------------------------------------------------


def argmax_first(values: Sequence[float]) -> int:
    best = 0
    for c in range(1, len(values)):
        if values[c] > values[best]:
            best = c
    return best


def summed(terms: list[float]) -> float:
    total = 0.0
    for term in terms:
        total += term
    return total


class Reference:
    """PA-I / PA-II for each strategy, one weight list per row, every sum term by term."""

    def __init__(self, cfg: LearnerConfig) -> None:
        self.cfg, model = cfg, cfg.model
        k = len(model.classes)
        self.strategy = "binary" if k == 2 else model.multiclass
        self.pairs = list(itertools.combinations(range(k), 2))
        rows = {"binary": 1, "multiclass": k, "ovr": k, "ovo": len(self.pairs)}[self.strategy]
        assert model.n_features is not None
        self.w = [[0.0] * model.n_features for _ in range(rows)]
        self.b = [0.0] * rows

    def step(self, loss: float, sq: float) -> float | None:
        if self.cfg.algorithm == "pa1":
            return None if sq == 0 else min(self.cfg.C, loss / sq)
        return loss / (sq + 1 / (2 * self.cfg.C))

    def move(self, row: int, coef: float, x: list[float]) -> None:
        for i, xi in enumerate(x):
            self.w[row][i] += coef * xi
        if self.cfg.model.fit_bias:
            self.b[row] += coef

    def binary(self, row: int, y: float, score: float, x: list[float], sq: float) -> None:
        loss = max(0.0, 1 - y * score)
        tau = self.step(loss, sq) if loss > 0 else None
        if tau:
            self.move(row, tau * y, x)

    def predict(self, s: list[float]) -> int:
        if self.strategy == "binary":
            return 1 if s[0] > 0 else 0
        if self.strategy == "ovo":
            votes = [0] * len(self.cfg.model.classes)
            for (i, j), score in zip(self.pairs, s, strict=True):
                votes[j if score > 0 else i] += 1
            return argmax_first(votes)
        return argmax_first(s)

    def learn(self, x: list[float], t: int) -> int:
        """Learns class index ``t``; returns the class index predicted before."""
        s = [
            summed([wi * xi for wi, xi in zip(w, x, strict=True)]) + b
            for w, b in zip(self.w, self.b, strict=True)
        ]
        sq = summed([xi * xi for xi in x])
        predicted = self.predict(s)
        if self.strategy == "binary":
            self.binary(0, 1.0 if t == 1 else -1.0, s[0], x, sq)
        elif self.strategy == "ovr":
            for c in range(len(s)):
                self.binary(c, 1.0 if c == t else -1.0, s[c], x, sq)
        elif self.strategy == "ovo":
            for row, (i, j) in enumerate(self.pairs):
                if t in (i, j):
                    self.binary(row, 1.0 if t == j else -1.0, s[row], x, sq)
        else:
            r = argmax_first([-np.inf if c == t else v for c, v in enumerate(s)])
            loss = max(0.0, 1 - (s[t] - s[r]))
            tau = self.step(loss, sq + sq) if loss > 0 else None  # ||phi(x,t) - phi(x,r)||^2
            if tau:
                self.move(t, tau, x)
                self.move(r, -tau, x)
        return predicted


def assert_matches_reference(cfg: LearnerConfig, stream: list[tuple[list[float], int]]) -> int:
    """Feeds both one example at a time; returns the number of mistakes."""
    pa, ref = PassiveAggressive(cfg), Reference(cfg)
    mistakes = 0
    for n, (x, t) in enumerate(stream):
        outcome = pa.learn(x, cfg.model.classes[t])
        predicted = ref.learn(x, t)
        assert outcome.label == cfg.model.classes[predicted], f"example {n}"
        mistakes += outcome.mistake
    assert pa.weights.w.tolist() == ref.w
    assert pa.weights.b.tolist() == ref.b
    return mistakes


STRATEGIES = [(2, "multiclass"), (4, "multiclass"), (4, "ovr"), (4, "ovo"), (5, "ovo")]


@pytest.mark.parametrize(("k", "strategy"), STRATEGIES, ids=[f"{s}-{k}" for k, s in STRATEGIES])
@pytest.mark.parametrize("algorithm", ["pa1", "pa2"])
@pytest.mark.parametrize("c", [0.01, 0.3, 5.0])
@pytest.mark.parametrize("fit_bias", [True, False])
def test_every_strategy_matches_the_reference(
    k: int, strategy: Any, algorithm: Any, c: float, fit_bias: bool
) -> None:
    model = ModelConfig(
        classes=tuple(f"c{i}" for i in range(k)),
        n_features=5,
        multiclass=strategy,
        fit_bias=fit_bias,
    )
    cfg = LearnerConfig(model, algorithm=algorithm, C=c)
    stream = [
        (x if n % 23 else [0.0] * 5, model.classes.index(y))  # a zero vector now and then
        for n, (x, y) in enumerate(dense_stream(model, seed=k + len(strategy)))
    ]
    mistakes = assert_matches_reference(cfg, [(list(map(float, x)), t) for x, t in stream])
    assert 0 < mistakes < len(stream)


@pytest.mark.parametrize("strategy", ["multiclass", "ovo"])
@pytest.mark.parametrize(("algorithm", "c"), [("pa1", 1e-4), ("pa1", 1.0), ("pa2", 1e-3)])
def test_multiclass_and_ovo_match_the_reference_on_digits(
    strategy: Any, algorithm: Any, c: float
) -> None:
    data = digits()
    model = ModelConfig(classes=tuple(data.classes), n_features=64, multiclass=strategy)
    stream = list(zip(data.X[:400].tolist(), data.y[:400].tolist(), strict=True))
    mistakes = assert_matches_reference(LearnerConfig(model, algorithm=algorithm, C=c), stream)
    assert 0 < mistakes < 200


# ---------------------------------------------------------------------------------------------
# The rules' properties.
# ---------------------------------------------------------------------------------------------

values = st.floats(-8.0, 8.0, allow_nan=False).map(lambda v: round(v, 3))
vectors = st.lists(values, min_size=3, max_size=3)


def hinge(pa: PassiveAggressive, x: list[float], t: int) -> float:
    s = scores(pa.weights, encode(pa.config, x))
    if pa.config.binary:
        return max(0.0, 1 - (1.0 if t == 1 else -1.0) * float(s[0]))
    rival = max((v, -c) for c, v in enumerate(s) if c != t)[0]  # the first of equal scores
    return max(0.0, 1 - (float(s[t]) - float(rival)))


def trained(algorithm: Any, c: float, k: int, warmup: list[list[float]]) -> PassiveAggressive:
    classes = tuple(range(k))
    pa = PassiveAggressive(
        LearnerConfig(ModelConfig(classes=classes, n_features=3), algorithm=algorithm, C=c)
    )
    for n, x in enumerate(warmup):
        pa.learn(x, n % k)
    return pa


@settings(max_examples=200, deadline=None)
@given(
    algorithm=st.sampled_from(["pa1", "pa2"]),
    c=st.sampled_from([0.01, 0.5, 1.0, 20.0]),
    k=st.sampled_from([2, 3]),
    warmup=st.lists(vectors, max_size=6),
    x=vectors,
    t=st.integers(0, 1),
)
def test_an_update_reduces_the_hinge_loss_of_its_example(
    algorithm: Any, c: float, k: int, warmup: list[list[float]], x: list[float], t: int
) -> None:
    """Binary and multiclass: an example with a positive loss and ||x|| > 0 leaves with a
    smaller one; PA-I's full step (loss/sq <= C) brings a binary loss to 0."""
    pa = trained(algorithm, c, k, warmup)
    before = hinge(pa, x, t)
    sq = sum(v * v for v in x)
    outcome = pa.learn(x, t)
    after = hinge(pa, x, t)
    assert outcome.updated == (before > 0 and (sq > 0 or algorithm == "pa2"))
    if before > 1e-9 and sq > 1e-6:
        assert after < before
        if algorithm == "pa1" and k == 2 and before / sq <= c:
            assert after <= 1e-9 * max(1.0, before)


@settings(max_examples=100, deadline=None)
@given(
    k=st.sampled_from([2, 3, 4]),
    strategy=st.sampled_from(["multiclass", "ovr", "ovo"]),
    warmup=st.lists(vectors, max_size=6),
    t=st.integers(0, 3),
)
def test_pa1_skips_a_zero_vector_and_pa2_moves_only_biases(
    k: int, strategy: Any, warmup: list[list[float]], t: int
) -> None:
    t %= k
    model = ModelConfig(classes=tuple(range(k)), n_features=3, multiclass=strategy)
    for algorithm in ("pa1", "pa2"):
        pa = PassiveAggressive(LearnerConfig(model, algorithm=algorithm, C=0.5))
        for n, x in enumerate(warmup):
            pa.learn(x, n % k)
        before = pa.weights.copy()
        pa.learn([0.0, 0.0, 0.0], t)
        assert np.array_equal(pa.weights.w, before.w)
        if algorithm == "pa1":
            assert np.array_equal(pa.weights.b, before.b)
            assert pa.weights.version == before.version
        assert pa.weights.seen == before.seen + 1


@settings(max_examples=100, deadline=None)
@given(algorithm=st.sampled_from(["pa1", "pa2"]), x=vectors, t=st.integers(0, 1))
def test_an_example_beyond_the_margin_changes_nothing(
    algorithm: Any, x: list[float], t: int
) -> None:
    pa = trained(algorithm, 1.0, 2, [])
    pa.weights.w[0] = np.array(x) * (1.0 if t == 1 else -1.0)
    pa.weights.b[0] = 1.0 if t == 1 else -1.0  # y * p = ||x||^2 + 1 >= 1: no loss
    before = pa.weights.copy()
    assert not pa.learn(x, t).updated
    assert np.array_equal(pa.weights.w, before.w) and np.array_equal(pa.weights.b, before.b)


def test_ovo_rows_only_learn_their_own_classes() -> None:
    model = ModelConfig(classes=(0, 1, 2, 3), n_features=2, multiclass="ovo")
    pa = PassiveAggressive(LearnerConfig(model, algorithm="pa1"))
    pa.learn([1.0, 2.0], 2)
    moved = [i for i, row in enumerate(pa.weights.w.tolist()) if row != [0.0, 0.0]]
    # pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3): those with class 2
    assert moved == [1, 3, 5]
    assert pa.weights.b.tolist() == [0.0, 0.2, 0.0, 0.2, 0.0, -0.2]


def test_multiclass_moves_the_true_class_up_and_the_best_other_down() -> None:
    """One hand-made example: scores (0, 0, 0), true class 1, rival class 0 (the first of the
    others), loss 1, sq 4: PA-I's step min(C, 1 / (2 * 4)) = 0.125."""
    model = ModelConfig(classes=("a", "b", "c"), n_features=2)
    pa = PassiveAggressive(LearnerConfig(model, algorithm="pa1"))
    assert pa.learn([2.0, 0.0], "b").mistake
    assert pa.weights.w.tolist() == [[-0.25, 0.0], [0.25, 0.0], [0.0, 0.0]]
    assert pa.weights.b.tolist() == [-0.125, 0.125, 0.0]
    pa2 = PassiveAggressive(LearnerConfig(model, algorithm="pa2", C=0.25))
    pa2.learn([2.0, 0.0], "b")  # step 1 / (8 + 0.5 / 0.25) = 0.1
    assert pa2.weights.b.tolist() == [-0.1, 0.1, 0.0]


@settings(max_examples=50, deadline=None)
@given(
    stream=st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from([f"f{i}" for i in range(12)]), values, min_size=1),
            st.integers(0, 2),
        ),
        min_size=1,
        max_size=15,
    ),
    algorithm=st.sampled_from(["pa1", "pa2"]),
)
def test_named_features_learn_as_their_dense_buckets(
    stream: list[tuple[dict[str, float], int]], algorithm: Any
) -> None:
    """A hashed model (3 bits: names collide) learns as a dense model fed its bucket vector."""
    named = ModelConfig(classes=(0, 1, 2), hash_bits=3, multiclass="ovr")
    dense = ModelConfig(classes=(0, 1, 2), n_features=8, multiclass="ovr")
    a = PassiveAggressive(LearnerConfig(named, algorithm=algorithm, C=0.2))
    b = PassiveAggressive(LearnerConfig(dense, algorithm=algorithm, C=0.2))
    for features, t in stream:
        x = encode(named, features)
        vector = [0.0] * 8
        for i, v in zip(
            x.index.tolist() if x.index is not None else [], x.values.tolist(), strict=True
        ):
            vector[i] = v
        assert sq_norm(x) == sq_norm(encode(dense, vector))
        assert a.learn(features, t) == b.learn(vector, t)
    assert np.array_equal(a.weights.w, b.weights.w) and np.array_equal(a.weights.b, b.weights.b)


def test_delayed_labels_use_the_scores_served() -> None:
    """The update of a label that comes late is decided from the scores it was served with."""
    model = ModelConfig(n_features=1)
    pa = PassiveAggressive(LearnerConfig(model, algorithm="pa1"))
    outcomes = pa.delayed([[1.0], [1.0]], [1, 1], delay=1)
    # both served at w = 0 (loss 1, step 1 / 1): both mistakes, both updates
    assert [(o.mistake, o.updated) for o in outcomes] == [(True, True), (True, True)]
    assert pa.weights.w.tolist() == [[2.0]] and pa.weights.b.tolist() == [2.0]


# ---------------------------------------------------------------------------------------------
# The configuration.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"algorithm": "pa3"}, "algorithm"),
        ({"algorithm": "PA1"}, "algorithm"),
        ({"algorithm": "pa1", "C": 0.0}, "C"),
        ({"algorithm": "pa1", "C": -1.0}, "C"),
        ({"algorithm": "pa2", "C": float("nan")}, "C"),
        ({"algorithm": "pa2", "C": float("inf")}, "C"),
        ({"algorithm": "pa2", "C": 1e6 * 1.01}, "C"),
        ({"algorithm": "pa1", "C": True}, "C"),
        ({"algorithm": "pa1", "C": "1"}, "C"),
        ({"algorithm": "perceptron", "C": 0.5}, "C"),
        ({"algorithm": "pa1", "model": ModelConfig(learning_rate=0.5)}, "learning_rate"),
        ({"algorithm": "pa2", "model": ModelConfig(margin=1.0)}, "margin"),
        ({"algorithm": "pa1", "model": ModelConfig(averaged=True)}, "averaged"),
    ],
)
def test_a_setting_out_of_range_or_unused_is_refused(
    params: dict[str, Any], parameter: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        LearnerConfig(**params)
    assert caught.value.parameter == parameter
    assert f"'{parameter}'" in str(caught.value)


def test_defaults_and_boundaries_are_accepted() -> None:
    assert LearnerConfig() == LearnerConfig(ModelConfig(), "perceptron", 1.0)
    assert LearnerConfig(algorithm="pa1", C=1e6).C == 1e6
    assert LearnerConfig(algorithm="pa2", C=1e-300).C == 1e-300
    assert LearnerConfig(algorithm="pa2", C=2).C == 2
    assert LearnerConfig(ModelConfig(averaged=True, learning_rate=0.5, margin=1.0)).model.averaged


def test_the_learner_a_configuration_names() -> None:
    assert type(learner(LearnerConfig())) is Perceptron
    assert type(learner(LearnerConfig(algorithm="pa2"))) is PassiveAggressive
    with pytest.raises(ConfigError):
        PassiveAggressive(LearnerConfig())
    assert PassiveAggressive(algorithm="pa1", C=0.5).learner.C == 0.5


def test_a_stored_configuration_names_the_rule_of_a_pa_model_only() -> None:
    """A perceptron's configuration (what the service stores, exports and compares) is what
    it was before the rule was a setting: byte for byte, no algorithm nor C; a PA model's
    names both, and reads back equal."""
    plain = ModelConfig(classes=(0, 1), n_features=3)
    assert "algorithm" not in plain.to_dict()
    assert "C" not in plain.to_dict()
    assert plain.to_json() == (
        '{"classes": [0, 1], "multiclass": "multiclass", "n_features": 3, "hash_bits": 18, '
        '"fit_bias": true, "learning_rate": 1.0, "margin": 0.0, "averaged": false, '
        '"feedback_ttl_s": 86400, "default_label": null}'
    )
    pa = ModelConfig(classes=(0, 1), n_features=3, algorithm="pa2", C=2)
    assert pa.to_dict()["algorithm"] == "pa2"
    assert pa.to_dict()["C"] == 2.0 and isinstance(pa.C, float)
    assert ModelConfig.from_json(pa.to_json()) == pa
    assert ModelConfig.from_json(plain.to_json()) == plain
    assert LearnerConfig(pa).algorithm == "pa2" and LearnerConfig(pa).C == 2.0
