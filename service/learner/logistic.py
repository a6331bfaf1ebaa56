"""Logistic regression learned one example at a time, with class probabilities.

The updates are scikit-learn's ``SGDClassifier(loss="log_loss", penalty=None,
learning_rate="constant", eta0=learning_rate)`` fed one example at a time with ``partial_fit``
(also in docs/conventions.md):

- score ``p = w.x + b``, the dot product summed term by term in feature order (as PA's);
- binary, ``y = 1`` for ``classes[1]`` and ``0`` for ``classes[0]``: the half binomial loss's
  derivative in the score, as scikit-learn computes it, is ``((1 - y) - y e) / (1 + e)`` with
  ``e = exp(-p)`` when ``p > -37``, else ``exp(p) - y``, clipped to ``[-1e12, 1e12]``; the
  step is ``u = -learning_rate * g``, then ``w += u * x`` and ``b += u`` (a step of 0 moves
  nothing);
- ``ovr``: one binary learner per class (that class positive), each with the binary rule;
- probabilities: binary ``[1 - s, s]`` with ``s`` the sigmoid of the score; one-vs-rest, each
  class's sigmoid divided by their sum (all equal when every sigmoid is 0), as scikit-learn's
  ``predict_proba``;
- the prediction is the perceptron's: ``classes[1]`` iff ``p > 0``, else the argmax.
"""

from __future__ import annotations

import math

import numpy as np

from service.learner import kernel
from service.learner.config import ModelConfig
from service.learner.features import Example
from service.learner.interface import Learner, Setting
from service.learner.kernel import KernelRule
from service.learner.passive_aggressive import bounded, scores
from service.learner.perceptron import NO_UPDATE, Plan, Weights, apply

MAX_DLOSS = 1e12  # scikit-learn's clip of the loss's derivative


def gradient(y: float, p: float) -> float:
    """The half binomial loss's derivative in the score ``p`` for label ``y`` in {0, 1}, as
    scikit-learn's ``CyHalfBinomialLoss`` computes it, clipped as its SGD clips it."""
    if p > -37:
        e = math.exp(-p)
        found = ((1 - y) - y * e) / (1 + e)
    else:
        found = math.exp(p) - y
    return min(max(found, -MAX_DLOSS), MAX_DLOSS)


def sigmoid(s: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-s))`` for each score, without overflow."""
    e = np.exp(-np.abs(s))
    found: np.ndarray = np.where(s >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return found


class LogisticRegression(Learner):
    """Binary and one-vs-rest logistic regression by stochastic gradient steps."""

    name = "logistic"
    title = "logistic regression"
    text = "logistic regression, scikit-learn's SGDClassifier(loss='log_loss'), with probabilities"
    settings = (
        Setting("learning_rate", 0.01, "A number in (0, 1e6]: the constant step", short="lr"),
    )
    strategies = ("ovr",)
    has_probabilities = True

    def raw_scores(self, config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
        return scores(weights, x)

    def kernel(self, config: ModelConfig) -> KernelRule | None:
        return KernelRule(kernel.LOGISTIC, float(config.learning_rate))

    def update_plan(
        self, config: ModelConfig, raw: np.ndarray, t: int, x: Example, weights: Weights
    ) -> Plan:
        if config.binary:
            ys = [1.0 if t == 1 else 0.0]
        else:
            ys = [1.0 if row == t else 0.0 for row in range(config.n_classes)]
        eta = float(config.learning_rate)
        steps = [-eta * gradient(y, p) for y, p in zip(ys, raw.tolist(), strict=True)]
        rows = [row for row, u in enumerate(steps) if u != 0.0]
        if not rows:
            return NO_UPDATE
        plan = Plan(np.array(rows, dtype=np.int64), np.array([steps[r] for r in rows]))
        return bounded(config, weights, x, plan)

    def apply(self, config: ModelConfig, weights: Weights, x: Example, plan: Plan, k: int) -> None:
        apply(config, weights, x, plan, k)

    def probabilities(self, config: ModelConfig, scores: np.ndarray) -> np.ndarray | None:
        s = sigmoid(np.asarray(scores, dtype=np.float64))
        if config.binary:
            return np.array([1.0 - s[0], s[0]])
        total = s.sum()
        if total == 0:
            return np.full(len(s), 1.0 / len(s))
        found: np.ndarray = s / total
        return found


LEARNER = LogisticRegression()
