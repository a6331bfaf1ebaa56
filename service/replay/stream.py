"""The replay itself: stream a dataset through a running service and count the mistakes.

Each example is sent as a prediction whose true label follows as feedback (the default), or
to /learn (``mode="learn"``); one at a time or in batches, from one or more concurrent
clients, with labels optionally arriving ``delay`` examples late (``StreamOptions``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from perceptron_client import AsyncClient, InvalidInputError, NotFoundError
from service.learner.config import checked_drift, label_key
from service.replay.datasets import Dataset
from service.replay.options import ReplayOptions, StreamOptions
from service.replay.progress import Progress
from service.replay.replay_error import ReplayError
from service.replay.sender import Sender
from service.replay.summary import Before, Summary
from service.replay.tally import Tally

T = TypeVar("T")


async def open_model(
    client: AsyncClient,
    name: str,
    data: Dataset,
    multiclass: str = "multiclass",
    drift: dict[str, Any] | None = None,
) -> Before | None:
    """Create the model for ``data`` (None), with ``drift`` its drift detector, unless one
    fits already (with that detector, when ``drift`` is given): then what it has learned
    before (``Before``)."""
    try:
        info = await client.read_model(name)
    except NotFoundError:
        if len(data.classes) < 2:
            raise ReplayError(_one_class(data)) from None
        config: dict[str, Any] = {"classes": data.classes, "n_features": data.n_features}
        if len(data.classes) > 2:
            config["multiclass"] = multiclass
        if drift is not None:
            config["drift"] = drift
        await client.create_model(name, **config)
        return None
    have = info.config
    if have.n_features != data.n_features:
        raise ReplayError(
            f"Model {name!r} exists with n_features={have.n_features}, the data has "
            f"{data.n_features}: choose another --model, or --reset it."
        )
    known = set(map(label_key, have.classes))
    missing = [c for c in data.classes if label_key(c) not in known]
    if missing:
        raise ReplayError(
            f"Model {name!r} exists with classes {have.classes}, which lack {missing}: "
            "choose another --model, or --reset it."
        )
    if drift is not None and have.drift != checked_drift(drift):
        raise ReplayError(
            f"Model {name!r} exists with drift detector {have.drift or 'none'}: --drift is "
            "that of a model the replay creates; choose another --model, or --reset it."
        )
    return Before(
        examples=info.counters.seen,
        mistakes=info.counters.mistakes,
        version=info.version,
        drift_warnings=info.counters.drift_warnings,
        drifts=info.counters.drifts,
        multiclass=have.multiclass if len(have.classes) > 2 else None,
    )


async def ensure_model(
    client: AsyncClient, name: str, data: Dataset, multiclass: str = "multiclass"
) -> bool:
    """Create the model for ``data`` unless one fits already; True when created."""
    return await open_model(client, name, data, multiclass) is None


def _groups(items: Sequence[T], size: int) -> list[list[T]]:
    """Consecutive groups of ``size`` items (the last one shorter)."""
    return [list(items[s : s + size]) for s in range(0, len(items), size)]


async def _each(groups: list[list[T]], send: Callable[[list[T]], Awaitable[None]], k: int) -> None:
    """``send`` every group once, from ``k`` concurrent tasks taking them in order."""
    queue = iter(groups)  # one iterator shared by the tasks: each group goes once

    async def task() -> None:
        for group in queue:
            await send(group)

    await asyncio.gather(*(task() for _ in range(k)))


@dataclass
class Pace:
    """At most ``rate`` examples a second (no limit when None), counted from ``start``."""

    rate: float | None
    start: float
    sent: int = 0

    async def wait(self, examples: int) -> None:
        """Wait until these examples are due, after those sent before them."""
        if not self.rate:
            return
        due = self.start + self.sent / self.rate
        self.sent += examples
        if (wait := due - time.monotonic()) > 0:
            await asyncio.sleep(wait)


async def replay_async(
    client: AsyncClient,
    model: str,
    data: Dataset,
    options: StreamOptions | None = None,
    *,
    progress: Progress | None = None,
) -> Summary:
    """Stream ``data`` through ``model`` (which must exist) and count the mistakes."""
    options = options or StreamOptions()
    tally = Tally(len(data), progress)
    sender = Sender(client, model, data, options, tally)
    start = time.monotonic()
    pace = Pace(options.rate, start)

    async def paced(chunk: list[int]) -> None:
        await pace.wait(len(chunk))
        await sender.send(chunk)

    k = options.concurrency
    await _each(_groups(range(len(data)), options.batch), paced, k)
    await _each(_groups(sender.take_pending(), options.batch), sender.feedback, k)
    seconds = time.monotonic() - start
    outcomes = tally.outcomes()
    return Summary(
        model=model,
        mode=options.mode,
        batch=options.batch,
        concurrency=options.concurrency,
        delay=options.delay,
        seconds=seconds,
        outcomes=outcomes,
    )


async def detections(
    client: AsyncClient, name: str, before: int, examples: int
) -> list[tuple[int, str]] | None:
    """The model's drift detector's events among the replay's ``examples`` (the model had
    seen ``before``), each at the example of the replay it came, its kind "warning", "drift",
    or "retrained" (a drift at which the background learner replaced the served one); None
    without a detector. (The model keeps its last DRIFT_EVENTS_KEPT: a longer replay shows its
    last ones.)"""
    report = await client.drift(name)
    if report.drift is None:
        return None
    return [
        (e.at_seen - before, "retrained" if e.action == "retrained" else e.kind)
        for e in report.events
        if e.learner == "served" and before < e.at_seen <= before + examples
    ]


def replay(
    data: Dataset,
    options: ReplayOptions | None = None,
    *,
    progress: Progress | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    notice: Callable[[str], None] | None = None,
) -> Summary:
    """Create the model when missing (after deleting it with ``options.reset``), then replay.

    A model that has learned before is trained on from where it is: ``notice`` gets a line
    that says so before the first example is sent, and the summary's ``before`` what it had.
    ``transport`` (httpx's) is for tests and custom networking."""
    options = options or ReplayOptions()
    name = options.model or data.name

    if options.reset and len(data.classes) < 2:  # (before the model is deleted)
        raise ReplayError(_one_class(data))

    async def run() -> Summary:
        async with AsyncClient(
            options.url,
            options.api_key,
            options.timeout,
            max_connections=options.stream.concurrency * 2,
            transport=transport,
        ) as client:
            if options.reset:
                try:
                    await client.delete_model(name)
                except NotFoundError:
                    pass
            made = await open_model(client, name, data, options.multiclass, options.drift)
            before = made or Before()
            if before.trained and notice is not None:
                notice(before.notice(name, options.multiclass))
            try:
                summary = await replay_async(client, name, data, options.stream, progress=progress)
            except InvalidInputError as e:
                if e.code != "batch_too_large":
                    raise
                gone = ""
                if made is None:  # (a model this replay made: it goes again)
                    await client.delete_model(name)
                    gone = f"; model {name!r}, which the replay made, was deleted"
                raise ReplayError(
                    f"--batch {options.stream.batch} is more examples a request than the "
                    f"service takes ({e.detail}){gone}."
                ) from e
            summary.before = before
            summary.drift = await detections(client, name, before.examples, summary.examples)
            counters = (await client.read_model(name)).counters
            summary.drift_counts = (
                counters.drift_warnings - before.drift_warnings,
                counters.drifts - before.drifts,
            )
            return summary

    return asyncio.run(run())


def _one_class(data: Dataset) -> str:
    return (
        f"The labels of {data.name!r} are all {data.classes[0]!r}: a model the replay creates "
        "needs two classes at least."
    )
