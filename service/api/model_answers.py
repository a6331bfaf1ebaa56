"""Turning a model's state into response bodies: its info, counters and weights."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import nullcontext
from typing import Any

import numpy as np
import orjson
from fastapi.responses import StreamingResponse

from service.admin.challengers import figures, shown_challengers
from service.api.json_bodies import json_response
from service.api.schemas.model_schemas import (
    Counters,
    ModelInfo,
    ModelSpec,
)
from service.contract.store_protocol import Meta
from service.engine.replica import Replica
from service.engine.standings import Standing
from service.learner import ModelConfig
from service.learner.perceptron import ovo_pairs

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def counters_of(meta: dict[str, str]) -> Counters:
    counters = Counters(**{k: int(meta[k]) for k in Counters.model_fields if k in meta})
    counters.updates = int(meta.get(Meta.VERSION, 0))
    return counters


def model_info(name: str, config: ModelConfig, meta: dict[str, str]) -> ModelInfo:
    return ModelInfo(
        name=name,
        config=ModelSpec(**config.to_dict()),
        version=int(meta.get(Meta.VERSION, 0)),
        created=int(meta.get(Meta.CREATED, 0)),
        counters=counters_of(meta),
    )


def row_targets(config: ModelConfig) -> list[str]:
    classes = [str(c) for c in config.classes]
    if config.binary:
        return [classes[1]]
    if config.multiclass == "ovo":
        i, j = ovo_pairs(config.n_classes)
        return [f"{classes[a]}|{classes[b]}" for a, b in zip(i, j, strict=True)]
    return classes


# Weights of a model this large (rows x dimension) are sent by one request of a worker at a
# time: each request holds a copy of them while it sends (a consistent snapshot; learning
# changes the replica in place) and one row's JSON. At PERCEPTRON_MAX_WEIGHTS that is 256 MiB
# a request, so eight at once held 873 MiB when their answers were built whole. A request
# waits for its turn and sends within WEIGHTS_SEND_S in all: a client that stops reading
# holds the turn no longer (its connection is closed); one that waits longer is answered 503.
LARGE_WEIGHTS = 1 << 20
WEIGHTS_SEND_S = 120.0
_ONE_LARGE_AT_A_TIME = asyncio.Lock()


def _row_json(config: ModelConfig, target: str, w: np.ndarray, b: float) -> bytes:
    if config.dense:
        weights: np.ndarray | dict[str, float] = w
    else:
        nz = np.flatnonzero(w)
        weights = dict(zip(map(str, nz.tolist()), w[nz].tolist(), strict=True))
    return orjson.dumps(
        {"target": target, "weights": weights, "bias": b}, option=orjson.OPT_SERIALIZE_NUMPY
    )


def _rows(config: ModelConfig, w: np.ndarray, b: np.ndarray) -> Iterator[bytes]:
    """The rows of a WeightsResponse as JSON, one at a time."""
    yield b"["
    for i, target in enumerate(row_targets(config)):
        yield (b"," if i else b"") + _row_json(config, target, w[i], float(b[i]))
    yield b"]"


async def weights_body(rep: Replica) -> AsyncIterator[bytes]:
    """A WeightsResponse as JSON, streamed row by row from a snapshot of the weights."""
    cfg, w = rep.config, rep.weights  # (read, and copied, with no await between: one version)
    head = {"model": rep.name, "version": w.version, "seen": w.seen}
    rows = (w.w.copy(), w.b.copy())
    averaged = w.averaged() if cfg.averaged else None
    if averaged is not None and averaged[0] is w.w:  # (no example seen: the weights)
        averaged = rows
    yield orjson.dumps(head)[:-1]  # (its closing brace comes last)
    for key, part in ((b"rows", rows), (b"averaged", averaged)):
        yield b',"' + key + b'":'
        if part is None:
            yield b"null"
            continue
        for chunk in _rows(cfg, *part):
            yield chunk
            await asyncio.sleep(0)  # the worker's other requests go on between rows
    yield b"}"


ROW_SLICE = 1 << 16  # the weights of one row turned into JSON at a time


def _array_json(a: np.ndarray) -> Iterator[bytes]:
    """A 1-d array as a JSON list, a slice at a time."""
    yield b"["
    for at in range(0, len(a), ROW_SLICE):
        yield (b"," if at else b"") + orjson.dumps(a[at : at + ROW_SLICE], option=_NUMPY)[1:-1]
    yield b"]"


def _copies(now: Standing, ids: list[str]) -> list[tuple[dict[str, Any], np.ndarray, np.ndarray]]:
    """Each challenger's figures, weights and biases, copied at one instant (the states move
    on in place as labels come)."""
    model = ModelConfig.from_json(now.data.config)
    return [
        (figures(id, s, model=model), s.weights.w.copy(), s.weights.b.copy())
        for id, s in now.states.items()
        if id in ids
    ]


async def _with_weights(
    shown: dict[str, Any], w: np.ndarray, b: np.ndarray
) -> AsyncIterator[bytes]:
    """One challenger's figures with its weights, a slice of a row at a time."""
    yield b'{"weights":{"w":['
    for r in range(w.shape[0]):
        yield b"," if r else b""
        for chunk in _array_json(w[r]):
            yield chunk
            await asyncio.sleep(0)  # the worker's other requests go on between slices
    yield b'],"b":' + orjson.dumps(b, option=_NUMPY) + b"}," + orjson.dumps(shown)[1:]


async def challengers_body(name: str, now: Standing, id: str | None = None) -> AsyncIterator[bytes]:
    """The challengers side by side (GET /models/{name}/challengers?weights=true), or
    challenger ``id`` alone, with their weights and biases."""
    if id is not None:
        for shown, w, b in _copies(now, [id]):
            async for chunk in _with_weights(shown, w, b):
                yield chunk
        return
    head = shown_challengers(name, now)
    each = _copies(now, list(now.states))
    del head["challengers"]
    yield orjson.dumps(head)[:-1] + b',"challengers":['
    for i, (shown, w, b) in enumerate(each):
        yield b"," if i else b""
        async for chunk in _with_weights(shown, w, b):
            yield chunk
    yield b"]}"


class WeightsStream(StreamingResponse):
    """A body of weights of a model of ``config``'s shape, streamed: a large one's
    (LARGE_WEIGHTS) one request of a worker at a time, within WEIGHTS_SEND_S (GET
    /models/{name}/weights, and its challengers' with their weights)."""

    def __init__(self, body: AsyncIterator[bytes], config: ModelConfig) -> None:
        super().__init__(body, media_type="application/json")
        self.large = config.n_rows * config.dim >= LARGE_WEIGHTS

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        started = False

        async def sending(message: Any) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            async with asyncio.timeout(WEIGHTS_SEND_S):
                async with _ONE_LARGE_AT_A_TIME if self.large else nullcontext():
                    await super().__call__(scope, receive, sending)
        except TimeoutError:
            if not started:
                await busy(scope, receive, send)
            # else a client that stopped reading: the answer ends unfinished, and the server
            # closes its connection (a truncated body, never a complete wrong one)


async def busy(scope: Any, receive: Any, send: Any) -> None:
    code = "weights_busy"
    await json_response(
        {
            "detail": "This worker is sending the weights of a large model to other clients; "
            "retry shortly.",
            "code": code,
        },
        503,
        headers={"Retry-After": "5"},
    )(scope, receive, send)
