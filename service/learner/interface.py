"""What a learner is: its settings, the state it keeps beside the weights, and its rule.

A learner is one module that defines a ``Learner`` and names it in ``registry.py``; everything
else (the configuration's checks, the API's schema, the CLI's options, the challengers, the
export format, the dashboard, the replays) reads it from there. Its rule is written on the
current ``Weights`` (``w``, ``b`` and its named state arrays) of one model's configuration:

- ``raw_scores``: each row's score under the weights that learn (what updates decide from);
- ``served_scores``: the scores a prediction is served with (an averaged learner's mean);
- ``update_plan``: what learning the true class index ``t`` changes (no update: an empty plan);
- ``apply``: make a plan (never an empty one), in place, as the ``k``-th labelled example;
- ``probabilities``: the served scores as class probabilities, where the learner has them.

Every function is pure and deterministic: every worker that replays a logged example decides
the same update, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from service.learner.config import ModelConfig
    from service.learner.features import Example
    from service.learner.kernel import KernelRule
    from service.learner.perceptron import Plan, Weights

STRATEGIES: tuple[str, ...] = ("multiclass", "ovr", "ovo")
# No learner takes a weight or bias beyond this (an update that would is not made), and no
# export holds one: with features within 1e15 and at most 2**25 weights a row, no score can
# overflow a double, so every step computed from one is finite.
MAX_WEIGHT = 1e250


class ConfigError(ValueError):
    """A configuration parameter is out of its accepted range."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


def bad_setting(parameter: str, accepted: str, got: object) -> ConfigError:
    return ConfigError(
        parameter, f"The '{parameter}' parameter must be {accepted}. Got {got!r} instead."
    )


@dataclass(frozen=True)
class Setting:
    """One setting of a learner: a number in ``(low, high]`` (``[low, high]`` when
    ``closed``) or a boolean, its default, and what it does (the API's and the CLI's text)."""

    name: str
    default: float | bool
    text: str
    low: float = 0.0
    high: float = 1e6
    closed: bool = False
    short: str = ""  # how a summary writes it ("lr"); its name if empty

    @property
    def boolean(self) -> bool:
        return isinstance(self.default, bool)

    @property
    def accepted(self) -> str:
        if self.boolean:
            return "a boolean"
        left = "[" if self.closed else "("
        return f"a float in {left}{_number(self.low)}, {_number(self.high)}]"

    def check(self, value: object) -> float | bool:
        """``value`` as this setting keeps it (a whole number as its float), or ConfigError."""
        if self.boolean:
            if not isinstance(value, bool):
                raise bad_setting(self.name, "a boolean", value)
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad_setting(self.name, self.accepted, value)
        try:
            number = float(value)
        except OverflowError:
            raise bad_setting(self.name, self.accepted, value) from None
        low_ok = number >= self.low if self.closed else number > self.low
        if not (math.isfinite(number) and low_ok and number <= self.high):
            raise bad_setting(self.name, self.accepted, value)
        return number


def _number(v: float) -> str:
    """A bound as the messages write it: 1e6, not 1e+06."""
    exponent = round(math.log10(v)) if v > 0 else 0
    return f"1e{exponent}" if exponent >= 5 and v == 10.0**exponent else f"{v:g}"


@dataclass(frozen=True)
class StateArray:
    """An array a learner keeps beside its weights: one value per weight (``per_weight``) or
    one per row (as the bias), each starting at ``start``. It is packed after the weights and
    biases in its learner's order, and exported, imported, checkpointed, rolled back and
    promoted with them. ``copied``: a challenger started from the served learner copies it
    when that learner keeps it too (as AROW's variances), not when it goes with the count of
    examples (an average's sums: a challenger's starts at its first label)."""

    name: str
    per_weight: bool
    start: float = 0.0
    copied: bool = True


class Learner:
    """A learning rule. Subclasses set the class attributes and write the rule; the defaults
    are a learner without state nor probabilities whose served scores are its raw ones."""

    name: str = ""
    title: str = ""  # what the dashboard and the CLI call it ("PA-I")
    text: str = ""  # one line on what it is, for the API's and the CLI's help
    settings: tuple[Setting, ...] = ()
    strategies: tuple[str, ...] = STRATEGIES  # how it learns more than two classes
    has_probabilities = False
    # Why the perceptron's mistake bound R^2 / gamma^2 is not this learner's (empty: it is).
    bound_note = "the perceptron's bound R²/γ² is not this learner's"

    def state(self, config: ModelConfig) -> tuple[StateArray, ...]:
        """The arrays it keeps beside the weights, under ``config``."""
        return ()

    def seen_depended(self, config: ModelConfig) -> bool:
        """Whether its served scores depend on the count of labelled examples seen (an
        averaged learner's mean divides by it): its updates are then logged with their
        ordinal, and committed only in order."""
        return False

    def raw_scores(self, config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
        raise NotImplementedError

    def served_scores(self, config: ModelConfig, weights: Weights, x: Example) -> np.ndarray:
        return self.raw_scores(config, weights, x)

    def update_plan(
        self, config: ModelConfig, raw: np.ndarray, t: int, x: Example, weights: Weights
    ) -> Plan:
        raise NotImplementedError

    def apply(self, config: ModelConfig, weights: Weights, x: Example, plan: Plan, k: int) -> None:
        raise NotImplementedError

    def apply_logged(
        self, config: ModelConfig, weights: Weights, x: Example, *, raw: np.ndarray, t: int, k: int
    ) -> None:
        """Apply a logged update (``x``, true class index ``t``, the kept raw scores, the
        ``k``-th example), as every replica and every rebuild does. An update logged for a
        prediction that another learner served (a label that came after a promotion) was
        decided by that learner; one that moves nothing under this learner's rules still
        counts as a version."""
        plan = self.update_plan(config, raw, t, x, weights)
        if plan:
            self.apply(config, weights, x, plan, k)
        else:
            weights.version += 1

    def updates_by_label(
        self, config: ModelConfig, weights: Weights, raw: np.ndarray, x: Example
    ) -> list[bool]:
        """For each possible true class of ``x``, whether learning it would change ``weights``."""
        return [bool(self.update_plan(config, raw, t, x, weights)) for t in range(config.n_classes)]

    def kernel(self, config: ModelConfig) -> KernelRule | None:
        """Its rule as the compiled kernel takes it (``kernel.py``), where it does: its rows
        learn apart from one another, and its served scores are its raw ones. None: it learns
        through its update plans."""
        return None

    def probabilities(self, config: ModelConfig, scores: np.ndarray) -> np.ndarray | None:
        """The probability of each class given the served scores; None where it has none."""
        return None

    def describe(self, settings: dict[str, Any]) -> str:
        """The learner in a few words: its name, each boolean setting that is on, then each
        number not at its default ('perceptron averaged lr=0.5')."""
        on = [s.name for s in self.settings if s.boolean and settings.get(s.name, s.default)]
        numbers = [
            f"{s.short or s.name}={settings[s.name]:g}"
            for s in self.settings
            if not s.boolean and settings.get(s.name, s.default) != s.default
        ]
        return " ".join([self.name, *on, *numbers])

    def check(self, config: ModelConfig) -> None:
        """Refuse (ConfigError) a configuration this learner cannot learn."""
        if config.n_classes > 2 and config.multiclass not in self.strategies:
            raise ConfigError(
                "multiclass",
                f"'{self.name}' learns more than two classes by {' or '.join(self.strategies)}. "
                f"Got {config.multiclass!r} instead.",
            )
