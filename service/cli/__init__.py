"""The ``perceptron`` command: serve, models, replay's entry, and what they share."""
