"""``perceptron models from-sklearn`` and ``to-sklearn``: a model from a fitted scikit-learn
linear classifier saved with joblib, and a model saved as a fitted scikit-learn ``Perceptron``
(or ``SGDClassifier``, a passive-aggressive model),
through ``Client.from_sklearn`` and ``Client.to_sklearn`` (``perceptron_client.sklearn_bridge``
has the mapping).

What a file or the bridge refuses is wrong usage (exit 2), said in one line: a file that holds
no estimator, an estimator or a model the other side cannot take, scikit-learn missing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, TypeVar

from perceptron_client import Client
from service.cli.estimator_files import EstimatorFileError, dump_estimator, load_estimator
from service.cli.exit_codes import unwritable
from service.cli.learner_options import add_learner_options
from service.cli.models_output import Usage, out, print_model
from service.learner.registry import SETTINGS

Action = Callable[[Client, argparse.Namespace], None]
T = TypeVar("T")

# What from-sklearn may choose of the model; the rest comes from the estimator.
OPTIONS = ("multiclass", "feedback_ttl_s", "algorithm", *SETTINGS)

FROM_SKLEARN = """\
Create a model (or overwrite one of the same configuration) from a fitted scikit-learn linear
classifier (Perceptron, SGDClassifier, LinearSVC, LogisticRegression, ...) saved with
joblib.dump: it predicts what the estimator predicts, and learns on from there with the
perceptron's rule, or PA-I / PA-II's for an SGDClassifier with learning_rate 'pa1' or 'pa2'
(its eta0 the model's C). Its classes, features and bias are the estimator's.

Loading FILE runs code from it, as any pickle does: load only files you made or trust.
"""
TO_SKLEARN = """\
Write a model as a fitted sklearn.linear_model.Perceptron; a passive-aggressive model as an
SGDClassifier(loss='hinge', penalty=None, learning_rate='pa1'|'pa2', eta0=C), a logistic one
as an SGDClassifier(loss='log_loss', penalty=None, learning_rate='constant', eta0=its
learning_rate) (joblib.dump; joblib.load reads it), that predicts what the service predicts:
a dense model, binary, 'ovr' or 'multiclass'.
"""


def add_actions(action: Callable[[str, str, Action], argparse.ArgumentParser]) -> None:
    """The two actions and their options, made by ``perceptron models``' own ``action``."""
    warm = action(
        "from-sklearn",
        "create a model from a fitted scikit-learn linear classifier (a joblib file)",
        from_sklearn,
    )
    _describe(warm, FROM_SKLEARN)
    warm.add_argument("file", metavar="FILE", help="the estimator, saved with joblib.dump")
    spec = warm.add_argument_group("the model (unset: as the estimator was trained)")
    spec.add_argument("--multiclass", choices=["ovr", "multiclass"], help="how it learns on")
    spec.add_argument("--feedback-ttl-s", metavar="S", type=int, help="label wait, seconds")
    add_learner_options(spec)
    cold = action(
        "to-sklearn",
        "write a model as a fitted scikit-learn Perceptron or SGDClassifier (a joblib file)",
        to_sklearn,
    )
    _describe(cold, TO_SKLEARN)
    cold.add_argument("file", metavar="FILE", help="where to write it")


def _describe(parser: argparse.ArgumentParser, text: str) -> None:
    """An action's description, printed as written (its line breaks kept)."""
    parser.description, parser.formatter_class = text, argparse.RawDescriptionHelpFormatter


def from_sklearn(client: Client, args: argparse.Namespace) -> None:
    estimator = _refused_as_usage(load_estimator, args.file)
    options = {k: getattr(args, k) for k in OPTIONS if getattr(args, k) is not None}
    info = _refused_as_usage(client.from_sklearn, args.name, estimator, **options)
    print_model(info, args.json)


def to_sklearn(client: Client, args: argparse.Namespace) -> None:
    if (problem := unwritable(args.file)) is not None:
        raise Usage(problem)  # before asking the service for the model
    estimator = _refused_as_usage(client.to_sklearn, args.name)
    _refused_as_usage(dump_estimator, estimator, args.file)
    classes, n_features = estimator.classes_.tolist(), int(estimator.n_features_in_)
    kind = type(estimator).__name__
    if args.json:
        said = {"exported": args.name, "file": args.file, "estimator": kind}
        out(json.dumps({**said, "classes": classes, "n_features": n_features}))
        return
    out(
        f"wrote {args.name!r} to {args.file}: a fitted sklearn.linear_model.{kind} "
        f"({len(classes)} classes, {n_features} features)"
    )


def _refused_as_usage(do: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``do(...)``; what it refuses, as wrong usage. The bridge's refusals are ValueErrors
    (NotFittedError too), something that is not an estimator a TypeError, scikit-learn
    missing an ImportError."""
    try:
        return do(*args, **kwargs)
    except (EstimatorFileError, ImportError, TypeError, ValueError) as e:
        raise Usage(str(e)) from e
