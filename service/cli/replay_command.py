"""The command line of ``perceptron replay``: its options, and running it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import httpx

from perceptron_client import PerceptronError
from service.cli.checked_arguments import (
    detector_arg,
    model_name,
    non_negative_int,
    positive_int,
    positive_number,
)
from service.cli.exit_codes import (
    Exit,
    add_service_options,
    exit_for,
    failure,
    file_error,
    service_target,
    unreachable,
    unwritable,
)
from service.replay.curve import write_curve
from service.replay.datasets import DATASETS, Dataset, load_csv, load_dataset
from service.replay.libsvm import load_libsvm
from service.replay.options import ReplayOptions, StreamOptions
from service.replay.progress import Progress
from service.replay.replay_error import ReplayError
from service.replay.stream import replay
from service.replay.summary import MODES, Summary

DESCRIPTION = """\
Stream a dataset through a running service and report its mistakes.

Each example is predicted (POST /predict) and its true label sent as feedback (POST /feedback),
or sent to POST /learn with --mode learn; in batches with --batch N. The model is created when
missing: dense, n_features and classes from the data. The summary counts examples and the
mistakes the service reported.

examples:
  perceptron replay --dataset breast_cancer --curve curve.png
  perceptron replay --dataset digits --multiclass ovr --mode learn --batch 100
  perceptron replay --csv data.csv --label-column y --delay-labels 5 --concurrency 4
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``perceptron replay``."""
    d = p.add_argument_group("data: one of --dataset, --csv, --libsvm")
    source = d.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", metavar="NAME", help=f"bundled: {', '.join(DATASETS)}")
    source.add_argument("--csv", metavar="FILE", help="numeric CSV; header optional")
    source.add_argument("--libsvm", metavar="FILE", help="LIBSVM / svmlight file")
    d.add_argument(
        "--label-column", metavar="COL", help="CSV label column: name or index (default: last)"
    )
    d.add_argument(
        "--shuffle", metavar="SEED", type=non_negative_int, help="shuffle with this seed"
    )
    d.add_argument("--limit", metavar="N", type=positive_int, help="replay only the first N")
    _model_arguments(p.add_argument_group("model"))
    s = p.add_argument_group("stream")
    s.add_argument(
        "--mode",
        choices=MODES,
        default="predict",
        help="predict then feedback (default), or /learn",
    )
    s.add_argument("--batch", metavar="N", type=positive_int, default=1, help="examples a request")
    s.add_argument(
        "--concurrency", metavar="K", type=positive_int, default=1, help="concurrent clients"
    )
    s.add_argument(
        "--delay-labels",
        "--delay",
        dest="delay",
        metavar="N",
        type=non_negative_int,
        default=0,
        help="send each label N examples after its prediction (predict mode)",
    )
    s.add_argument(
        "--rate",
        metavar="R",
        type=positive_number,
        help="at most R examples a second (to watch it on the dashboard)",
    )
    o = p.add_argument_group("output")
    o.add_argument("--curve", metavar="FILE.png", help="write the learning curve to a PNG")
    o.add_argument(
        "--window", metavar="N", type=positive_int, default=100, help="moving window of the curve"
    )
    o.add_argument("--json", action="store_true", help="print the summary as JSON")
    o.add_argument("--quiet", action="store_true", help="no progress bar")
    add_service_options(p.add_argument_group("service"))


def _model_arguments(m: argparse._ArgumentGroup) -> None:
    """The options that name the model, and make it when it is missing."""
    m.add_argument(
        "--model", metavar="NAME", type=model_name, help="model name (default: the dataset's name)"
    )
    m.add_argument(
        "--multiclass",
        choices=["multiclass", "ovr", "ovo"],
        default="multiclass",
        help="strategy for more than two classes, when the model is created",
    )
    m.add_argument("--reset", action="store_true", help="delete the model first if it exists")
    m.add_argument(
        "--drift",
        metavar="DETECTOR",
        type=detector_arg,
        help="a model the replay creates watches its mistakes with this drift detector: ddm "
        'or eddm, or its configuration as a JSON object (\'{"detector": "ddm", "on_drift": '
        '"retrain"}\' retrains at a drift); its detections and retrains are drawn on --curve',
    )


def _load(args: argparse.Namespace) -> Dataset:
    path = args.csv or args.libsvm
    try:
        if args.dataset:
            data = load_dataset(args.dataset)
        elif args.csv:
            data = load_csv(args.csv, args.label_column)
        else:
            data = load_libsvm(args.libsvm)
    except OSError as e:
        raise ReplayError(file_error(path or e.filename or "", e)) from e
    if args.shuffle is not None:
        data = data.shuffled(args.shuffle)
    if args.limit is not None:
        data = data.head(args.limit)
    return data


def _options(args: argparse.Namespace) -> ReplayOptions:
    target = service_target(args)
    stream = StreamOptions(
        mode=args.mode,
        batch=args.batch,
        concurrency=args.concurrency,
        delay=args.delay,
        rate=args.rate,
    )
    return ReplayOptions(
        url=target.url,
        api_key=target.api_key,
        timeout=target.timeout,
        model=args.model,
        multiclass=args.multiclass,
        reset=args.reset,
        drift=args.drift,
        stream=stream,
    )


def _misuse(args: argparse.Namespace) -> str | None:
    """What is wrong with these options together, if anything."""
    if args.label_column is not None and not args.csv:
        return "--label-column applies to --csv only."
    if args.curve:
        return unwritable(args.curve)  # before the replay, not after it
    return None


def _notice(progress: Progress | None) -> Callable[[str], None]:
    """Where the replay's notices go: stderr, above the progress bar when one is drawn."""

    def say(text: str) -> None:
        line = f"perceptron replay: {text}"
        if progress is not None:
            progress.note(line)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    return say


def _replay(args: argparse.Namespace, options: ReplayOptions) -> Summary:
    """Load the data, replay it, draw the curve when asked."""
    data = _load(args)
    progress = None if args.quiet else Progress(len(data), options.model or data.name)
    try:  # a model trained before is trained on: said on stderr, before the first example
        summary = replay(data, options, progress=progress, notice=_notice(progress))
    finally:
        if progress is not None:
            progress.close()  # so that an error's message goes on a line of its own
    if args.curve:
        try:
            write_curve(summary, args.curve, args.window)
        except OSError as e:
            raise ReplayError(file_error(args.curve, e, writing=True)) from e
    return summary


def _print(summary: Summary, args: argparse.Namespace) -> None:
    if args.json:
        out = summary.as_dict()
        if args.curve:
            out["curve"] = str(args.curve)
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        sys.stdout.write(summary.text())
        if args.curve:
            sys.stdout.write(f"{'curve':<14}{args.curve}\n")
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    """``perceptron replay``: its exit code (``service.cli.exit_codes.Exit``)."""
    err = sys.stderr
    try:
        if (problem := _misuse(args)) is not None:
            raise ValueError(problem)
        options = _options(args)  # checked when made (options.py), before any data is read
    except ValueError as e:
        err.write(failure("replay", str(e), args.json) + "\n")
        return Exit.USAGE
    try:
        summary = _replay(args, options)
    except (ReplayError, OSError) as e:
        err.write(failure("replay", str(e), args.json) + "\n")
        return Exit.USAGE
    except PerceptronError as e:
        said = e if args.json else f"the service answered {e}"
        err.write(failure("replay", said, args.json) + "\n")
        return exit_for(e)
    except httpx.TransportError as e:
        err.write(failure("replay", unreachable(options.url, e), args.json) + "\n")
        return exit_for(e)
    _print(summary, args)
    return Exit.DONE
