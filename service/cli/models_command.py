"""``perceptron models``: list, show, create, delete, reset, export and import the models of a
running service, roll them back, and make them from or into scikit-learn estimators, through
``perceptron_client.Client`` (challengers, promotion, kept updates and undo:
``challengers_command.py``).

Text for people by default, the service's own JSON with ``--json``; the exit code says what
happened (``service.cli.exit_codes.Exit``, the same in every command), so that scripts need not read
either.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from perceptron_client import (
    Client,
    ModelList,
    ModelSpec,
    NotFoundError,
    PerceptronError,
)
from service.cli import challengers_command, models_sklearn, watch_command
from service.cli.checked_arguments import detector_arg, json_object, model_name
from service.cli.exit_codes import (
    CLIENT_CODES,
    Exit,
    add_service_options,
    epilog,
    exit_for,
    failure,
    file_error,
    service_target,
    unreachable,
    unwritable,
)
from service.cli.learner_options import add_learner_options, given_settings, print_learners
from service.cli.models_output import (
    Usage,
    columns,
    err,
    features_of,
    out,
    print_checkpoints,
    print_drift,
    print_metrics,
    print_model,
)
from service.learner.interface import STRATEGIES

DESCRIPTION = """\
Manage the models of a running service: list, show, create, delete, reset, export, import,
show their metrics and drift (or watch them change), list checkpoints, roll back, list kept
updates and undo them; add, list and delete challengers and promote one; make a model from
a fitted scikit-learn linear classifier, or write one as a fitted scikit-learn Perceptron.

The service's URL comes from --url or PERCEPTRON_URL (default http://127.0.0.1:8000), its API
key from --api-key or PERCEPTRON_API_KEY (reading needs a 'predict' key, changing an 'admin'
one). --json prints the service's JSON answers (and errors as JSON on stderr).

examples:
  perceptron models list
  perceptron models create iris --classes setosa,versicolor,virginica --n-features 4
  perceptron models show iris --json
  perceptron models metrics iris
  perceptron models watch iris
  perceptron models export iris -o iris.json && perceptron models import iris-copy iris.json
  perceptron models reset iris
  perceptron models checkpoints iris && perceptron models rollback iris --version 1200
  perceptron models add-challenger iris pa --algorithm pa1 --C 0.1 --from-served
  perceptron models challengers iris && perceptron models promote iris pa
  perceptron models updates iris && perceptron models undo iris --source labeller
  perceptron models from-sklearn iris-lr iris-lr.joblib
  perceptron models to-sklearn iris iris-perceptron.joblib
  perceptron models delete iris
"""

EPILOG = epilog(CLIENT_CODES)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The actions of ``perceptron models`` and their options."""
    common = argparse.ArgumentParser(add_help=False)
    c = common.add_argument_group("service")
    add_service_options(c)
    c.add_argument("--json", action="store_true", help="print the service's JSON answer")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(
        name: str, help: str, run: Callable[[Client, argparse.Namespace], None]
    ) -> argparse.ArgumentParser:
        about = help[:1].upper() + help[1:] + "."
        a = actions.add_parser(
            name,
            parents=[common],
            help=help,
            description=about,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        a.set_defaults(act=run)
        if name not in ("list", "learners"):
            a.add_argument("name", metavar="NAME", type=model_name, help="the model's name")
        return a

    action("list", "list every model with its classes, version and counters", _list)
    action("learners", "list the learners a model may name, with their settings", _learners)
    action("show", "show a model's configuration, version and counters", _show)
    _add_configuration(
        action("create", "create a model (nothing changes if it exists alike)", _create)
    )
    delete = action("delete", "delete a model, its weights and counters", _delete)
    delete.add_argument(
        "--missing-ok", action="store_true", help="exit 0 when there is no such model"
    )
    action("reset", "zero a model's weights and counters", _reset)
    export = action("export", "write a model's export document (JSON)", _export)
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    export.add_argument(
        "--checkpoints",
        action="store_true",
        help="carry the model's checkpoints too (each its whole weights; an import brings "
        "them back)",
    )
    action("checkpoints", "list a model's checkpoints and the versions kept", _checkpoints)
    action("drift", "show a model's drift detector and its last warnings and drifts", _drift)
    action("metrics", "show a model's mistake rates, confusion matrix and labels", _metrics)
    back = action("rollback", "make a model exactly what it was at a kept version", _rollback)
    to = back.add_mutually_exclusive_group(required=True)
    to.add_argument("--version", metavar="V", type=int, help="a version the model keeps")
    to.add_argument("--checkpoint", metavar="ID", type=int, help="a checkpoint's id")
    imp = action("import", "create or overwrite a model from an export document", _import)
    imp.add_argument(
        "file", metavar="FILE", nargs="?", default="-", help="the document (default: stdin)"
    )
    challengers_command.add_actions(action)
    models_sklearn.add_actions(action)
    watch_command.add_actions(action)


def _add_configuration(create: argparse.ArgumentParser) -> None:
    """``create``'s options: a model's configuration, each unset its default."""
    spec = create.add_argument_group("configuration (fixed at creation; unset: the default)")
    spec.add_argument(
        "--classes",
        metavar="A,B,...",
        type=_classes,
        help="labels, comma-separated; integers stay integers (default: -1,1)",
    )
    spec.add_argument("--n-features", metavar="N", type=int, help="dense dimension")
    spec.add_argument("--hash-bits", metavar="B", type=int, help="named features: 2**B weights")
    spec.add_argument("--multiclass", choices=STRATEGIES, help="strategy")
    spec.add_argument(
        "--no-fit-bias", dest="fit_bias", action="store_false", default=None, help="no bias"
    )
    spec.add_argument("--feedback-ttl-s", metavar="S", type=int, help="label wait, seconds")
    spec.add_argument(
        "--default-label",
        metavar="L",
        type=_label,
        help="learned when no label came within the wait (one of the classes)",
    )
    add_learner_options(spec)
    spec.add_argument(
        "--drift",
        metavar="DETECTOR",
        type=detector_arg,
        help="a drift detector on its mistakes: ddm or eddm (River's defaults, alerting), or a "
        'JSON object, e.g. \'{"detector": "ddm", "on_drift": "retrain", "warm_start": 100}\' '
        "(retrain: a background learner replaces the served one at a drift)",
    )
    spec.add_argument(
        "--config", metavar="JSON", type=json_object, help="the configuration as a JSON object"
    )


# Options whose value may start with '-' (a negative label), which argparse takes for an option
DASH_VALUES = ("--classes", "--default-label")


def join_dash_values(argv: list[str]) -> list[str]:
    """``--classes -1,1`` as ``--classes=-1,1``, the one form argparse reads when the value
    starts with '-' (any other than -h, which stays a request for help)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if arg in DASH_VALUES and re.fullmatch(r"-[^-].*", value) and value != "-h":
            out.append(f"{arg}={value}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def run(args: argparse.Namespace) -> int:
    """``perceptron models ACTION``: its exit code (``service.cli.exit_codes.Exit``)."""
    try:
        target = service_target(args)
    except ValueError as e:
        err(failure("models", str(e), args.json))
        return Exit.USAGE
    try:
        with Client(target.url, api_key=target.api_key, timeout=target.timeout) as client:
            try:
                args.act(client, args)
            except NotFoundError as e:
                if e.code != "model_not_found" or args.json:
                    raise
                err(f"perceptron models: {_not_found(client, args)}")
                return Exit.NOT_FOUND
    except PerceptronError as e:
        err(failure("models", e, args.json))
        return exit_for(e)
    except httpx.TransportError as e:
        err(failure("models", unreachable(target.url, e), args.json))
        return exit_for(e)
    except Usage as e:
        err(failure("models", str(e), args.json))
        return Exit.USAGE
    return Exit.DONE


def _not_found(client: Client, args: argparse.Namespace) -> str:
    """No model ``args.name``: in the command line's words, with the names it may have meant."""
    name: str = args.name
    try:
        names = [m.name for m in client.list_models().models]
    except (PerceptronError, httpx.TransportError):  # e.g. a key that may not list: no hint
        names = []
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    said = f"model {name!r} does not exist"
    if close:
        said += f"; did you mean {' or '.join(map(repr, close))}?"
    if args.action != "delete":
        said += (
            f"{'' if close else '.'} To create it: perceptron models create {name} "
            "--classes A,B,... (options: perceptron models create --help)"
        )
    return said


# --- the actions ------------------------------------------------------------------------------


def _list(client: Client, args: argparse.Namespace) -> None:
    models = client.list_models()
    if args.json:
        out(models.model_dump_json(exclude_unset=True))
        return
    out(_table(models))


def _learners(client: Client, args: argparse.Namespace) -> None:
    print_learners(client.learners(), args.json)


def _show(client: Client, args: argparse.Namespace) -> None:
    print_model(client.read_model(args.name), args.json)


def _create(client: Client, args: argparse.Namespace) -> None:
    given = dict(args.config or {})
    flags = {f: getattr(args, f) for f in ModelSpec.model_fields}  # one --flag each
    flags = {f: v for f, v in flags.items() if v is not None} | given_settings(args)
    both = sorted(f for f in set(given) & set(flags) if given[f] != flags[f])
    if both:  # (neither is the one meant more than the other)
        raise Usage(f"--config and --{both[0].replace('_', '-')} give {both[0]!r} two values")
    print_model(client.create_model(args.name, **(given | flags)), args.json)


def _delete(client: Client, args: argparse.Namespace) -> None:
    try:
        client.delete_model(args.name)
    except NotFoundError:
        if not args.missing_ok:
            raise
        out(json.dumps({"deleted": None}) if args.json else f"no model {args.name!r}")
        return
    out(json.dumps({"deleted": args.name}) if args.json else f"deleted {args.name!r}")


def _reset(client: Client, args: argparse.Namespace) -> None:
    print_model(client.reset_model(args.name), args.json)


def _checkpoints(client: Client, args: argparse.Namespace) -> None:
    print_checkpoints(client.checkpoints(args.name), args.json)


def _drift(client: Client, args: argparse.Namespace) -> None:
    print_drift(client.drift(args.name), args.json)


def _metrics(client: Client, args: argparse.Namespace) -> None:
    print_metrics(client.metrics(args.name), args.json)


def _rollback(client: Client, args: argparse.Namespace) -> None:
    done = client.rollback(args.name, args.version, args.checkpoint)
    if args.json:
        out(done.model_dump_json(exclude_unset=True))
        return
    out(
        f"{done.name} is at version {done.version} again; the checkpoint of what it was "
        f"before is {done.undo_checkpoint} (perceptron models rollback {done.name} "
        f"--checkpoint {done.undo_checkpoint} undoes this)"
    )


def _export(client: Client, args: argparse.Namespace) -> None:
    if args.output and (problem := unwritable(args.output)) is not None:
        raise Usage(problem)  # before asking the service for the document
    text = json.dumps(client.export_model(args.name, checkpoints=args.checkpoints))
    if not args.output:
        out(text)
        return
    try:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    except OSError as e:
        raise Usage(file_error(args.output, e, writing=True)) from e
    if args.json:
        out(json.dumps({"exported": args.name, "file": args.output}))
    else:
        out(f"exported {args.name!r} to {args.output}")


_IMPORT_USAGE = "perceptron models import NAME FILE (the model's name, then the export's file)"


def _import(client: Client, args: argparse.Namespace) -> None:
    if args.file == "-" and sys.stdin.isatty():
        raise Usage(f"no FILE given, and standard input is a terminal: {_IMPORT_USAGE}")
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
    except OSError as e:
        raise Usage(file_error(args.file, e)) from e
    except UnicodeDecodeError as e:
        raise Usage(f"cannot read {args.file}: not UTF-8 text ({e.reason})") from e
    if args.file == "-" and not text.strip():
        raise Usage(f"no FILE given, and nothing came on standard input: {_IMPORT_USAGE}")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise Usage(f"cannot read an export document from {args.file}: not JSON ({e})") from e
    if not isinstance(document, dict):
        raise Usage(f"{args.file} holds no export document (not a JSON object)")
    print_model(client.import_model(args.name, document), args.json)


# --- input and output ---------------------------------------------------------------------


def _classes(text: str) -> list[int | str]:
    """Comma-separated labels; those that are integers become integers."""
    labels = [t.strip() for t in text.split(",")]
    if any(not t for t in labels):
        raise argparse.ArgumentTypeError(f"empty label in {text!r}")
    return [int(t) if re.fullmatch(r"[+-]?\d+", t) else t for t in labels]


def _label(text: str) -> int | str:
    """One label; an integer stays an integer."""
    if "," in text:
        raise argparse.ArgumentTypeError(f"one label, not several: {text!r}")
    return _classes(text)[0]


def _table(models: ModelList) -> str:
    rows: list[tuple[str, ...]] = [("NAME", "CLASSES", "FEATURES", "VERSION", "SEEN", "MISTAKES")]
    for m in models.models:
        classes = ",".join(map(str, m.config.classes))
        if len(classes) > 30:
            classes = classes[:27] + "..."
        counters = m.counters
        rows.append(
            (
                m.name,
                classes,
                features_of(m),
                str(m.version),
                str(counters.seen),
                str(counters.mistakes),
            )
        )
    return columns(rows)
