"""The one error of ``perceptron replay``."""


class ReplayError(Exception):
    """The dataset cannot be read, or does not fit the model of that name."""
