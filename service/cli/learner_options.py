"""The learners' options on the command line, read from the registry: ``--algorithm`` and one
flag per setting (``--learning-rate R``, ``--averaged``, ``--C C``...), and a learner's
configuration in a few words."""

from __future__ import annotations

import argparse
from typing import Any

from perceptron_client import LearnerList
from service.cli.checked_arguments import finite_number
from service.cli.models_output import out
from service.learner.registry import ALGORITHMS, LEARNERS, SETTINGS, learners_by_setting

# Every setting's flag: its name with '-' for '_' (``--learning-rate``, ``--C``)
FLAGS = {name: "--" + name.replace("_", "-") for name in SETTINGS}


def add_learner_options(group: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """``--algorithm`` and each learner setting's flag, each unset (None) unless given."""
    group.add_argument("--algorithm", choices=ALGORITHMS, help="the learner")
    users = learners_by_setting()
    for name, s in SETTINGS.items():
        help_text = f"{'/'.join(users[name])}: {s.text.split(': ', 1)[-1]}"
        if s.boolean:
            group.add_argument(
                FLAGS[name], dest=name, action="store_true", default=None, help=help_text
            )
        else:
            metavar = (s.short or name).upper()[:2]
            group.add_argument(
                FLAGS[name], dest=name, metavar=metavar, type=finite_number, help=help_text
            )


def given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The algorithm and the settings given on the command line."""
    names = ("algorithm", *SETTINGS)
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def describe(config: dict[str, Any]) -> str:
    """A configuration's learner in a few words: 'pa1 C=0.1', 'perceptron averaged lr=0.5',
    then its strategy when it has more than two classes."""
    learner = LEARNERS.get(config.get("algorithm", "perceptron"))
    said = learner.describe(config) if learner else str(config.get("algorithm"))
    return said + (f" {config['multiclass']}" if len(config.get("classes", ())) > 2 else "")


def print_learners(answer: LearnerList, as_json: bool) -> None:
    """``GET /learners``: a line per learner (its name, strategies, probabilities), then one per
    setting with its default."""
    if as_json:
        out(answer.model_dump_json(exclude_unset=True))
        return
    for learner in answer.learners:
        kinds = "binary" + "".join(f", {s}" for s in learner.strategies)
        said = ", probabilities" if learner.probabilities else ""
        out(f"{learner.name}: {learner.title} ({kinds}{said})")
        for s in learner.settings:
            default = str(s.default).lower() if isinstance(s.default, bool) else f"{s.default:g}"
            out(f"  {FLAGS.get(s.name, s.name)} (default {default}): {s.description}")
