"""scikit-learn's linear classifiers and the service's models, both ways (the extra ``sklearn``).

``estimator_document`` writes a fitted linear classifier (``coef_``, ``intercept_``,
``classes_``: ``Perceptron``, ``SGDClassifier``, ``LinearSVC``, ``LogisticRegression``, ...) as
an export document of a dense model: imported, the service predicts what the estimator
predicts, and learns on from those weights with its own rule (passive-aggressive for an
``SGDClassifier`` with ``learning_rate="pa1"`` or ``"pa2"``, or a ``PassiveAggressiveClassifier``;
the perceptron's for any other). ``estimator_of`` reads an export document into a fitted
``sklearn.linear_model.Perceptron`` (a perceptron model) or ``SGDClassifier(loss="hinge",
penalty=None, learning_rate="pa1"|"pa2", eta0=C)`` (a PA model) that predicts what the service
predicts. ``deploy/CLIENT.md`` has the mapping (modes, labels, ties, what each direction
refuses).

The client imports this module only when a bridge is used: without scikit-learn installed, it
raises an ``ImportError`` that names the extra.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

try:
    import numpy as np
    from sklearn.linear_model import LogisticRegression, Perceptron, SGDClassifier
    from sklearn.utils.validation import check_is_fitted

    from . import model_document  # (it needs numpy)
except ImportError as e:  # the extra is not installed
    raise ImportError(
        "The scikit-learn bridge needs scikit-learn: pip install 'perceptron-client[sklearn]'"
    ) from e

__all__ = [
    "OPTIONS",
    "SklearnBridgeError",
    "default_mode",
    "estimator_document",
    "estimator_of",
    "logistic_step",
    "passive_aggressive_rule",
]

# What a caller may choose of the model a warm start makes; the rest comes from the estimator.
# (a learner's settings: those GET /learners lists)
OPTIONS = (
    *("multiclass", "feedback_ttl_s", "algorithm"),
    *("learning_rate", "margin", "averaged", "C", "r"),
)
_LIMIT = 2**53  # the service's integer labels (they survive a round trip through a double)


class SklearnBridgeError(ValueError):
    """An estimator the service cannot take as it is, or a model that no scikit-learn estimator
    predicts exactly as the service does."""


# --- scikit-learn -> the service ---------------------------------------------------------------


def default_mode(estimator: Any) -> str:
    """The multiclass mode a warm start gives a model of more than two classes, when the
    caller chooses none: ``multiclass`` (one jointly trained weight row a class, which learns on
    with the multiclass perceptron's rule) for a multinomial logistic regression or a
    Crammer-Singer ``LinearSVC``; ``ovr`` (each row a binary perceptron of its class against
    the rest) for every other, which is how they were trained. Both predict the argmax of the
    same scores, so the predictions are the same either way."""
    if getattr(estimator, "multi_class", None) == "crammer_singer":
        return "multiclass"
    if isinstance(estimator, LogisticRegression):
        # scikit-learn >= 1.8 has no multi_class: a multiclass fit is multinomial.
        chosen = getattr(estimator, "multi_class", "multinomial")
        if chosen == "ovr" or (chosen == "auto" and estimator.solver == "liblinear"):
            return "ovr"
        return "multiclass"
    return "ovr"


def estimator_document(name: str, estimator: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """An export document of a dense model that scores as ``estimator`` does: its classes
    (``classes_``, in order), one weight row a class (``coef_``; one row for two classes, the
    second class positive), a bias a row (``intercept_``); ``options`` choose among
    ``OPTIONS``."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(
            f"Unknown option {unknown[0]!r}: a warm start takes the classes, n_features and "
            f"fit_bias from the estimator, and may choose {', '.join(OPTIONS)}."
        )
    coef, intercept, classes = _linear_parts(estimator)
    if len(classes) > 2 and options.get("multiclass") == "ovo":
        raise SklearnBridgeError(
            "An 'ovo' model keeps a weight row for each pair of classes, and the estimator has "
            "one for each class: choose 'ovr' or 'multiclass' (both predict as it does)."
        )
    config: dict[str, Any] = {
        "classes": classes,
        "n_features": int(coef.shape[1]),
        "fit_bias": bool(getattr(estimator, "fit_intercept", True)) or bool(intercept.any()),
    }
    rule = passive_aggressive_rule(estimator)
    step = logistic_step(estimator)
    if rule is not None:  # it learns on with the estimator's own PA rule and C
        config["algorithm"], config["C"] = rule
    elif step is not None:  # logistic regression, with the estimator's own step
        config["algorithm"], config["learning_rate"] = "logistic", step
    else:  # a Perceptron learns on with its own step; any other with the perceptron's classic 1
        config["learning_rate"] = (
            float(estimator.eta0) if isinstance(estimator, Perceptron) else 1.0
        )
    if len(classes) > 2:
        config["multiclass"] = default_mode(estimator)
    config.update(options)
    # A rule chosen in options drops what the estimator's rule brought and the other refuses.
    if config.get("algorithm", "perceptron") == "perceptron" and "C" not in options:
        config.pop("C", None)
    learns_by_step = config.get("algorithm", "perceptron") in ("perceptron", "logistic")
    if not learns_by_step and "learning_rate" not in options:
        config.pop("learning_rate", None)
    return model_document.write(name, config, coef, intercept)


def passive_aggressive_rule(estimator: Any) -> tuple[str, float] | None:
    """The PA rule and ``C`` an estimator learns with: an ``SGDClassifier`` with
    ``learning_rate`` ``"pa1"`` or ``"pa2"`` (``eta0`` its ``C``), or a (deprecated)
    ``PassiveAggressiveClassifier`` (``loss="hinge"``: PA-I, else PA-II); None for any other."""
    if type(estimator).__name__ == "PassiveAggressiveClassifier":
        return ("pa1" if estimator.loss == "hinge" else "pa2"), float(estimator.C)
    if isinstance(estimator, SGDClassifier) and estimator.learning_rate in ("pa1", "pa2"):
        return str(estimator.learning_rate), float(estimator.eta0)
    return None


def _linear_parts(estimator: Any) -> tuple[np.ndarray, np.ndarray, list[int | str]]:
    """``coef_`` as float64 rows, ``intercept_`` one a row, and ``classes_`` as the service's
    labels; an error that says what is wrong with the estimator, else."""
    check_is_fitted(estimator)  # raises TypeError: not an estimator; NotFittedError: unfitted
    kind = type(estimator).__name__
    missing = [a for a in ("coef_", "intercept_", "classes_") if not hasattr(estimator, a)]
    if missing:
        raise SklearnBridgeError(
            f"{kind} has no {', '.join(missing)}: the service takes a fitted linear classifier "
            "(Perceptron, SGDClassifier, LinearSVC, LogisticRegression, ...), not a pipeline "
            "or any other model."
        )
    classes = [_label(c) for c in np.asarray(estimator.classes_).tolist()]
    raw = estimator.coef_
    coef = np.asarray(raw.toarray() if hasattr(raw, "toarray") else raw, dtype=np.float64)
    rows = 1 if len(classes) == 2 else len(classes)
    if coef.ndim == 1 and rows == 1:
        coef = coef.reshape(1, -1)
    if len(classes) < 2 or coef.ndim != 2 or coef.shape[0] != rows or coef.shape[1] < 1:
        raise SklearnBridgeError(
            f"{kind}.coef_ has the shape {coef.shape} for {len(classes)} classes; the service "
            f"takes ({rows}, n_features): one row for two classes, else one row a class."
        )
    try:
        intercept = np.broadcast_to(np.asarray(estimator.intercept_, dtype=np.float64), (rows,))
    except ValueError as e:
        shape = np.shape(estimator.intercept_)
        raise SklearnBridgeError(
            f"{kind}.intercept_ has the shape {shape}; coef_ has {rows} row(s)."
        ) from e
    if not (np.isfinite(coef).all() and np.isfinite(intercept).all()):
        raise SklearnBridgeError(f"{kind} has weights that are not finite numbers (NaN or inf).")
    return coef, intercept.copy(), classes


def _label(c: Any) -> int | str:
    """A class of ``classes_`` as the service's label: an integer (an integral float too) or
    a string."""
    if isinstance(c, str) and 1 <= len(c) <= 256:
        return str(c)
    whole: int | None = None
    if isinstance(c, numbers.Integral) and not isinstance(c, bool | np.bool_):
        whole = int(c)
    elif isinstance(c, numbers.Real) and not isinstance(c, bool) and float(c).is_integer():
        whole = int(float(c))
    if whole is not None and abs(whole) <= _LIMIT:
        return whole
    raise SklearnBridgeError(
        f"The class {c!r} cannot be a label of the service, which takes integers within "
        "+-2**53 and strings of 1 to 256 characters: fit the estimator on such labels "
        "(booleans are refused too)."
    )


# --- the service -> scikit-learn ---------------------------------------------------------------


def logistic_step(estimator: Any) -> float | None:
    """The step of an ``SGDClassifier(loss="log_loss", penalty=None, learning_rate="constant")``
    (its ``eta0``), which the service's logistic regression learns on as; None for any other."""
    if (
        isinstance(estimator, SGDClassifier)
        and estimator.loss == "log_loss"
        and estimator.penalty is None
        and estimator.learning_rate == "constant"
    ):
        return float(estimator.eta0)
    return None


def estimator_of(document: Mapping[str, Any]) -> Perceptron | SGDClassifier:
    """A fitted estimator that predicts what the document's model predicts: its served
    weights (the mean, for an averaged model) as ``coef_`` and ``intercept_``, its classes as
    ``classes_`` and its bias as ``fit_intercept``. A perceptron model gives a ``Perceptron``
    (its learning rate as ``eta0``); a PA model an ``SGDClassifier(loss="hinge",
    penalty=None, learning_rate=algorithm, eta0=C)`` and a logistic regression an
    ``SGDClassifier(loss="log_loss", penalty=None, learning_rate="constant",
    eta0=learning_rate)``, which learn on as the model does (binary and 'ovr': one
    ``partial_fit`` an example gives the service's weights), the latter with its
    ``predict_proba``; a learner scikit-learn has no estimator of (AROW) a ``Perceptron``,
    which predicts as it does."""
    config = document["config"]
    name = document.get("name")
    if config.get("n_features") is None:
        raise SklearnBridgeError(
            f"Model {name!r} has named features, hashed into 2**{config.get('hash_bits')} "
            "buckets: a scikit-learn estimator reads dense columns, and none hashes names as "
            "the service does. Only a dense model (n_features) can be exported to scikit-learn."
        )
    if len(config["classes"]) > 2 and config.get("multiclass") == "ovo":
        raise SklearnBridgeError(
            f"Model {name!r} is 'ovo': it predicts by one-vs-one votes, ties to the first "
            "class, which no scikit-learn estimator does (OneVsOneClassifier breaks ties by "
            "summed confidences). Only binary, 'ovr' and 'multiclass' models can be exported."
        )
    scores = model_document.served(document)
    fit_bias = bool(config["fit_bias"])
    algorithm = config.get("algorithm", "perceptron")
    estimator: Perceptron | SGDClassifier
    if algorithm in ("pa1", "pa2"):
        estimator = SGDClassifier(
            loss="hinge",
            penalty=None,
            learning_rate=algorithm,
            eta0=config["C"],
            fit_intercept=fit_bias,
        )
    elif algorithm == "logistic":
        estimator = SGDClassifier(
            loss="log_loss",
            penalty=None,
            learning_rate="constant",
            eta0=config["learning_rate"],
            fit_intercept=fit_bias,
        )
    else:  # the perceptron, or a learner no scikit-learn estimator learns as: it predicts alike
        estimator = Perceptron(fit_intercept=fit_bias, eta0=config.get("learning_rate", 1.0))
    estimator.coef_ = scores.coef
    estimator.intercept_ = scores.intercept
    estimator.classes_ = _classes(config["classes"])
    estimator.n_features_in_ = scores.coef.shape[1]
    estimator.t_ = float(scores.seen + 1)  # as a fit over `seen` examples leaves it
    return estimator


def _classes(labels: Sequence[int | str]) -> np.ndarray:
    """``classes_`` as scikit-learn keeps them: an array of the labels' own type (objects when
    integers and strings mix, so each label stays what it is)."""
    if all(isinstance(c, int) for c in labels) or all(isinstance(c, str) for c in labels):
        return np.asarray(labels)
    return np.asarray(labels, dtype=object)
