"""The learners themselves: configuration, features and arithmetic, with no I/O."""

from service.learner.config import ConfigError, Label, ModelConfig
from service.learner.features import Example, FeatureError, encode
from service.learner.online import OnlineLearner, Outcome, Perceptron
from service.learner.passive_aggressive import LearnerConfig, PassiveAggressive
from service.learner.perceptron import Weights

__all__ = [
    "ConfigError",
    "Example",
    "FeatureError",
    "Label",
    "LearnerConfig",
    "ModelConfig",
    "OnlineLearner",
    "Outcome",
    "PassiveAggressive",
    "Perceptron",
    "Weights",
    "encode",
]
