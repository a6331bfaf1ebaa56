"""A model's event stream (``GET /models/{name}/events``), read as typed events: what the
dashboard watches, for a program (``Client.events``, ``AsyncClient.events``).

Each event is the body the route of its kind answers (``metrics``: ``ModelMetrics``, as
``GET .../metrics``; ``checkpoints``, ``challengers``, ``drift`` likewise), sent at once and
whenever it changes. As a browser's ``EventSource`` does, a stream the service ends (after
``PERCEPTRON_STREAM_MAX_S``) is opened again after the ``retry`` it asked for; the model
deleted, the stream's ``gone`` raises ``NotFoundError``. The stream waits for events as long as
it stays open (the service sends a keep-alive comment when nothing moves), so the client's
timeout bounds its connecting, not its reading.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from typing import cast

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse, connect_sse
from pydantic import BaseModel, ValidationError

from .answers import Challengers, Checkpoints, DriftReport, ErrorResponse, ModelMetrics
from .calls import events_path
from .errors import NotFoundError, PerceptronError, error_from_response

__all__ = ["EventData", "ModelEvent"]

EventData = ModelMetrics | Checkpoints | Challengers | DriftReport

_KINDS: dict[str, type[BaseModel]] = {
    "metrics": ModelMetrics,
    "checkpoints": Checkpoints,
    "challengers": Challengers,
    "drift": DriftReport,
}
RETRY_MS = 1000  # before opening a stream the service ended again, until it says otherwise


@dataclass(frozen=True)
class ModelEvent:
    """One event of a model's stream: its ``kind`` (``"metrics"``, ``"checkpoints"``,
    ``"challengers"`` or ``"drift"``) and its body, read as that route's answer."""

    kind: str
    data: EventData


def _event(sse: ServerSentEvent) -> ModelEvent | None:
    """The event ``sse`` carries; None for a comment or the stream's ``retry``, and for a kind
    this client does not know (a newer service's). The model gone raises NotFoundError."""
    if sse.event == "gone":
        body = ErrorResponse.model_validate_json(sse.data)
        raise NotFoundError(404, body.code, body.detail)
    model = _KINDS.get(sse.event)
    if model is None:
        return None
    try:
        data = model.model_validate_json(sse.data)
    except ValidationError as e:
        raise PerceptronError(
            200, "unexpected_answer", f"a {sse.event} event that is not a {model.__name__}"
        ) from e
    return ModelEvent(sse.event, cast(EventData, data))


def _timeout(http: httpx.Client | httpx.AsyncClient) -> httpx.Timeout:
    t = http.timeout
    return httpx.Timeout(connect=t.connect, read=None, write=t.write, pool=t.pool)


def _checked(response: httpx.Response) -> None:
    if response.is_error:
        raise error_from_response(response)


def iter_events(
    http: httpx.Client, name: str, reconnect: bool
) -> Generator[ModelEvent, None, None]:
    """``Client.events``: the model's events, as they come, until the caller stops."""
    path, retry_ms = events_path(name), RETRY_MS
    while True:
        with connect_sse(http, "GET", path, timeout=_timeout(http)) as source:
            if source.response.is_error:
                source.response.read()
                _checked(source.response)
            for sse in source.iter_sse():
                retry_ms = sse.retry if sse.retry is not None else retry_ms
                if (event := _event(sse)) is not None:
                    yield event
        if not reconnect:
            return
        time.sleep(retry_ms / 1000)


async def aiter_events(
    http: httpx.AsyncClient, name: str, reconnect: bool
) -> AsyncGenerator[ModelEvent, None]:
    """``AsyncClient.events``: the model's events, as they come, until the caller stops."""
    path, retry_ms = events_path(name), RETRY_MS
    while True:
        async with aconnect_sse(http, "GET", path, timeout=_timeout(http)) as source:
            if source.response.is_error:
                await source.response.aread()
                _checked(source.response)
            async for sse in source.aiter_sse():
                retry_ms = sse.retry if sse.retry is not None else retry_ms
                if (event := _event(sse)) is not None:
                    yield event
        if not reconnect:
            return
        await asyncio.sleep(retry_ms / 1000)
