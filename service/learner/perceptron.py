"""The perceptron's arithmetic: scores, predictions, update rules and averaging.

Pure numpy, no I/O. The service runs these same functions on its worker-local copy of the
weights, so this module is the specification of every number the service returns.

Conventions (also in docs/conventions.md, the one place the docs write them):

- score ``s = w.x + b``; a binary model predicts ``classes[1]`` iff ``s > 0``;
- binary update iff ``y * s <= margin`` with ``y = +1`` for ``classes[1]`` and ``-1`` for
  ``classes[0]``: ``w += learning_rate * y * x`` and ``b += learning_rate * y``;
- ``multiclass``: predict the argmax (ties to the first class); update iff the prediction is
  wrong, or (margin > 0) the true class beats the best other class by no more than ``margin``;
  the true class gets ``+learning_rate * x``, the best other class ``-learning_rate * x``;
- ``ovr``: one binary perceptron per class (that class positive), each with the binary rule;
- ``ovo``: one binary perceptron per pair ``i < j`` (``classes[j]`` positive), trained only on
  examples of ``i`` or ``j``; predict by majority vote, ties to the first class;
- learning always uses the current weights; with ``averaged`` the served prediction uses the
  mean of the weights after each labelled example seen so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from service.learner import kernel
from service.learner.features import Example
from service.learner.interface import Learner, Setting, StateArray
from service.learner.kernel import KernelRule

if TYPE_CHECKING:
    from service.learner.config import ModelConfig


@dataclass
class Weights:
    """A model's learned state: one weight row (and bias) per binary or class learner, and the
    arrays its learner keeps beside them (``state``, by name: ``interface.StateArray``).

    The averaged perceptron keeps ``wsum``/``bsum``: they accumulate ``(k - 1) * delta`` for
    the update made at the k-th labelled example, so that the mean of the weights after each
    of ``seen`` examples is ``w - wsum / seen`` without keeping any history.
    """

    w: np.ndarray
    b: np.ndarray
    state: dict[str, np.ndarray] = field(default_factory=dict)
    version: int = 0  # number of updates applied
    seen: int = 0  # number of labelled examples counted

    @classmethod
    def zeros(cls, config: ModelConfig) -> Weights:
        """Zero weights and biases, and each state array at its start."""
        rows, dim = config.n_rows, config.dim
        state = {
            a.name: np.full((rows, dim) if a.per_weight else rows, a.start)
            for a in config.learner.state(config)
        }
        return cls(w=np.zeros((rows, dim)), b=np.zeros(rows), state=state)

    @property
    def wsum(self) -> np.ndarray | None:
        return self.state.get("wsum")

    @property
    def bsum(self) -> np.ndarray | None:
        return self.state.get("bsum")

    def arrays(self) -> list[np.ndarray]:
        """The weights, the biases, then each state array: what a snapshot packs, in order."""
        return [self.w, self.b, *self.state.values()]

    def copy(self) -> Weights:
        return Weights(
            w=self.w.copy(),
            b=self.b.copy(),
            state={k: a.copy() for k, a in self.state.items()},
            version=self.version,
            seen=self.seen,
        )

    def averaged(self) -> tuple[np.ndarray, np.ndarray]:
        """The mean weights and biases over the ``seen`` examples (current ones if none)."""
        if self.wsum is None or self.bsum is None or self.seen == 0:
            return self.w, self.b
        return self.w - self.wsum / self.seen, self.b - self.bsum / self.seen


@dataclass(frozen=True)
class Plan:
    """The rows an update changes and the coefficient each row's ``x`` is multiplied by."""

    rows: np.ndarray
    coefs: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __bool__(self) -> bool:
        return len(self.rows) > 0


def _dot(w: np.ndarray, b: np.ndarray, x: Example) -> np.ndarray:
    cols = w if x.index is None else w[:, x.index]
    scores: np.ndarray = cols @ x.values + b
    return scores


def raw_scores(weights: Weights, x: Example) -> np.ndarray:
    """Scores of the current weights, one per row: what learning uses."""
    return _dot(weights.w, weights.b, x)


def seen_depended(config: ModelConfig, weights: Weights) -> int | None:
    """The count of labelled examples a served prediction depends on: only an averaged model's
    does (its mean divides by it); None for the others."""
    return weights.seen if config.counts_seen else None


def served_scores(config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
    """Scores a prediction is served with: averaged weights when ``averaged`` is on."""
    if not config.averaged or weights.seen == 0 or weights.wsum is None:
        return raw_scores(weights, x)
    assert weights.bsum is not None
    n = weights.seen
    if x.index is None:
        w = weights.w - weights.wsum / n
    else:
        w = weights.w[:, x.index] - weights.wsum[:, x.index] / n
        x = Example(x.values)
    return _dot(w, weights.b - weights.bsum / n, x)


@cache
def ovo_pairs(n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Class indices ``(i, j)``, ``i < j``, of each one-vs-one row, in row order."""
    i, j = np.triu_indices(n_classes, k=1)
    return i.astype(np.int64), j.astype(np.int64)


def class_votes(n_classes: int, scores: np.ndarray) -> np.ndarray:
    """One-vs-one votes per class: row (i, j) votes ``j`` when its score is > 0, else ``i``."""
    i, j = ovo_pairs(n_classes)
    winners = np.where(scores > 0, j, i)
    return np.bincount(winners, minlength=n_classes)


def predict_index(config: ModelConfig, scores: np.ndarray) -> int:
    """The index in ``classes`` of the predicted label."""
    if config.binary:
        return 1 if scores[0] > 0 else 0
    if config.multiclass == "ovo":
        return int(np.argmax(class_votes(config.n_classes, scores)))
    return int(np.argmax(scores))


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


NO_UPDATE = Plan(_frozen(np.zeros(0, dtype=np.int64)), _frozen(np.zeros(0)))


@cache
def _binary_plans(learning_rate: float) -> tuple[Plan, Plan]:
    row = _frozen(np.zeros(1, dtype=np.int64))
    down, up = _frozen(np.array([-learning_rate])), _frozen(np.array([learning_rate]))
    return Plan(row, down), Plan(row, up)


def binary_plan(config: ModelConfig, t: int) -> Plan:
    """A binary model's update for true class index ``t``: ``y = +1`` for class 1, else -1."""
    return _binary_plans(config.learning_rate)[1 if t == 1 else 0]


def update_plan(config: ModelConfig, raw: np.ndarray, t: int) -> Plan:
    """What learning the true class index ``t`` changes, given the current raw scores."""
    lr, m = config.learning_rate, config.margin
    if config.binary:
        sign = 1.0 if t == 1 else -1.0
        return binary_plan(config, t) if sign * raw[0] <= m else NO_UPDATE
    if config.multiclass == "ovr":
        y = np.full(config.n_classes, -1.0)
        y[t] = 1.0
        rows = np.flatnonzero(y * raw <= m)
        return Plan(rows, lr * y[rows])
    if config.multiclass == "ovo":
        i, j = ovo_pairs(config.n_classes)
        pairs = np.flatnonzero((i == t) | (j == t))
        y = np.where(j[pairs] == t, 1.0, -1.0)
        hit = y * raw[pairs] <= m
        return Plan(pairs[hit], lr * y[hit])
    rival = _best_other(raw, t)
    predicted = int(np.argmax(raw))
    if predicted != t or (m > 0 and raw[t] - raw[rival] <= m):
        return Plan(np.array([t, rival]), np.array([lr, -lr]))
    return NO_UPDATE


def _best_other(raw: np.ndarray, t: int) -> int:
    others = raw.copy()
    others[t] = -np.inf
    return int(np.argmax(others))


def updates_by_label(config: ModelConfig, raw: np.ndarray) -> list[bool]:
    """For each possible true class, whether learning it would change the weights."""
    return [bool(update_plan(config, raw, t)) for t in range(config.n_classes)]


def apply(config: ModelConfig, weights: Weights, x: Example, plan: Plan, k: int) -> None:
    """Apply ``plan`` for example ``x``, the ``k``-th labelled example, in place."""
    if not plan:
        return
    rows, coefs = plan.rows, plan.coefs
    if len(rows) == 1 and weights.wsum is None:  # the same operations, without fancy indexing
        row, coef = rows[0], coefs[0]
        if x.index is None:
            weights.w[row] += coef * x.values
        else:
            weights.w[row, x.index] += coef * x.values
        if config.fit_bias:
            weights.b[row] += coef
        weights.version += 1
        return
    delta = coefs[:, None] * x.values  # the update of each row: learning_rate * y * x
    _add(weights.w, rows, x.index, delta)
    if config.fit_bias:
        weights.b[rows] += coefs
    if weights.wsum is not None and weights.bsum is not None:
        age = float(k - 1)
        _add(weights.wsum, rows, x.index, age * delta)
        if config.fit_bias:
            weights.bsum[rows] += age * coefs
    weights.version += 1


def _add(target: np.ndarray, rows: np.ndarray, index: np.ndarray | None, delta: np.ndarray) -> None:
    if index is None:
        target[rows] += delta
    else:
        target[np.ix_(rows, index)] += delta


LEARNING_RATE = Setting(
    "learning_rate", 1.0, "A number in (0, 1e6]: the size of each update", short="lr"
)


class PerceptronLearner(Learner):
    """The perceptron: plain, with a margin, or averaged (``perceptron.py``'s rules)."""

    name = "perceptron"
    title = "perceptron"
    text = "the perceptron's rule, with a margin and averaging if set"
    bound_note = ""
    settings = (
        LEARNING_RATE,
        Setting(
            "margin",
            0.0,
            "A number in [0, 1e12]: also update when the score's margin is at most this",
            high=1e12,
            closed=True,
        ),
        Setting("averaged", False, "true or false: serve the mean of the weights over time"),
    )

    def state(self, config: ModelConfig) -> tuple[StateArray, ...]:
        if not config.averaged:
            return ()
        return (
            StateArray("wsum", per_weight=True, copied=False),
            StateArray("bsum", per_weight=False, copied=False),
        )

    def seen_depended(self, config: ModelConfig) -> bool:
        return bool(config.averaged)

    def kernel(self, config: ModelConfig) -> KernelRule | None:
        """A binary perceptron, averaged or not (more rows score by BLAS's gemv, not ddot)."""
        if not config.binary:
            return None
        return KernelRule(kernel.PERCEPTRON, float(config.learning_rate), float(config.margin))

    def raw_scores(self, config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
        return raw_scores(weights, x)

    def served_scores(self, config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
        return served_scores(config, weights, x)

    def update_plan(
        self, config: ModelConfig, raw: np.ndarray, t: int, x: Example, weights: Weights
    ) -> Plan:
        return update_plan(config, raw, t)

    def apply(self, config: ModelConfig, weights: Weights, x: Example, plan: Plan, k: int) -> None:
        apply(config, weights, x, plan, k)

    def updates_by_label(
        self, config: ModelConfig, weights: Weights, raw: np.ndarray, x: Example
    ) -> list[bool]:
        return updates_by_label(config, raw)


LEARNER = PerceptronLearner()
