"""``perceptron models watch``: a model's event stream, what its dashboard shows, a line per event
as it comes (``Client.events``): its metrics, checkpoints, challengers and drift, each at once
and whenever it changes; ``--json`` one JSON object per line, ``{"event", "data"}``, the data
being the body of that kind's route. It runs until interrupted (quietly), ``--count`` events,
or the model's deletion (exit 3, as any action on a model that is not there).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime

from perceptron_client import (
    Challengers,
    Checkpoints,
    Client,
    DriftReport,
    EventData,
    ModelEvent,
    ModelMetrics,
)
from service.cli.checked_arguments import positive_int
from service.cli.models_output import out

Action = Callable[[Client, argparse.Namespace], None]


def add_actions(action: Callable[[str, str, Action], argparse.ArgumentParser]) -> None:
    """The action and its options, made by ``perceptron models``' own ``action``."""
    w = action(
        "watch",
        "print a model's metrics, checkpoints, challengers and drift as they change",
        watch,
    )
    w.add_argument(
        "--count", metavar="N", type=positive_int, help="end after N events (default: when stopped)"
    )


def watch(client: Client, args: argparse.Namespace) -> None:
    events = client.events(args.name)
    try:
        for n, event in enumerate(events, 1):
            out(_json(event) if args.json else _line(event))
            sys.stdout.flush()  # (a line as it comes, through a pipe too)
            if n == args.count:
                break
    except KeyboardInterrupt:
        pass  # (stopped: what was printed stands)
    finally:
        events.close()


def _json(event: ModelEvent) -> str:
    data = event.data.model_dump(mode="json", exclude_unset=True)
    return json.dumps({"event": event.kind, "data": data}, separators=(",", ":"))


def _line(event: ModelEvent) -> str:
    now = datetime.now(UTC).strftime("%H:%M:%S")
    return f"{now} {event.kind:<11} {_summary(event.data)}"


def _summary(data: EventData) -> str:
    if isinstance(data, ModelMetrics):
        c, rate = data.counters, data.mistake_rate.last_100
        recent = "-" if rate is None else f"{rate:.3f}"
        return (
            f"version {data.version:,}; {c.seen:,} labelled, {c.mistakes:,} wrong; "
            f"last 100 {recent}"
        )
    if isinstance(data, Checkpoints):
        return (
            f"{len(data.checkpoints)} kept; every version from {data.restorable_from:,} on "
            "can be restored"
        )
    if isinstance(data, Challengers):
        each = [f"{c.id} {c.mistakes:,} wrong of {c.seen:,}" for c in data.challengers]
        return "; ".join(each) or "none"
    return _drift(data)


def _drift(report: DriftReport) -> str:
    states = ", ".join(f"{x.learner} {x.state}" for x in report.learners) or "no detector"
    if not report.events:
        return states
    e = report.events[-1]
    done = f", {e.action} after version {e.version:,}" if e.version is not None else ""
    return f"{states}; last: {e.learner} {e.kind} at its example {e.at_seen:,}{done}"
