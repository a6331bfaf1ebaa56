"""``perceptron models challengers``, ``add-challenger``, ``delete-challenger``, ``promote``,
``updates`` and ``undo``: a model's challengers and its promotion, and the updates it keeps
and their undo, through ``perceptron_client.Client``.

The same options, output and exit codes as every ``perceptron models`` action: a challenger
or checkpoint that does not exist exits 3, a conflict (an id taken, a promotion the model
cannot take) 4, a body the service refuses 1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from perceptron_client import ChallengerInfo, Client, ServedLearner
from service.cli.checked_arguments import challenger_id, finite_number, key_name
from service.cli.learner_options import add_learner_options, describe, given_settings
from service.cli.models_output import Usage, columns, out
from service.learner.interface import STRATEGIES

Action = Callable[[Client, argparse.Namespace], None]


def add_actions(action: Callable[[str, str, Action], argparse.ArgumentParser]) -> None:
    """The actions and their options, made by ``perceptron models``' own ``action``."""
    shown = action(
        "challengers",
        "list a model's challengers beside the served learner (or show one)",
        challengers,
    )
    shown.add_argument(
        "id", metavar="ID", nargs="?", type=challenger_id, help="show only this challenger"
    )
    add = action(
        "add-challenger",
        "add a challenger: a learner that learns every label of the model from now on",
        add_challenger,
    )
    add.add_argument(
        "id", metavar="ID", type=challenger_id, help="the challenger's id (letters, digits, -_.)"
    )
    learner = add.add_argument_group("its learner (unset: the model's where its rule uses it)")
    add_learner_options(learner)
    learner.add_argument(
        "--multiclass", choices=STRATEGIES, help="strategy (only the model's can be promoted)"
    )
    learner.add_argument(
        "--from-served",
        action="store_true",
        help="start from a copy of the served weights (else zeros)",
    )
    gone = action("delete-challenger", "remove a challenger, its weights and figures", delete)
    gone.add_argument("id", metavar="ID", type=challenger_id, help="the challenger's id")
    up = action("promote", "serve a challenger from the next request on", promote)
    up.add_argument("id", metavar="ID", type=challenger_id, help="the challenger to serve")
    up.add_argument(
        "--demote-as",
        metavar="ID",
        type=challenger_id,
        help="the id the learner that served keeps as a challenger (default served-<checkpoint>)",
    )
    kept = action("updates", "list the updates a model keeps, who caused each and when", updates)
    kept.add_argument("--from-version", metavar="V", type=int, help="from this version on")
    kept.add_argument("--limit", metavar="N", type=int, default=100, help="at most N (100)")
    undo_ = action("undo", "rebuild a model exactly without some of its kept updates", undo)
    undo_.add_argument(
        "--source",
        metavar="KEY",
        type=key_name,
        help="the updates of this API key's name ('': those of no key, made with keys off)",
    )
    undo_.add_argument(
        "--from-time", metavar="T", type=finite_number, help="made at or after T (Unix s)"
    )
    undo_.add_argument("--to-time", metavar="T", type=finite_number, help="made before T (Unix s)")


def challengers(client: Client, args: argparse.Namespace) -> None:
    if args.id is not None:
        one = client.challenger(args.name, args.id)
        out(one.model_dump_json(exclude_unset=True) if args.json else _table([one]))
        return
    now = client.challengers(args.name)
    if args.json:
        out(now.model_dump_json(exclude_unset=True))
        return
    out(
        f"{now.model}: {now.labels:,} labels. RATE: each learner's mistakes over the examples it "
        "saw since it joined (SINCE: the labels before); SERVED: the served learner's over "
        "the same examples"
    )
    out(_table([now.served, *now.challengers]))


def add_challenger(client: Client, args: argparse.Namespace) -> None:
    settings = given_settings(args)
    if args.multiclass is not None:
        settings["multiclass"] = args.multiclass
    added = client.add_challenger(args.name, args.id, args.from_served, **settings)
    out(
        added.model_dump_json(exclude_unset=True)
        if args.json
        else f"added {added.id!r}\n{_table([added])}"
    )


def delete(client: Client, args: argparse.Namespace) -> None:
    client.delete_challenger(args.name, args.id)
    out(json.dumps({"deleted": args.id}) if args.json else f"deleted challenger {args.id!r}")


def promote(client: Client, args: argparse.Namespace) -> None:
    done = client.promote(args.name, args.id, args.demote_as)
    if args.json:
        out(done.model_dump_json(exclude_unset=True))
        return
    out(
        f"{done.model} is served by {done.promoted!r} from now on; the learner that served is "
        f"the challenger {done.demoted!r}, and checkpoint {done.checkpoint} holds the model as "
        f"it was (perceptron models delete-challenger {done.model} {done.demoted}, then "
        f"perceptron models rollback {done.model} --checkpoint {done.checkpoint}, undoes it)"
    )


def updates(client: Client, args: argparse.Namespace) -> None:
    kept = client.updates(args.name, args.from_version, args.limit)
    if args.json:
        out(kept.model_dump_json(exclude_unset=True))
        return
    rows: list[tuple[str, ...]] = [("version", "source", "made (UTC)", "label")]
    for u in kept.updates:
        when = "-" if u.time is None else _utc(u.time)
        rows.append((str(u.version), "-" if u.source is None else u.source, when, str(u.label)))
    out(f"{kept.name}: version {kept.version}; {len(kept.updates)} of the kept updates")
    out(columns(rows))


def undo(client: Client, args: argparse.Namespace) -> None:
    if args.source is None and args.from_time is None and args.to_time is None:
        raise Usage("undo takes --source, --from-time or --to-time (any of them)")
    done = client.undo(args.name, args.source, args.from_time, args.to_time)
    if args.json:
        out(done.model_dump_json(exclude_unset=True))
        return
    said = f"{done.name}: {done.removed} updates left out, version {done.version} now"
    if done.undo_checkpoint is not None:
        said += f"; perceptron models rollback {done.name} --checkpoint {done.undo_checkpoint}"
        said += " undoes it"
    out(said)


def _table(learners: Sequence[ServedLearner | ChallengerInfo]) -> str:
    head = ("ID", "LEARNER", "SINCE", "SEEN", "MISTAKES", "RATE", "SERVED", "LAST 100")
    rows: list[tuple[str, ...]] = [(*head, "LAST 1000", "")]
    for one in learners:
        rates = one.mistake_rate
        since, served, note = "0", "-", ""
        if isinstance(one, ChallengerInfo):
            since = str(one.since)
            if one.served_mistakes is not None and one.seen:
                served = _rate(one.served_mistakes / one.seen)
            if not one.promotable:
                note = "not promotable"
        rows.append(
            (
                one.id,
                describe(one.config),
                since,
                str(one.seen),
                str(one.mistakes),
                _rate(rates.all),
                served,
                _rate(rates.last_100),
                _rate(rates.last_1000),
                note,
            )
        )
    return columns(rows)


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.3f}"


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")
