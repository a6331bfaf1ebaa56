"""The learners a model can name in its ``algorithm``: the one list of them.

Each is one module's ``Learner`` (``interface.py``); the configuration's checks, the API's
schema and its ``GET /learners``, the CLI's options, the challengers and the dashboard read
them here. A new learner is a module and a line below.
"""

from __future__ import annotations

from typing import Any

from service.learner import arow, logistic, passive_aggressive, perceptron
from service.learner.interface import Learner, Setting

LEARNERS: dict[str, Learner] = {
    learner.name: learner
    for learner in (
        perceptron.LEARNER,
        passive_aggressive.PA1,
        passive_aggressive.PA2,
        logistic.LEARNER,
        arow.LEARNER,
    )
}
ALGORITHMS: tuple[str, ...] = tuple(LEARNERS)


def _settings() -> dict[str, Setting]:
    found: dict[str, Setting] = {}
    for learner in LEARNERS.values():
        for s in learner.settings:
            found.setdefault(s.name, s)
    return found


# Every learner's settings by name, each as the first learner that has it declares it.
SETTINGS: dict[str, Setting] = _settings()
# What a configuration means by a setting its learner does not have: its first declarer's
# default (every configuration written before learners had settings of their own names the
# perceptron's at these values).
NEUTRAL: dict[str, Any] = {name: s.default for name, s in SETTINGS.items()}


def learners_by_setting() -> dict[str, tuple[str, ...]]:
    """For each setting, the learners that have it."""
    return {
        name: tuple(n for n, it in LEARNERS.items() if any(s.name == name for s in it.settings))
        for name in SETTINGS
    }
