"""A model's configuration: fixed when the model is created, validated eagerly."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from service.learner.interface import STRATEGIES, ConfigError, bad_setting

if TYPE_CHECKING:
    from service.learner.drift_detectors import Detector
    from service.learner.interface import Learner

__all__ = ["STRATEGIES", "ConfigError", "Label", "ModelConfig", "label_key"]

Label = int | str
Strategy = Literal["multiclass", "ovr", "ovo"]
# Upper bounds of every number a configuration holds: what the store, Redis's expiry and the
# answers' JSON can carry without overflow or loss.
MAX_FEEDBACK_TTL_S = 30 * 86_400
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


# The configuration's own fields, in the order its dictionary writes them; a learner's
# settings (``interface.Setting``, read from the registry) come after ``fit_bias``.
_BEFORE = ("classes", "multiclass", "n_features", "hash_bits", "fit_bias")
_AFTER = ("feedback_ttl_s", "default_label", "algorithm")


class ModelConfig:
    """Everything that defines a model; immutable once the model exists.

    ``algorithm`` names its learner (``registry.py``), and the learner's settings are given
    by name beside the model's own fields (``learning_rate``, ``C``...): each left out is its
    learner's default, and a setting of another learner is refused, not ignored (unless it
    is given at the value every configuration made before learners had their own settings
    wrote for it). A perceptron's configuration names no ``algorithm``, as every one made
    before there were others.

    >>> ModelConfig().n_rows
    1
    >>> ModelConfig(classes=("a", "b", "c"), multiclass="ovo").n_rows
    3
    """

    classes: tuple[Label, ...]
    multiclass: Strategy
    n_features: int | None
    hash_bits: int
    fit_bias: bool
    feedback_ttl_s: int
    # The class a prediction is learned with when its wait (feedback_ttl_s) runs out with no
    # label; None: it then takes no label at all.
    default_label: Label | None
    algorithm: str
    settings: dict[str, Any]  # the learner's, every one of them
    # The drift detector on the served learner's mistakes, every parameter given
    # (``drift_detectors.py``); None: none.
    drift: dict[str, Any] | None

    def __init__(
        self,
        classes: Sequence[Label] = (-1, 1),
        multiclass: Strategy = "multiclass",
        n_features: int | None = None,
        *,
        hash_bits: int = 18,
        fit_bias: bool = True,
        feedback_ttl_s: int = 86_400,
        default_label: Label | None = None,
        algorithm: str = "perceptron",
        drift: dict[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        put = object.__setattr__
        put(self, "classes", tuple(classes) if isinstance(classes, list) else classes)
        put(self, "multiclass", multiclass)
        put(self, "n_features", n_features)
        put(self, "hash_bits", hash_bits)
        put(self, "fit_bias", fit_bias)
        put(self, "feedback_ttl_s", feedback_ttl_s)
        put(self, "default_label", default_label)
        put(self, "algorithm", algorithm)
        put(self, "drift", checked_drift(drift))
        self._check_classes()
        self._check_numbers()
        put(self, "settings", self._checked_settings(settings))
        self.learner.check(self)
        if self.default_label is not None and self.class_index(self.default_label) is None:
            raise bad_setting(
                "default_label",
                f"one of the classes {list(self.classes)} or null",
                self.default_label,
            )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a ModelConfig is immutable: cannot set {name!r}")

    def __getattr__(self, name: str) -> Any:
        """A learner's setting by name; one another learner has reads as its neutral value
        (``registry.NEUTRAL``: what a configuration without it meant)."""
        if name.startswith("_") or name == "settings":
            raise AttributeError(name)
        if name in self.settings:
            return self.settings[name]
        from service.learner.registry import NEUTRAL

        if name in NEUTRAL:
            return NEUTRAL[name]
        raise AttributeError(f"{type(self).__name__!r} has no setting {name!r}")

    def _key(self) -> str:
        return self.to_json()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModelConfig) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"ModelConfig({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"

    def replace(self, **changes: Any) -> ModelConfig:
        """This configuration with ``changes`` (checked as any: a setting the new learner
        does not use is refused unless at its neutral value)."""
        return ModelConfig.from_dict(self.to_dict() | changes)

    @property
    def counts_seen(self) -> bool:
        """Whether its served scores depend on the count of labelled examples seen (an
        averaged perceptron's mean): its updates are then committed in order, each with its
        ordinal. Only such a learner serves other scores than those it learns from."""
        return self.learner.seen_depended(self)

    @cached_property
    def drift_detector(self) -> Detector | None:
        """Its drift detector (``drift_detectors.py``); None for none."""
        from service.learner.drift_detectors import detector_of

        return None if self.drift is None else detector_of(self.drift)[0]

    @cached_property
    def drift_spec(self) -> str:
        """Its drift detector as the store's scripts read it; '' for none."""
        from service.learner.drift_detectors import spec_of

        if self.drift_detector is None:
            return ""
        return spec_of(self.drift_detector) + (" retrain" if self.retrains else "")

    @property
    def retrains(self) -> bool:
        """Whether a background learner replaces the served one at a drift (``"on_drift":
        "retrain"``, ``retraining.py``)."""
        return self.drift is not None and self.drift["on_drift"] == "retrain"

    @cached_property
    def learner(self) -> Learner:
        """The learner its ``algorithm`` names."""
        from service.learner.registry import LEARNERS

        return LEARNERS[self.algorithm]

    @cached_property
    def _index(self) -> dict[Label, int]:
        return {c: i for i, c in enumerate(self.classes)}

    @cached_property
    def _keyed(self) -> dict[Label, int]:
        return {label_key(c): i for i, c in enumerate(self.classes)}

    def _check_classes(self) -> None:
        classes = self.classes
        if not isinstance(classes, tuple) or len(classes) < 2:
            raise bad_setting("classes", "a list of at least 2 labels", classes)
        for c in classes:
            if isinstance(c, bool) or not isinstance(c, int | str):
                raise bad_setting("classes", "a list of integers or strings", list(classes))
            if isinstance(c, int) and abs(c) > MAX_LABEL_INT:
                raise bad_setting("classes", "integers within +-2**53 or strings", c)
            if isinstance(c, str) and not 1 <= len(c) <= MAX_LABEL_LENGTH:
                raise bad_setting(
                    "classes", f"strings of 1 to {MAX_LABEL_LENGTH} characters", c[:80]
                )
        # Distinct as text too: scores, weight rows and metrics name each class by str(c).
        if len({str(c) for c in classes}) != len(classes):
            raise bad_setting("classes", "a list of distinct labels", list(classes))
        keys = [str(label_key(c)) for c in classes]
        if "" in keys or len(set(keys)) != len(classes):
            raise bad_setting(
                "classes",
                "labels distinct and not blank once compared as labels are (strings in "
                "Unicode NFC, without surrounding spaces)",
                list(classes),
            )

    def _check_numbers(self) -> None:
        if self.multiclass not in STRATEGIES:
            raise bad_setting("multiclass", "one of 'multiclass', 'ovr', 'ovo'", self.multiclass)
        n = self.n_features
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise bad_setting("n_features", "an int >= 1 or null", n)
        hb = self.hash_bits
        if isinstance(hb, bool) or not isinstance(hb, int) or not 1 <= hb <= 30:
            raise bad_setting("hash_bits", "an int in [1, 30]", hb)
        ttl = self.feedback_ttl_s
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_FEEDBACK_TTL_S:
            raise bad_setting(
                "feedback_ttl_s", f"an int in [1, {MAX_FEEDBACK_TTL_S}] (30 days)", ttl
            )
        if not isinstance(self.fit_bias, bool):
            raise bad_setting("fit_bias", "a boolean", self.fit_bias)

    def _checked_settings(self, given: dict[str, Any]) -> dict[str, Any]:
        """The learner's settings, each checked (its default where left out); a setting of
        another learner is refused, but at its neutral value."""
        from service.learner.registry import LEARNERS, NEUTRAL

        learner = LEARNERS.get(self.algorithm) if isinstance(self.algorithm, str) else None
        if learner is None:
            names = ", ".join(repr(n) for n in LEARNERS)
            raise bad_setting("algorithm", f"one of {names}", self.algorithm)
        own = {s.name: s for s in learner.settings}
        for name, value in given.items():
            if name in own:
                continue
            if name not in NEUTRAL:
                raise TypeError(f"ModelConfig() got an unexpected keyword argument {name!r}")
            if value != NEUTRAL[name] or isinstance(value, bool) != isinstance(NEUTRAL[name], bool):
                raise ConfigError(
                    name,
                    f"The '{name}' parameter is not used by '{self.algorithm}': leave it out. "
                    f"Got {value!r} instead.",
                )
        return {name: s.check(given.get(name, s.default)) for name, s in own.items()}

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
        mine, theirs = self.to_dict(), other.to_dict()
        mine.setdefault("algorithm", "perceptron")
        theirs.setdefault("algorithm", "perceptron")
        return "; ".join(
            f"{k!r} is {json.dumps(mine.get(k))}, not {json.dumps(theirs.get(k))}"
            for k in {**mine, **theirs}
            if mine.get(k) != theirs.get(k)
        )

    def to_dict(self) -> dict[str, Any]:
        """The configuration as stored, exported and answered: its fields, the learner's
        settings after ``fit_bias``; a perceptron's names no ``algorithm``, so that it is what
        it was before there were other learners."""
        d: dict[str, Any] = {k: getattr(self, k) for k in _BEFORE}
        d["classes"] = list(self.classes)
        d.update(self.settings)
        d.update((k, getattr(self, k)) for k in _AFTER)
        if self.algorithm == "perceptron":
            del d["algorithm"]
        if self.drift is not None:
            d["drift"] = dict(self.drift)
        return d

    @staticmethod
    def field_names() -> frozenset[str]:
        """Every name a configuration may hold: its fields and every learner's settings."""
        from service.learner.registry import NEUTRAL

        return frozenset((*_BEFORE, *_AFTER, "drift")) | frozenset(NEUTRAL)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        names = cls.field_names()
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self) -> str:
        """The configuration as the store keeps it (a model's ``cfg``)."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str | bytes) -> ModelConfig:
        return cls.from_dict(json.loads(text))


def checked_drift(drift: Any) -> dict[str, Any] | None:
    """A drift configuration with every parameter given, or None (ConfigError: one that
    cannot be)."""
    from service.learner.drift_detectors import DetectorError, detector_of

    if drift is None:
        return None
    if not isinstance(drift, dict):
        raise bad_setting("drift", "an object naming its detector, or null", drift)
    try:
        detector, on_drift = detector_of(drift)
    except DetectorError as e:
        raise ConfigError("drift", str(e)) from e
    return {"detector": detector.name, "on_drift": on_drift, **asdict(detector)}
