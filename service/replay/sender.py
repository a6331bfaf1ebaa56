"""The requests of a replay: examples to /predict or /learn, true labels to /feedback.

One request per example or one per batch (``StreamOptions.batch``); a 503 is sent again as
the service asks. Each answer's outcome goes to the tally.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import ParamSpec, TypeVar

from perceptron_client import AsyncClient, Label, UnavailableError, error_from_item
from service.replay.datasets import Dataset
from service.replay.options import StreamOptions
from service.replay.tally import Tally

P = ParamSpec("P")
T = TypeVar("T")


async def _retrying(call: Callable[[], Awaitable[T]], retries: int) -> T:
    """Retry an answer 503 (store or model busy), waiting as the service asks."""
    for attempt in range(retries):
        try:
            return await call()
        except UnavailableError as e:
            await asyncio.sleep(min(e.retry_after or 0.5, 5.0) * (1 + attempt) / 2)
    return await call()


@dataclass
class Sender:
    """Sends a dataset's examples to one model, and their labels, as ``options`` say."""

    client: AsyncClient
    model: str
    data: Dataset
    options: StreamOptions
    tally: Tally
    # (example, prediction_id) of the predictions awaiting their label, oldest first
    pending: deque[tuple[int, str]] = field(default_factory=deque)

    async def _call(
        self, method: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await _retrying(partial(method, *args, **kwargs), self.options.retries)

    def _examples(self, chunk: list[int]) -> tuple[list[list[float]], list[Label]]:
        return [self.data.rows[i] for i in chunk], [self.data.labels[i] for i in chunk]

    async def send(self, chunk: list[int]) -> None:
        """These examples (consecutive, at most ``batch``), and the labels now due."""
        if self.options.mode == "learn":
            await self.learn(chunk)
            return
        await self.predict(chunk)
        # Take the overdue labels before any await: concurrent workers share ``pending``.
        overdue = max(0, len(self.pending) - self.options.delay)
        due = [self.pending.popleft() for _ in range(overdue)]
        if due:
            await self.feedback(due)

    def take_pending(self) -> list[tuple[int, str]]:
        """The predictions still awaiting their label, oldest first, taken to be sent."""
        taken = list(self.pending)
        self.pending.clear()
        return taken

    async def learn(self, chunk: list[int]) -> None:
        """The examples with their labels to /learn (or /learn/batch)."""
        rows, labels = self._examples(chunk)
        if self.options.batch == 1:
            answer = await self._call(self.client.learn, self.model, rows[0], labels[0])
            mistakes = [answer.mistake]
        else:
            batch = await self._call(self.client.learn_batch, self.model, rows, labels)
            mistakes = batch.mistakes
        self.tally.record(zip(chunk, mistakes, strict=True))

    async def predict(self, chunk: list[int]) -> None:
        """The examples to /predict (or /predict/batch); their labels wait in ``pending``."""
        rows = [self.data.rows[i] for i in chunk]
        if self.options.batch == 1:
            answer = await self._call(self.client.predict, self.model, rows[0])
            ids = [answer.prediction_id]
        else:
            batch = await self._call(self.client.predict_batch, self.model, rows)
            ids = [p.prediction_id for p in batch.predictions]
        self.pending.extend(zip(chunk, ids, strict=True))

    async def feedback(self, items: list[tuple[int, str]]) -> None:
        """The true labels of these (example, prediction_id) to /feedback (or its batch)."""
        labels = self.data.labels
        if self.options.batch == 1:
            for i, pid in items:
                answer = await self._call(self.client.feedback, pid, labels[i])
                self.tally.record([(i, answer.mistake)])
            return
        pairs = [(pid, labels[i]) for i, pid in items]
        batch = await self._call(self.client.feedback_batch, pairs)
        mistakes = []
        for result in batch.results:
            if result.error is not None:
                raise error_from_item(result.error)
            mistakes.append(bool(result.mistake))
        self.tally.record(zip((i for i, _ in items), mistakes, strict=True))
