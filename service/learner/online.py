"""A self-contained online learner: the learner core with no storage behind it."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.learner.config import Label, ModelConfig
from service.learner.features import Example, FeatureError, Features, encode
from service.learner.perceptron import Weights, predict_index


@dataclass(frozen=True)
class Outcome:
    """What learning one labelled example did."""

    label: Label  # the prediction served before learning
    mistake: bool
    updated: bool


@dataclass(frozen=True)
class Served:
    """A prediction awaiting its label: the example and the scores it was served with."""

    x: Example
    raw: np.ndarray  # the weights' own scores, from which the label's update is decided
    served: int  # the class index served


def label_index(config: ModelConfig, label: Label) -> int:
    """The class index of ``label``; a FeatureError (``unknown_label``) for another label."""
    t = config.class_index(label)
    if t is None:
        message = f"Label {label!r} is not one of {list(config.classes)}."
        raise FeatureError("unknown_label", message)
    return t


class OnlineLearner:
    """An online learner of any algorithm following the protocol: predict, then learn the
    true label.

    >>> p = OnlineLearner(ModelConfig(n_features=2))
    >>> p.learn([1.0, 0.0], 1)
    Outcome(label=-1, mistake=True, updated=True)
    >>> p.predict([2.0, 0.0])
    1
    """

    def __init__(self, config: ModelConfig | None = None, **params: Any) -> None:
        self.config = config if config is not None else ModelConfig(**params)
        self.weights = Weights.zeros(self.config)

    def encode(self, features: Features) -> Example:
        return encode(self.config, features)

    def predict(self, features: Features) -> Label:
        x = self.encode(features)
        return self.config.classes[predict_index(self.config, self.scores(x))]

    def scores(self, x: Example) -> np.ndarray:
        return self.config.learner.served_scores(self.config, self.weights, x)

    def probabilities(self, features: Features) -> np.ndarray | None:
        """Each class's probability for ``features``; None for a learner without them."""
        return self.config.learner.probabilities(self.config, self.scores(self.encode(features)))

    def learn(self, features: Features, label: Label) -> Outcome:
        """Predict, then learn the true label at once (``/learn``)."""
        return self.feedback(self.serve(features), label)

    def serve(self, features: Features) -> Served:
        """A prediction, kept with its scores until its label comes (``/predict``)."""
        return self.serve_example(self.encode(features))

    def serve_example(self, x: Example) -> Served:
        """``serve`` of an example already encoded."""
        learner = self.config.learner
        scores = learner.served_scores(self.config, self.weights, x)
        raw = learner.raw_scores(self.config, self.weights, x)
        return Served(x, raw, predict_index(self.config, scores))

    def feedback(self, p: Served, label: Label) -> Outcome:
        """Learn the true label of a prediction served before (``/feedback``): the update is
        decided from the scores it was served with, and applied to the weights of now."""
        cfg = self.config
        t = label_index(cfg, label)
        learner = cfg.learner
        plan = learner.update_plan(cfg, p.raw, t, p.x, self.weights)
        self.weights.seen += 1
        if plan:
            learner.apply(cfg, self.weights, p.x, plan, self.weights.seen)
        return Outcome(cfg.classes[p.served], p.served != t, bool(plan))

    def delayed(
        self, rows: Sequence[Features], labels: Sequence[Label], delay: int
    ) -> list[Outcome]:
        """Each example served in turn, its label learned once ``delay`` more examples were
        served (the last ones at the end): each example's outcome, in the examples' order.

        >>> p = OnlineLearner(ModelConfig(n_features=1))
        >>> [o.mistake for o in p.delayed([[1.0], [1.0], [1.0]], [1, 1, 1], delay=1)]
        [True, True, False]
        """
        waiting: deque[tuple[int, Served]] = deque()
        out: dict[int, Outcome] = {}
        for i, features in enumerate(rows):
            waiting.append((i, self.serve(features)))
            if len(waiting) > delay:
                j, p = waiting.popleft()
                out[j] = self.feedback(p, labels[j])
        for j, p in waiting:
            out[j] = self.feedback(p, labels[j])
        return [out[i] for i in range(len(rows))]


class Perceptron(OnlineLearner):
    """An online perceptron (or any learner its configuration names), as ``OnlineLearner``.

    >>> p = Perceptron(ModelConfig(n_features=2))
    >>> p.learn([1.0, 0.0], 1)
    Outcome(label=-1, mistake=True, updated=True)
    """
