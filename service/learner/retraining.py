"""A learner that heals at a drift, as River's ``drift.DriftRetrainingClassifier`` does with its
background learner (``train_in_background``): the pure reference of ``"on_drift": "retrain"``.

For each labelled example, in River's order (``learn_one``): the served learner's mistake feeds
the detector; then, if the detector warns, a background learner of the same configuration
(started from zero) learns the example; else, if it detects a drift, the background learner
serves from now on and a fresh one waits for the next warning; then the served learner learns
the example. A learner that comes to serve keeps its own count of examples, so an averaged one
averages over its own examples.

>>> import math
>>> from service.learner.drift_detectors import DDM
>>> r = Retraining(ModelConfig(n_features=2), DDM())
>>> xs = [[math.cos(i), math.sin(i)] for i in range(600)]  # the concept turns at 300
>>> ys = [(1 if x[0] + x[1] > 0 else -1) * (1 if i < 300 else -1) for i, x in enumerate(xs)]
>>> healed = [r.learn(x, y) for x, y in zip(xs, ys)]
>>> [i for i, h in enumerate(healed) if h.retrained]
[244, 303]
"""

from __future__ import annotations

from dataclasses import dataclass

from service.learner.config import Label, ModelConfig
from service.learner.drift_detectors import Detector, Status, status_of
from service.learner.features import Features
from service.learner.online import OnlineLearner, Outcome, Served, label_index


@dataclass(frozen=True)
class Healed:
    """What learning one labelled example did: the served learner's outcome (the prediction
    served, its mistake), and whether the background learner replaced it at this example."""

    outcome: Outcome
    retrained: bool


class Retraining:
    """The served learner, the background learner and the detector between them."""

    def __init__(self, config: ModelConfig, detector: Detector) -> None:
        self.config = config
        self.detector = detector
        self.state = detector.start()
        self.served = OnlineLearner(config)
        self.background = OnlineLearner(config)

    @property
    def status(self) -> Status:
        return status_of(self.detector, self.state)

    def predict(self, features: Features) -> Label:
        return self.served.predict(features)

    def serve(self, features: Features) -> Served:
        """A prediction of the served learner, kept until its label comes (``/predict``)."""
        return self.served.serve(features)

    def learn(self, features: Features, label: Label) -> Healed:
        """Predict, then learn the true label at once (``/learn``, River's ``learn_one``)."""
        return self.feedback(self.serve(features), label)

    def feedback(self, p: Served, label: Label) -> Healed:
        """Learn the true label of prediction ``p``, whose mistake feeds the detector. The
        learner that served it learns it from the scores it was served with; one that replaced
        it at this example, from its own (as River's ``learn_one`` after the swap)."""
        t = label_index(self.config, label)
        self.state = self.detector.update(self.state, int(p.served != t))
        warning, drift = self.detector.flags(self.state)
        if warning:
            self.background.feedback(self.background.serve_example(p.x), label)
        elif drift:
            self.served, self.background = self.background, OnlineLearner(self.config)
            learned = self.served.feedback(self.served.serve_example(p.x), label)
            outcome = Outcome(self.config.classes[p.served], p.served != t, learned.updated)
            return Healed(outcome, retrained=True)
        return Healed(self.served.feedback(p, label), retrained=False)
