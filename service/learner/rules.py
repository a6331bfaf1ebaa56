"""The learning rule a model's configuration names, for whatever learns or serves it.

The perceptron's (``perceptron.py``) or PA-I / PA-II's (``passive_aggressive.py``): the scores
a prediction is served with, the raw scores its update is decided from, and the update plan
of a true class. A PA model's scores are summed term by term in feature order (as
scikit-learn's learner sums them), and its update needs the example's squared norm, which is
summed the same way from the example a pending record or a log entry keeps: every worker
that replays an entry decides the same update, bit for bit.
"""

from __future__ import annotations

import numpy as np

from service.learner import passive_aggressive as pa
from service.learner import perceptron
from service.learner.config import ModelConfig
from service.learner.features import Example
from service.learner.perceptron import Plan, Weights


def raw_scores(config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
    """The current weights' scores, one per row: what learning decides from."""
    if config.passive_aggressive:
        return pa.scores(weights, x)
    return perceptron.raw_scores(weights, x)


def served_scores(config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
    """The scores a prediction is served with (a PA model is never averaged)."""
    if config.passive_aggressive:
        return pa.scores(weights, x)
    return perceptron.served_scores(config, weights, x)


def update_plan(config: ModelConfig, raw: np.ndarray, t: int, x: Example, weights: Weights) -> Plan:
    """What learning the true class index ``t`` of ``x`` changes, from the raw scores, in
    ``weights`` (those it will be added to): none where it would take a weight beyond
    ``MAX_WEIGHT`` (a PA step; the perceptron's is too small ever to)."""
    if config.passive_aggressive:
        return pa.bounded(config, weights, x, pa.update_plan(config, raw, t, pa.sq_norm(x)))
    return perceptron.update_plan(config, raw, t)


def apply_logged(
    config: ModelConfig, weights: Weights, x: Example, raw: np.ndarray, t: int, k: int
) -> None:
    """Apply a logged update (``x``, true class index ``t``, the kept raw scores, the ``k``-th
    example), as every replica and every rebuild does. An update logged for a prediction that
    another learner served (a label that came after a promotion) was decided by that learner;
    one that moves nothing under this learner's rules still counts as a version."""
    plan = update_plan(config, raw, t, x, weights)
    if plan:
        perceptron.apply(config, weights, x, plan, k)
    else:
        weights.version += 1


def updates_by_label(
    config: ModelConfig, weights: Weights, raw: np.ndarray, x: Example
) -> list[bool]:
    """For each possible true class of ``x``, whether learning it would change ``weights``:
    the bitmap a pending record keeps, by which the feedback script logs an update or not."""
    if config.passive_aggressive:
        return pa.updates_by_label(config, weights, raw, x)
    return perceptron.updates_by_label(config, raw)
