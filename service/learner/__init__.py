"""The perceptron itself: configuration, features and arithmetic, with no I/O."""

from .config import ConfigError, Label, ModelConfig
from .features import Example, FeatureError, encode
from .online import Outcome, Perceptron
from .perceptron import Weights

__all__ = [
    "ConfigError",
    "Example",
    "FeatureError",
    "Label",
    "ModelConfig",
    "Outcome",
    "Perceptron",
    "Weights",
    "encode",
]
