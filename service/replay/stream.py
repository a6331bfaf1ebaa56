"""The replay itself: stream a dataset through a running service and count the mistakes.

Each example is sent as a prediction whose true label follows as feedback (the default), or
to /learn (``mode="learn"``); one at a time or in batches, from one or more concurrent
clients, with labels optionally arriving ``delay`` examples late.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import httpx

from ..client import (
    DEFAULT_URL,
    AsyncClient,
    NotFoundError,
    UnavailableError,
    error_from_item,
)
from .datasets import Dataset
from .errors import ReplayError
from .progress import Progress
from .summary import MODES, Mode, Summary

T = TypeVar("T")


async def _retrying(call: Callable[[], Awaitable[T]], retries: int) -> T:
    """Retry an answer 503 (store or model busy), waiting as the service asks."""
    for attempt in range(retries):
        try:
            return await call()
        except UnavailableError as e:
            await asyncio.sleep(min(e.retry_after or 0.5, 5.0) * (1 + attempt) / 2)
    return await call()


async def ensure_model(
    client: AsyncClient, name: str, data: Dataset, multiclass: str = "multiclass"
) -> bool:
    """Create the model for ``data`` unless one fits already; True when created."""
    try:
        info = await client.read_model(name)
    except NotFoundError:
        config: dict[str, Any] = {"classes": data.classes, "n_features": data.n_features}
        if len(data.classes) > 2:
            config["multiclass"] = multiclass
        await client.create_model(name, **config)
        return True
    have = info.config
    if have.n_features != data.n_features:
        raise ReplayError(
            f"Model {name!r} exists with n_features={have.n_features}, the data has "
            f"{data.n_features}: choose another --model, or --reset it."
        )
    missing = [c for c in data.classes if c not in have.classes]
    if missing:
        raise ReplayError(
            f"Model {name!r} exists with classes {have.classes}, which lack {missing}: "
            "choose another --model, or --reset it."
        )
    return False


async def replay_async(
    client: AsyncClient,
    model: str,
    data: Dataset,
    *,
    mode: Mode = "predict",
    batch: int = 1,
    concurrency: int = 1,
    delay: int = 0,
    rate: float | None = None,
    retries: int = 5,
    progress: Progress | None = None,
) -> Summary:
    """Stream ``data`` through ``model`` (which must exist) and count the mistakes.

    ``delay`` (predict mode): each true label is sent once ``delay`` more predictions have
    been answered, as labels arrive late in a real stream; the last ones at the end.
    ``rate``: at most that many examples a second (to watch a replay on the dashboard).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    if batch < 1 or concurrency < 1 or delay < 0 or (rate is not None and rate <= 0):
        raise ValueError("batch and concurrency must be >= 1, delay >= 0, rate > 0")
    if delay and mode != "predict":
        raise ValueError("delay applies to predict mode: /learn takes the label at once")
    n = len(data)
    outcomes: list[bool | None] = [None] * n
    done = [0, 0]  # labelled examples, mistakes

    def record(i: int, mistake: bool) -> None:
        outcomes[i] = mistake
        done[0] += 1
        done[1] += mistake

    def tick() -> None:
        if progress is not None:
            progress.update(done[0], done[1])

    chunks = iter([list(range(s, min(s + batch, n))) for s in range(0, n, batch)])
    pending: deque[tuple[int, str]] = deque()  # (example, prediction_id) awaiting its label

    async def send_feedback(items: list[tuple[int, str]]) -> None:
        if batch == 1:
            for i, pid in items:
                r = await _retrying(partial(client.feedback, pid, data.labels[i]), retries)
                record(i, r.mistake)
        else:
            pairs = [(pid, data.labels[i]) for i, pid in items]
            rb = await _retrying(partial(client.feedback_batch, pairs), retries)
            for (i, _), result in zip(items, rb.results, strict=True):
                if result.error is not None:
                    raise error_from_item(result.error)
                record(i, bool(result.mistake))
        tick()

    async def step(chunk: list[int]) -> None:
        rows = [data.rows[i] for i in chunk]
        labels = [data.labels[i] for i in chunk]
        if mode == "learn":
            if batch == 1:
                r = await _retrying(partial(client.learn, model, rows[0], labels[0]), retries)
                record(chunk[0], r.mistake)
            else:
                rb = await _retrying(partial(client.learn_batch, model, rows, labels), retries)
                for i, mistake in zip(chunk, rb.mistakes, strict=True):
                    record(i, mistake)
            tick()
            return
        if batch == 1:
            p = await _retrying(partial(client.predict, model, rows[0]), retries)
            pending.append((chunk[0], p.prediction_id))
        else:
            pb = await _retrying(partial(client.predict_batch, model, rows), retries)
            pending.extend(zip(chunk, (p.prediction_id for p in pb.predictions), strict=True))
        # Take the overdue labels before any await: concurrent workers share ``pending``.
        due = [pending.popleft() for _ in range(max(0, len(pending) - delay))]
        if due:
            await send_feedback(due)

    sent = [0]

    async def pace(examples: int) -> None:
        if rate:
            due = start + sent[0] / rate
            sent[0] += examples
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)

    async def worker() -> None:
        for chunk in chunks:  # one iterator shared by the workers: each chunk goes once
            await pace(len(chunk))
            await step(chunk)

    start = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    rest = list(pending)
    groups = iter([rest[s : s + batch] for s in range(0, len(rest), batch)])

    async def flusher() -> None:
        for group in groups:
            await send_feedback(group)

    await asyncio.gather(*(flusher() for _ in range(concurrency)))
    seconds = time.monotonic() - start
    if progress is not None:
        progress.update(done[0], done[1], final=True)
    missing = [i for i, o in enumerate(outcomes) if o is None]
    if missing:  # cannot happen: every example is predicted, then labelled once
        raise AssertionError(f"{len(missing)} examples got no answer")
    return Summary(model, mode, batch, concurrency, delay, seconds, [bool(o) for o in outcomes])


def replay(
    data: Dataset,
    *,
    url: str = DEFAULT_URL,
    api_key: str | None = None,
    model: str | None = None,
    multiclass: str = "multiclass",
    reset: bool = False,
    mode: Mode = "predict",
    batch: int = 1,
    concurrency: int = 1,
    delay: int = 0,
    rate: float | None = None,
    timeout: float = 30.0,
    progress: Progress | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Summary:
    """Create the model when missing (after deleting it with ``reset``), then replay;
    ``transport`` (httpx's) is for tests and custom networking."""
    name = model or data.name

    async def run() -> Summary:
        async with AsyncClient(
            url, api_key, timeout, max_connections=concurrency * 2, transport=transport
        ) as client:
            if reset:
                try:
                    await client.delete_model(name)
                except NotFoundError:
                    pass
            await ensure_model(client, name, data, multiclass)
            return await replay_async(
                client,
                name,
                data,
                mode=mode,
                batch=batch,
                concurrency=concurrency,
                delay=delay,
                rate=rate,
                progress=progress,
            )

    return asyncio.run(run())
