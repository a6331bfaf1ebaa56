"""A model's configuration: fixed when the model is created, validated eagerly."""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from functools import cached_property
from typing import Any, Literal

Label = int | str
Strategy = Literal["multiclass", "ovr", "ovo"]
STRATEGIES: tuple[str, ...] = ("multiclass", "ovr", "ovo")
Algorithm = Literal["perceptron", "pa1", "pa2"]
ALGORITHMS: tuple[str, ...] = ("perceptron", "pa1", "pa2")
MAX_C = 1e6  # the same bound as the learning rate: every PA step stays <= 1e6 * loss
# Upper bounds of every number a configuration holds: what the store, Redis's expiry and the
# answers' JSON can carry without overflow or loss.
MAX_FEEDBACK_TTL_S = 30 * 86_400
MAX_MARGIN = 1e12
# No learner takes a weight or bias beyond this (an update that would is not made), and no
# export holds one: with features within 1e15 and at most 2**25 weights a row, no score can
# overflow a double, so every step computed from one is finite.
MAX_WEIGHT = 1e250
MAX_LABEL_INT = 2**53  # integer labels survive a round trip through a double (JS, Lua)
MAX_LABEL_LENGTH = 256


def label_key(label: Label) -> Label:
    """What a label is compared by: a string in Unicode NFC without surrounding spaces (so
    that "é" as one code point and as "e" with a combining accent, or "a" and " a", are one
    class); an integer as it is.

    >>> label_key(" e\u0301 ") == label_key("\u00e9")
    True
    """
    return unicodedata.normalize("NFC", label).strip() if isinstance(label, str) else label


class ConfigError(ValueError):
    """A configuration parameter is out of its accepted range."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


def _bad(parameter: str, accepted: str, got: object) -> ConfigError:
    return ConfigError(
        parameter, f"The '{parameter}' parameter must be {accepted}. Got {got!r} instead."
    )


@dataclass(frozen=True)
class ModelConfig:
    """Everything that defines a model; immutable once the model exists.

    ``algorithm`` is its learning rule: the perceptron (the default), or passive-aggressive
    PA-I / PA-II (``"pa1"``, ``"pa2"``) with their aggressiveness ``C``. A perceptron's
    configuration names neither (``to_dict`` leaves them out), as every one made before they
    existed; a PA model takes neither ``learning_rate``, ``margin`` nor ``averaged``.

    >>> ModelConfig().n_rows
    1
    >>> ModelConfig(classes=("a", "b", "c"), multiclass="ovo").n_rows
    3
    """

    classes: tuple[Label, ...] = (-1, 1)
    multiclass: Strategy = "multiclass"
    n_features: int | None = None
    hash_bits: int = 18
    fit_bias: bool = True
    learning_rate: float = 1.0
    margin: float = 0.0
    averaged: bool = False
    feedback_ttl_s: int = 86_400
    # The class a prediction is learned with when its wait (feedback_ttl_s) runs out with no
    # label; None: it then takes no label at all.
    default_label: Label | None = None
    algorithm: Algorithm = "perceptron"
    C: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.classes, list):
            object.__setattr__(self, "classes", tuple(self.classes))
        self._check()
        if isinstance(self.C, int):  # a whole number given: kept as the float it stands for
            object.__setattr__(self, "C", float(self.C))

    @cached_property
    def _index(self) -> dict[Label, int]:
        return {c: i for i, c in enumerate(self.classes)}

    @cached_property
    def _keyed(self) -> dict[Label, int]:
        return {label_key(c): i for i, c in enumerate(self.classes)}

    def _check(self) -> None:
        self._check_classes()
        self._check_numbers()
        self._check_rule()
        if self.default_label is not None and self.class_index(self.default_label) is None:
            raise _bad(
                "default_label",
                f"one of the classes {list(self.classes)} or null",
                self.default_label,
            )

    def _check_classes(self) -> None:
        classes = self.classes
        if not isinstance(classes, tuple) or len(classes) < 2:
            raise _bad("classes", "a list of at least 2 labels", classes)
        for c in classes:
            if isinstance(c, bool) or not isinstance(c, int | str):
                raise _bad("classes", "a list of integers or strings", list(classes))
            if isinstance(c, int) and abs(c) > MAX_LABEL_INT:
                raise _bad("classes", "integers within +-2**53 or strings", c)
            if isinstance(c, str) and not 1 <= len(c) <= MAX_LABEL_LENGTH:
                raise _bad("classes", f"strings of 1 to {MAX_LABEL_LENGTH} characters", c[:80])
        # Distinct as text too: scores, weight rows and metrics name each class by str(c).
        if len({str(c) for c in classes}) != len(classes):
            raise _bad("classes", "a list of distinct labels", list(classes))
        keys = [str(label_key(c)) for c in classes]
        if "" in keys or len(set(keys)) != len(classes):
            raise _bad(
                "classes",
                "labels distinct and not blank once compared as labels are (strings in "
                "Unicode NFC, without surrounding spaces)",
                list(classes),
            )

    def _check_numbers(self) -> None:
        if self.multiclass not in STRATEGIES:
            raise _bad("multiclass", "one of 'multiclass', 'ovr', 'ovo'", self.multiclass)
        n = self.n_features
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise _bad("n_features", "an int >= 1 or null", n)
        hb = self.hash_bits
        if isinstance(hb, bool) or not isinstance(hb, int) or not 1 <= hb <= 30:
            raise _bad("hash_bits", "an int in [1, 30]", hb)
        lr = self.learning_rate
        if not _is_real(lr) or not _finite(lr) or not 0 < lr <= 1e6:
            raise _bad("learning_rate", "a float in (0, 1e6]", lr)
        m = self.margin
        if not _is_real(m) or not _finite(m) or not 0 <= m <= MAX_MARGIN:
            raise _bad("margin", "a float in [0, 1e12]", m)
        ttl = self.feedback_ttl_s
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_FEEDBACK_TTL_S:
            raise _bad("feedback_ttl_s", f"an int in [1, {MAX_FEEDBACK_TTL_S}] (30 days)", ttl)
        for name in ("fit_bias", "averaged"):
            if not isinstance(getattr(self, name), bool):
                raise _bad(name, "a boolean", getattr(self, name))

    def _check_rule(self) -> None:
        """The learning rule and its settings: a setting the rule does not use is refused,
        not ignored."""
        if self.algorithm not in ALGORITHMS:
            raise _bad("algorithm", "one of 'perceptron', 'pa1', 'pa2'", self.algorithm)
        c = self.C
        if not _is_real(c) or not _finite(c) or not 0 < c <= MAX_C:
            raise _bad("C", "a float in (0, 1e6]", c)
        if self.algorithm == "perceptron":
            if c != 1.0:
                raise ConfigError(
                    "C",
                    f"The 'C' parameter is for the passive-aggressive algorithms only. Got "
                    f"{c!r} instead.",
                )
            return
        unused = {"learning_rate": 1.0, "margin": 0.0, "averaged": False}
        for name, default in unused.items():
            value = getattr(self, name)
            if value != default:
                raise ConfigError(
                    name,
                    f"The '{name}' parameter is not used by '{self.algorithm}': leave it at "
                    f"{json.dumps(default)}. Got {value!r} instead.",
                )

    @property
    def passive_aggressive(self) -> bool:
        """Whether the model learns by PA-I or PA-II rather than the perceptron's rule."""
        return self.algorithm != "perceptron"

    @property
    def default_index(self) -> int | None:
        """The class index of ``default_label`` (None without one)."""
        return None if self.default_label is None else self.class_index(self.default_label)

    @property
    def binary(self) -> bool:
        return len(self.classes) == 2

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def dense(self) -> bool:
        return self.n_features is not None

    @property
    def dim(self) -> int:
        """Length of one weight vector: n_features, or 2**hash_bits buckets."""
        return self.n_features if self.n_features is not None else 1 << self.hash_bits

    @property
    def n_rows(self) -> int:
        """How many weight vectors the model keeps."""
        k = self.n_classes
        if k == 2:
            return 1
        if self.multiclass == "ovo":
            return k * (k - 1) // 2
        return k

    @property
    def n_scores(self) -> int:
        """How many raw scores a prediction keeps for its later update (one per row)."""
        return self.n_rows

    def class_index(self, label: object) -> int | None:
        """Index of the class ``label`` is (compared by ``label_key``), or None when it is
        none of them.

        >>> ModelConfig(classes=("\u00e9", "b")).class_index(" e\u0301")
        0
        """
        if isinstance(label, bool) or not isinstance(label, int | str):
            return None
        t = self._index.get(label)
        return self._keyed.get(label_key(label)) if t is None else t

    def class_indices(self, labels: Sequence[Label]) -> list[int | None]:
        """``class_index`` of each label; in one pass in C when every label is an int (not a
        bool) or a str written as its class is, as a batch's labels mostly are."""
        if {int, str}.issuperset(map(type, labels)):
            ts = list(map(self._index.get, labels))
            if None not in ts:
                return ts
        return [self.class_index(label) for label in labels]

    def differences(self, other: ModelConfig) -> str:
        """The settings in which ``other`` differs from this configuration, in words.

        >>> ModelConfig(n_features=4).differences(ModelConfig(n_features=3, margin=0.5))
        "'n_features' is 4, not 3; 'margin' is 0.0, not 0.5"
        """
        mine, theirs = asdict(self), asdict(other)
        return "; ".join(
            f"{k!r} is {json.dumps(mine[k])}, not {json.dumps(theirs[k])}"
            for k in mine
            if mine[k] != theirs[k]
        )

    def to_dict(self) -> dict[str, Any]:
        """The configuration as stored, exported and answered; a perceptron's names no
        ``algorithm`` nor ``C``, so that it is what it was before they existed."""
        d = asdict(self)
        d["classes"] = list(self.classes)
        if not self.passive_aggressive:
            del d["algorithm"], d["C"]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {k: v for k, v in data.items() if k in _FIELDS}
        if "classes" in known and isinstance(known["classes"], list):
            known["classes"] = tuple(known["classes"])
        return cls(**known)

    def to_json(self) -> str:
        """The configuration as the store keeps it (a model's ``cfg``)."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelConfig:
        return cls.from_dict(json.loads(text))


def _finite(v: float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _is_real(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


_FIELDS = {f.name for f in fields(ModelConfig)}
