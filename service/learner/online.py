"""A self-contained online perceptron: the learner core with no storage behind it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from service.learner.config import Label, ModelConfig
from service.learner.features import Example, FeatureError, Features, encode
from service.learner.perceptron import (
    Weights,
    apply,
    predict_index,
    raw_scores,
    served_scores,
    update_plan,
)


@dataclass(frozen=True)
class Outcome:
    """What learning one labelled example did."""

    label: Label  # the prediction served before learning
    mistake: bool
    updated: bool


class Perceptron:
    """An online perceptron following the protocol: predict, then learn the true label.

    >>> p = Perceptron(ModelConfig(n_features=2))
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
        return served_scores(self.config, self.weights, x)

    def learn(self, features: Features, label: Label) -> Outcome:
        cfg = self.config
        t = cfg.class_index(label)
        if t is None:
            message = f"Label {label!r} is not one of {list(cfg.classes)}."
            raise FeatureError("unknown_label", message)
        x = self.encode(features)
        served = predict_index(cfg, served_scores(cfg, self.weights, x))
        plan = update_plan(cfg, raw_scores(self.weights, x), t)
        self.weights.seen += 1
        apply(cfg, self.weights, x, plan, self.weights.seen)
        return Outcome(cfg.classes[served], served != t, bool(plan))
