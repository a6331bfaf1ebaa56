"""The learning rule a model's configuration names, for whatever learns or serves it.

Each function asks the model's learner (``config.learner``, from ``registry.py``): the scores
a prediction is served with, the raw scores its update is decided from, the update plan of a
true class, and its probabilities. Every worker that replays an entry decides the same
update, bit for bit.
"""

from __future__ import annotations

import numpy as np

from service.learner.config import ModelConfig
from service.learner.features import Example
from service.learner.perceptron import Plan, Weights


def raw_scores(config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
    """The current weights' scores, one per row: what learning decides from."""
    return config.learner.raw_scores(config, weights, x)


def served_scores(config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
    """The scores a prediction is served with."""
    return config.learner.served_scores(config, weights, x)


def update_plan(config: ModelConfig, raw: np.ndarray, t: int, x: Example, weights: Weights) -> Plan:
    """What learning the true class index ``t`` of ``x`` changes, from the raw scores, in
    ``weights`` (those it will be added to): none where it would take a weight beyond
    ``MAX_WEIGHT``."""
    return config.learner.update_plan(config, raw, t, x, weights)


def apply(config: ModelConfig, weights: Weights, x: Example, plan: Plan, k: int) -> None:
    """Make ``plan`` for ``x``, the ``k``-th labelled example, in place (nothing if empty)."""
    if plan:
        config.learner.apply(config, weights, x, plan, k)


def apply_logged(
    config: ModelConfig, weights: Weights, x: Example, *, raw: np.ndarray, t: int, k: int
) -> None:
    """Apply a logged update (``x``, true class index ``t``, the kept raw scores, the ``k``-th
    example), as every replica and every rebuild does. An update logged for a prediction that
    another learner served (a label that came after a promotion) was decided by that learner;
    one that moves nothing under this learner's rules still counts as a version."""
    plan = update_plan(config, raw, t, x, weights)
    if plan:
        config.learner.apply(config, weights, x, plan, k)
    else:
        weights.version += 1


def updates_by_label(
    config: ModelConfig, weights: Weights, raw: np.ndarray, x: Example
) -> list[bool]:
    """For each possible true class of ``x``, whether learning it would change ``weights``:
    the bitmap a pending record keeps, by which the feedback script logs an update or not."""
    return config.learner.updates_by_label(config, weights, raw, x)


def probabilities(config: ModelConfig, scores: np.ndarray) -> np.ndarray | None:
    """Each class's probability from the served scores; None for a learner without them."""
    return config.learner.probabilities(config, scores)
