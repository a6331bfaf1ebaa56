"""Passive-aggressive learners (Crammer et al., 2006): PA-I and PA-II beside the perceptron.

Pure numpy, no I/O. The conventions are scikit-learn's ``SGDClassifier(loss="hinge",
penalty=None, learning_rate="pa1"|"pa2", eta0=C)`` (also in docs/conventions.md):

- score ``p = w.x + b``, each row's dot product summed term by term in feature order (as
  scikit-learn's learner sums it, so that the scores an update is decided from are its own
  bit for bit); ``sq = ||x||^2`` summed the same way; the bias is no part of ``sq``;
- binary, ``y = +1`` for ``classes[1]`` and ``-1`` for ``classes[0]``: hinge loss
  ``l = max(0, 1 - y p)``; when ``l > 0`` the step is ``tau = min(C, l / sq)`` (PA-I; an example
  with ``sq = 0`` is skipped) or ``tau = l / (sq + 0.5 / C)`` (PA-II); then ``w += tau * y * x``
  and ``b += tau * y`` (``b`` stays 0 without ``fit_bias``);
- ``ovr``: one binary PA per class (that class positive), each with the binary rule;
- ``ovo``: one binary PA per pair ``i < j`` (``classes[j]`` positive), trained only on the
  examples of ``i`` or ``j``; predict by majority vote, ties to the first class;
- ``multiclass`` (Crammer's single-vector multiclass PA, its max-loss update): ``r`` is the
  highest-scoring class other than the true class ``t`` (ties to the first);
  ``l = max(0, 1 - (p_t - p_r))``; the step is the binary one with ``sq`` doubled,
  ``min(C, l / (2 sq))`` (PA-I, skipped when ``sq = 0``) or ``l / (2 sq + 0.5 / C)`` (PA-II);
  then ``w_t += tau * x``, ``b_t += tau``, ``w_r -= tau * x``, ``b_r -= tau``.

Predictions are those of the perceptron's module (``predict_index``): the argmax, ties to the
first class, ``classes[1]`` iff ``p > 0`` for a binary model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.learner import kernel
from service.learner.config import ConfigError, ModelConfig
from service.learner.features import Example
from service.learner.interface import MAX_WEIGHT, Learner, Setting
from service.learner.kernel import KernelRule
from service.learner.online import Perceptron
from service.learner.perceptron import NO_UPDATE, Plan, Weights, apply, ovo_pairs

__all__ = ["MAX_C", "PA1", "PA2", "LearnerConfig", "PassiveAggressive", "learner"]

MAX_C = 1e6  # the same bound as the learning rate: every PA step stays <= 1e6 * loss
NAMES = ("pa1", "pa2")


_THE_MODELS: Any = None  # a rule's setting left out: the model's own


@dataclass(frozen=True)
class LearnerConfig:
    """A model's configuration with the learning rule that updates it, named apart.

    The rule is ``algorithm`` with its aggressiveness ``C`` (PA only); each left out is the
    model's own. ``model`` is the whole configuration, rule included (``ModelConfig`` checks
    it): a setting the rule does not use is refused rather than ignored, a PA model taking
    neither ``learning_rate``, ``margin`` nor ``averaged``, and a perceptron no ``C``.

    >>> LearnerConfig(ModelConfig(n_features=2), algorithm="pa1", C=0.5).C
    0.5
    >>> try:
    ...     LearnerConfig(algorithm="pa2", C=0.0)
    ... except ConfigError as e:
    ...     print(e)
    The 'C' parameter must be a float in (0, 1e6]. Got 0.0 instead.
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: str = _THE_MODELS
    C: float = _THE_MODELS

    def __post_init__(self) -> None:
        algorithm = self.model.algorithm if self.algorithm is None else self.algorithm
        c = self.model.C if self.C is None else self.C
        model = self.model.replace(algorithm=algorithm, C=c)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "algorithm", model.algorithm)
        object.__setattr__(self, "C", model.C)

    @property
    def passive_aggressive(self) -> bool:
        return self.model.algorithm in NAMES


def sq_norm(x: Example) -> float:
    """``||x||^2``, its terms summed one after another in feature order."""
    if x.values.size == 0:
        return 0.0
    return float(np.cumsum(x.values * x.values)[-1])


def scores(weights: Weights, x: Example) -> np.ndarray:
    """Each row's ``w.x + b``, the dot product summed term by term in feature order."""
    cols = weights.w if x.index is None else weights.w[:, x.index]
    if x.values.size == 0:
        return weights.b.copy()
    found: np.ndarray = np.cumsum(cols * x.values, axis=1)[:, -1] + weights.b
    return found


def steps(config: ModelConfig, losses: np.ndarray, sq: float) -> np.ndarray:
    """The step ``tau`` of each positive loss, with ``sq`` the squared norm the rule divides
    by; empty when PA-I skips the example (``sq = 0``)."""
    if config.algorithm == "pa1":
        if sq == 0:
            return np.zeros(0)
        with np.errstate(over="ignore"):  # (a tiny norm: l / sq is inf, and the step C)
            found: np.ndarray = np.minimum(float(config.C), losses / sq)
            return found
    steps_: np.ndarray = losses / (sq + 0.5 / float(config.C))
    return steps_


def _binary_rows(
    config: ModelConfig, rows: np.ndarray, y: np.ndarray, raw: np.ndarray, sq: float
) -> Plan:
    """Binary PA on each of ``rows`` (labels ``y``, scores ``raw``), each on its own."""
    losses = 1.0 - y * raw
    hit = losses > 0
    taus = steps(config, losses[hit], sq)
    if taus.size == 0:
        return NO_UPDATE
    coefs = taus * y[hit]
    moved = coefs != 0  # a step that underflowed to 0 changes nothing, as scikit-learn skips it
    return Plan(rows[hit][moved], coefs[moved]) if moved.any() else NO_UPDATE


def update_plan(config: ModelConfig, raw: np.ndarray, t: int, sq: float) -> Plan:
    """What learning the true class index ``t`` changes, given the current raw scores and
    the example's squared norm ``sq`` (``config`` a PA model's)."""
    model = config
    if sq == 0 and not model.fit_bias:  # nothing the example could move
        return NO_UPDATE
    if model.binary:
        y = np.array([1.0 if t == 1 else -1.0])
        return _binary_rows(config, np.zeros(1, dtype=np.int64), y, raw, sq)
    if model.multiclass == "ovr":
        y = np.full(model.n_classes, -1.0)
        y[t] = 1.0
        return _binary_rows(config, np.arange(model.n_classes), y, raw, sq)
    if model.multiclass == "ovo":
        i, j = ovo_pairs(model.n_classes)
        pairs = np.flatnonzero((i == t) | (j == t))
        y = np.where(j[pairs] == t, 1.0, -1.0)
        return _binary_rows(config, pairs, y, raw[pairs], sq)
    others = raw.copy()
    others[t] = -np.inf
    rival = int(np.argmax(others))
    loss = 1.0 - (raw[t] - raw[rival])
    if not loss > 0:
        return NO_UPDATE
    taus = steps(config, np.array([loss]), 2.0 * sq)
    if taus.size == 0 or taus[0] == 0:
        return NO_UPDATE
    return Plan(np.array([t, rival]), np.array([taus[0], -taus[0]]))


def bounded(config: ModelConfig, weights: Weights, x: Example, plan: Plan) -> Plan:
    """``plan``, or no update where it would take a weight or bias of ``weights`` beyond
    ``MAX_WEIGHT`` (or make one not finite). A PA step grows with the loss, and PA-II's has no
    cap: examples of zero or tiny norm with alternating labels multiply the bias by ``2C``
    each time. The values are those ``apply`` would compute, so the bound is exact.

    >>> config = ModelConfig(n_features=1, algorithm="pa2", C=1e6)
    >>> w = Weights.zeros(config)
    >>> w.b[0] = 1e249
    >>> x, row = Example(np.zeros(1)), np.zeros(1, np.int64)
    >>> bool(bounded(config, w, x, Plan(row, np.array([-1e250]))))
    True
    >>> bool(bounded(config, w, x, Plan(row, np.array([1e250]))))
    False
    """
    if not plan:
        return plan
    rows, coefs = plan.rows, plan.coefs
    cols = weights.w[rows] if x.index is None else weights.w[np.ix_(rows, x.index)]
    if not (np.abs(cols + coefs[:, None] * x.values) <= MAX_WEIGHT).all():  # (NaN fails too)
        return NO_UPDATE
    if config.fit_bias and not (np.abs(weights.b[rows] + coefs) <= MAX_WEIGHT).all():
        return NO_UPDATE
    return plan


def updates_by_label(
    config: ModelConfig, weights: Weights, raw: np.ndarray, x: Example
) -> list[bool]:
    """For each possible true class, whether learning it would change the weights."""
    sq = sq_norm(x)
    plans = (update_plan(config, raw, t, sq) for t in range(config.n_classes))
    return [bool(plan) and bool(bounded(config, weights, x, plan)) for plan in plans]


class PassiveAggressiveLearner(Learner):
    """PA-I or PA-II (this module's rules)."""

    text = "passive-aggressive (Crammer et al., 2006), scikit-learn's SGDClassifier's PA"
    settings = (Setting("C", 1.0, "A number in (0, 1e6]: the aggressiveness", high=MAX_C),)
    bound_note = (
        "the perceptron's bound R²/γ² is not a PA-I or PA-II model's: its steps are sized by "
        "the hinge loss, and its bound (Crammer et al., 2006) is on the cumulative squared "
        "hinge loss of the best separator, which the service does not know"
    )

    def __init__(self, name: str, title: str) -> None:
        self.name, self.title = name, title

    def raw_scores(self, config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
        return scores(weights, x)

    def kernel(self, config: ModelConfig) -> KernelRule | None:
        """Binary and one-vs-rest (their rows learn apart)."""
        if not config.binary and config.multiclass != "ovr":
            return None
        return KernelRule(kernel.PA1 if self.name == "pa1" else kernel.PA2, float(config.C))

    def update_plan(
        self, config: ModelConfig, raw: np.ndarray, t: int, x: Example, weights: Weights
    ) -> Plan:
        return bounded(config, weights, x, update_plan(config, raw, t, sq_norm(x)))

    def apply(self, config: ModelConfig, weights: Weights, x: Example, plan: Plan, k: int) -> None:
        apply(config, weights, x, plan, k)

    def updates_by_label(
        self, config: ModelConfig, weights: Weights, raw: np.ndarray, x: Example
    ) -> list[bool]:
        return updates_by_label(config, weights, raw, x)

    def describe(self, settings: dict[str, Any]) -> str:
        return f"{self.name} C={settings.get('C', 1.0):g}"


PA1 = PassiveAggressiveLearner("pa1", "PA-I")
PA2 = PassiveAggressiveLearner("pa2", "PA-II")


class PassiveAggressive(Perceptron):
    """An online PA-I or PA-II learner following the protocol: predict, then learn the label.

    >>> pa = PassiveAggressive(LearnerConfig(ModelConfig(n_features=2), algorithm="pa1"))
    >>> pa.learn([2.0, 0.0], 1)
    Outcome(label=-1, mistake=True, updated=True)
    >>> pa.weights.w.tolist(), pa.weights.b.tolist()
    ([[0.5, 0.0]], [0.25])
    >>> pa.learn([2.0, 0.0], 1)  # the hinge loss is now 0: passive
    Outcome(label=1, mistake=False, updated=False)
    """

    def __init__(self, config: LearnerConfig | ModelConfig | None = None, **params: Any) -> None:
        if isinstance(config, ModelConfig):
            config = LearnerConfig(config)
        learner = config if config is not None else LearnerConfig(**params)
        if not learner.passive_aggressive:
            raise ConfigError(
                "algorithm",
                "The 'algorithm' parameter of a PassiveAggressive must be 'pa1' or 'pa2'. "
                f"Got {learner.algorithm!r} instead.",
            )
        super().__init__(learner.model)
        self.learner = learner


def learner(config: LearnerConfig | ModelConfig) -> Perceptron:
    """The online learner a configuration names: a ``PassiveAggressive`` or a ``Perceptron``."""
    model = config if isinstance(config, ModelConfig) else config.model
    return PassiveAggressive(model) if model.algorithm in NAMES else Perceptron(model)
