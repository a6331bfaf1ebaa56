"""``perceptron models``: list, show, create, delete, reset, export and import the models of a
running service, through ``perceptron_client.Client``.

Text for people by default, the service's own JSON with ``--json``; the exit code says what
happened (``EXIT``), so that scripts need not read either.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from perceptron_client import (
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    AuthError,
    Client,
    ConflictError,
    ModelInfo,
    ModelList,
    ModelSpec,
    NotFoundError,
    PerceptronError,
    UnavailableError,
)

# Exit codes: one per outcome a script may act on.
EXIT = {
    "done": 0,
    "refused": 1,  # the service refused the request (400, 413, 422) or failed (500)
    "usage": 2,  # wrong options, or an input file that cannot be read
    "not_found": 3,  # no such model (404)
    "conflict": 4,  # the model exists with another configuration (409)
    "auth": 5,  # no API key, or one without the admin role or this model (401, 403)
    "unavailable": 6,  # no answer at all, or 503 / 429: try again later
}
_BY_ERROR: list[tuple[type[PerceptronError], str]] = [
    (NotFoundError, "not_found"),
    (ConflictError, "conflict"),
    (AuthError, "auth"),
    (UnavailableError, "unavailable"),
]

DESCRIPTION = """\
Manage the models of a running service: list, show, create, delete, reset, export, import.

The service's URL comes from --url or PERCEPTRON_URL (default http://127.0.0.1:8000), its API
key from --api-key or PERCEPTRON_API_KEY (reading needs a 'predict' key, changing an 'admin'
one). --json prints the service's JSON answers (and errors as JSON on stderr).

examples:
  perceptron models list
  perceptron models create iris --classes setosa,versicolor,virginica --n-features 4
  perceptron models show iris --json
  perceptron models export iris -o iris.json && perceptron models import iris-copy iris.json
  perceptron models reset iris
  perceptron models delete iris
"""

EPILOG = """\
exit codes:
  0  done
  1  the service refused the request (invalid input) or failed
  2  wrong usage, or an input file that cannot be read
  3  no such model
  4  the model exists with another configuration
  5  no API key, or a key that may not do this
  6  the service cannot be reached or is unavailable: try again later
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The actions of ``perceptron models`` and their options."""
    common = argparse.ArgumentParser(add_help=False)
    c = common.add_argument_group("service")
    c.add_argument("--url", help=f"service URL (default: $PERCEPTRON_URL, else {DEFAULT_URL})")
    c.add_argument("--api-key", metavar="KEY", help="API key (default: $PERCEPTRON_API_KEY)")
    c.add_argument(
        "--timeout", metavar="S", type=float, default=DEFAULT_TIMEOUT, help="seconds a request (30)"
    )
    c.add_argument("--json", action="store_true", help="print the service's JSON answer")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(
        name: str, help: str, run: Callable[[Client, argparse.Namespace], None]
    ) -> argparse.ArgumentParser:
        about = help[:1].upper() + help[1:] + "."
        a = actions.add_parser(name, parents=[common], help=help, description=about)
        a.set_defaults(act=run)
        if name != "list":
            a.add_argument("name", metavar="NAME", help="the model's name")
        return a

    action("list", "list every model with its classes, version and counters", _list)
    action("show", "show a model's configuration, version and counters", _show)
    create = action("create", "create a model (nothing changes if it exists alike)", _create)
    spec = create.add_argument_group("configuration (fixed at creation; unset: the default)")
    spec.add_argument(
        "--classes",
        metavar="A,B,...",
        type=_classes,
        help="labels, comma-separated; integers stay integers (default: --classes=-1,1, "
        "with '=' when the first starts with '-')",
    )
    spec.add_argument("--n-features", metavar="N", type=int, help="dense dimension")
    spec.add_argument("--hash-bits", metavar="B", type=int, help="named features: 2**B weights")
    spec.add_argument("--multiclass", choices=["multiclass", "ovr", "ovo"], help="strategy")
    spec.add_argument("--learning-rate", metavar="R", type=float, help="step of an update")
    spec.add_argument("--margin", metavar="M", type=float, help="update within this margin")
    spec.add_argument("--averaged", action="store_true", default=None, help="averaged weights")
    spec.add_argument(
        "--no-fit-bias", dest="fit_bias", action="store_false", default=None, help="no bias"
    )
    spec.add_argument("--feedback-ttl-s", metavar="S", type=int, help="label wait, seconds")
    spec.add_argument(
        "--config", metavar="JSON", type=_object, help="the configuration as a JSON object"
    )
    delete = action("delete", "delete a model, its weights and counters", _delete)
    delete.add_argument(
        "--missing-ok", action="store_true", help="exit 0 when there is no such model"
    )
    action("reset", "zero a model's weights and counters", _reset)
    export = action("export", "write a model's export document (JSON)", _export)
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    imp = action("import", "create or overwrite a model from an export document", _import)
    imp.add_argument(
        "file", metavar="FILE", nargs="?", default="-", help="the document (default: stdin)"
    )


def run(args: argparse.Namespace) -> int:
    """``perceptron models ACTION``: its exit code (``EXIT``)."""
    url = args.url or os.environ.get("PERCEPTRON_URL") or DEFAULT_URL
    api_key = args.api_key or os.environ.get("PERCEPTRON_API_KEY") or None
    try:
        with Client(url, api_key=api_key, timeout=args.timeout) as client:
            args.act(client, args)
    except PerceptronError as e:
        kind = next((k for cls, k in _BY_ERROR if isinstance(e, cls)), "refused")
        if args.json:
            _err(json.dumps({"status": e.status, "code": e.code, "detail": e.detail}))
        else:
            _err(f"perceptron models: {e}")
        return EXIT[kind]
    except httpx.TransportError as e:
        _err(f"perceptron models: cannot reach {url} ({type(e).__name__}: {e})")
        return EXIT["unavailable"]
    except _Usage as e:
        _err(f"perceptron models: {e}")
        return EXIT["usage"]
    return EXIT["done"]


class _Usage(Exception):
    """Input the command cannot use (a file it cannot read)."""


# --- the actions ------------------------------------------------------------------------------


def _list(client: Client, args: argparse.Namespace) -> None:
    models = client.list_models()
    if args.json:
        _out(models.model_dump_json())
        return
    _out(_table(models))


def _show(client: Client, args: argparse.Namespace) -> None:
    _print_model(client.read_model(args.name), args.json)


def _create(client: Client, args: argparse.Namespace) -> None:
    config: dict[str, Any] = dict(args.config or {})
    for field in ModelSpec.model_fields:  # one --flag each (tests/test_models_command.py)
        value = getattr(args, field)
        if value is not None:
            config[field] = value
    _print_model(client.create_model(args.name, **config), args.json)


def _delete(client: Client, args: argparse.Namespace) -> None:
    try:
        client.delete_model(args.name)
    except NotFoundError:
        if not args.missing_ok:
            raise
        _out(json.dumps({"deleted": None}) if args.json else f"no model {args.name!r}")
        return
    _out(json.dumps({"deleted": args.name}) if args.json else f"deleted {args.name!r}")


def _reset(client: Client, args: argparse.Namespace) -> None:
    _print_model(client.reset_model(args.name), args.json)


def _export(client: Client, args: argparse.Namespace) -> None:
    text = json.dumps(client.export_model(args.name))
    if not args.output:
        _out(text)
        return
    Path(args.output).write_text(text + "\n", encoding="utf-8")
    if args.json:
        _out(json.dumps({"exported": args.name, "file": args.output}))
    else:
        _out(f"exported {args.name!r} to {args.output}")


def _import(client: Client, args: argparse.Namespace) -> None:
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
        document = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _Usage(f"cannot read an export document from {args.file}: {e}") from e
    if not isinstance(document, dict):
        raise _Usage(f"{args.file} holds no export document (not a JSON object)")
    _print_model(client.import_model(args.name, document), args.json)


# --- input and output ---------------------------------------------------------------------


def _classes(text: str) -> list[int | str]:
    """Comma-separated labels; those that are integers become integers."""
    labels = [t.strip() for t in text.split(",")]
    if any(not t for t in labels):
        raise argparse.ArgumentTypeError(f"empty label in {text!r}")
    return [int(t) if re.fullmatch(r"[+-]?\d+", t) else t for t in labels]


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from e
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return value


def _features(info: ModelInfo) -> str:
    c = info.config
    return str(c.n_features) if c.n_features is not None else f"named, 2^{c.hash_bits}"


def _table(models: ModelList) -> str:
    rows = [("NAME", "CLASSES", "FEATURES", "VERSION", "SEEN", "MISTAKES")]
    for m in models.models:
        classes = ",".join(map(str, m.config.classes))
        if len(classes) > 30:
            classes = classes[:27] + "..."
        counters = m.counters
        rows.append(
            (
                m.name,
                classes,
                _features(m),
                str(m.version),
                str(counters.seen),
                str(counters.mistakes),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def _print_model(info: ModelInfo, as_json: bool) -> None:
    if as_json:
        _out(info.model_dump_json())
        return
    created = datetime.fromtimestamp(info.created, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    c = info.config
    lines = [
        ("name", info.name),
        ("classes", ", ".join(map(str, c.classes))),
        ("features", _features(info)),
        ("multiclass", c.multiclass),
        ("fit_bias", str(c.fit_bias).lower()),
        ("learning_rate", str(c.learning_rate)),
        ("margin", str(c.margin)),
        ("averaged", str(c.averaged).lower()),
        ("feedback_ttl_s", str(c.feedback_ttl_s)),
        ("version", str(info.version)),
        ("created", created),
        *((name, str(value)) for name, value in info.counters.model_dump().items()),
    ]
    _out("\n".join(f"{k:<18}{v}" for k, v in lines))


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
