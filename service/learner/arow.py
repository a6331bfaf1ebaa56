"""AROW (Crammer, Kulesza and Dredze, 2009) with a diagonal covariance: a variance per weight.

Also in docs/conventions.md. For each binary row (one for two classes, one per class for
one-vs-rest, that class positive) with ``y`` in {-1, +1}, the bias a weight on a constant
feature 1 with its own variance (none without ``fit_bias``):

- margin ``m = w.x + b``, summed term by term in feature order (as PA's scores);
- when ``y m < 1``: ``v = sum_i (s_i x_i) x_i + s_b`` (in feature order, the bias's last),
  ``beta = 1 / (v + r)``, ``alpha = (1 - y m) beta``, and with ``c = alpha y``:
  ``w_i += (c s_i) x_i``, ``b += c s_b``, ``s_i -= beta (s_i x_i)^2``, ``s_b -= beta s_b^2``;
- every ``s`` starts at 1; an update that would take a weight beyond ``MAX_WEIGHT``, or a
  variance below 0 or not finite, is not made;
- the prediction is the perceptron's: ``classes[1]`` iff ``m > 0``, else the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from service.learner.config import ModelConfig
from service.learner.features import Example
from service.learner.interface import MAX_WEIGHT, Learner, Setting, StateArray
from service.learner.passive_aggressive import scores
from service.learner.perceptron import NO_UPDATE, Plan, Weights

SIGMA, SIGMA_BIAS = "sigma", "sigma_bias"


@dataclass(frozen=True)
class ArowPlan(Plan):
    """The rows an update changes, each row's ``c = alpha y`` and its ``beta``."""

    betas: np.ndarray = field(default_factory=lambda: np.zeros(0))


class Arow(Learner):
    """Adaptive regularization of weight vectors, diagonal: binary and one-vs-rest."""

    name = "arow"
    title = "AROW"
    text = "AROW (Crammer, Kulesza and Dredze, 2009), a variance per weight"
    settings = (Setting("r", 1.0, "A number in (0, 1e6]: the regularization"),)
    strategies = ("ovr",)

    def state(self, config: ModelConfig) -> tuple[StateArray, ...]:
        return (StateArray(SIGMA, per_weight=True, start=1.0), StateArray(SIGMA_BIAS, False, 1.0))

    def raw_scores(self, config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
        return scores(weights, x)

    def update_plan(
        self, config: ModelConfig, raw: np.ndarray, t: int, x: Example, weights: Weights
    ) -> Plan:
        if config.binary:
            y = np.array([1.0 if t == 1 else -1.0])
        else:
            y = np.full(config.n_classes, -1.0)
            y[t] = 1.0
        rows = np.flatnonzero(y * raw < 1.0)
        if rows.size == 0:
            return NO_UPDATE
        sigma = (
            weights.state[SIGMA][rows]
            if x.index is None
            else weights.state[SIGMA][np.ix_(rows, x.index)]
        )
        v = _row_sums((sigma * x.values) * x.values)
        if config.fit_bias:
            v = v + weights.state[SIGMA_BIAS][rows]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            betas = 1.0 / (v + float(config.r))
            coefs = ((1.0 - y[rows] * raw[rows]) * betas) * y[rows]
        plan = ArowPlan(rows, coefs, betas)
        return plan if self._within(config, weights, x, plan, sigma) else NO_UPDATE

    def _within(
        self, config: ModelConfig, weights: Weights, x: Example, plan: ArowPlan, sigma: np.ndarray
    ) -> bool:
        """Whether ``plan`` keeps every weight within ``MAX_WEIGHT`` and every variance at 0 or
        more, all finite: the values ``apply`` will compute."""
        rows, c, beta = plan.rows, plan.coefs[:, None], plan.betas[:, None]
        cols = weights.w[rows] if x.index is None else weights.w[np.ix_(rows, x.index)]
        with np.errstate(over="ignore", invalid="ignore"):
            new_w = cols + (c * sigma) * x.values
            sx = sigma * x.values
            new_s = sigma - beta * (sx * sx)
            ok = bool((np.abs(new_w) <= MAX_WEIGHT).all() and (new_s >= 0).all())
            ok = ok and bool(np.isfinite(new_s).all())
            if config.fit_bias:
                sb = weights.state[SIGMA_BIAS][rows]
                new_b = weights.b[rows] + plan.coefs * sb
                new_sb = sb - plan.betas * (sb * sb)
                ok = ok and bool((np.abs(new_b) <= MAX_WEIGHT).all() and (new_sb >= 0).all())
                ok = ok and bool(np.isfinite(new_sb).all())
        return ok

    def apply(self, config: ModelConfig, weights: Weights, x: Example, plan: Plan, k: int) -> None:
        assert isinstance(plan, ArowPlan)
        rows, c, beta = plan.rows, plan.coefs[:, None], plan.betas[:, None]
        sigma_all, sb_all = weights.state[SIGMA], weights.state[SIGMA_BIAS]
        at = rows if x.index is None else np.ix_(rows, x.index)
        sigma = sigma_all[at]
        weights.w[at] = weights.w[at] + (c * sigma) * x.values
        sx = sigma * x.values
        sigma_all[at] = sigma - beta * (sx * sx)
        if config.fit_bias:
            sb = sb_all[rows]
            weights.b[rows] = weights.b[rows] + plan.coefs * sb
            sb_all[rows] = sb - plan.betas * (sb * sb)
        weights.version += 1


def _row_sums(terms: np.ndarray) -> np.ndarray:
    """Each row's terms summed one after another in feature order."""
    if terms.shape[1] == 0:
        return np.zeros(terms.shape[0])
    found: np.ndarray = np.cumsum(terms, axis=1)[:, -1]
    return found


LEARNER = Arow()
