"""GET /models/{name}/events: a model's figures pushed as Server-Sent Events (the dashboard's).

The stream sends, as they change, the bodies a client would otherwise poll for:

- ``event: metrics``, the answer of ``GET /models/{name}/metrics``: at once, then whenever the
  model's epoch, version, counters or history change;
- ``event: checkpoints``, the answer of ``GET /models/{name}/checkpoints``: at once, then
  whenever its checkpoints or the versions it keeps change;
- ``event: challengers``, the answer of ``GET /models/{name}/challengers``: at once, then
  whenever a label, an add, a removal or a promotion changes it, while the model has
  challengers (and once more when its last one goes);
- ``event: drift``, the answer of ``GET /models/{name}/drift``, for a model with a drift
  detector: at once, then whenever any learner's detector warns or detects, or the model
  starts afresh;
- ``event: gone``, ``{"detail", "code": "model_not_found"}``, when the model is deleted; the
  stream ends;
- a comment (``: keep-alive``) after ``PERCEPTRON_STREAM_KEEPALIVE_S`` without an event;
- its end after ``PERCEPTRON_STREAM_MAX_S``: an EventSource connects again by itself.

How a change is seen: any worker may serve the stream, and any other apply the label, so the
stream reads the model's stamp from Redis (``Store.read_stamp``: one HMGET of a few fields of
its meta hash) every ``PERCEPTRON_STREAM_POLL_S`` (0.25 s) and computes the figures only when
the stamp moved. That costs Redis 4 small reads a second per open stream, bounded by
``PERCEPTRON_MAX_STREAMS`` per worker, and nothing at all while no stream is open; the write
paths (``/predict``, ``/feedback``, ``/learn``) do no more work for it. (Pub/sub, published by
each write's script, would cost every write a PUBLISH whether or not anyone watches, and under
a cluster a broadcast to every shard.)

Who may read it: the ``predict`` role on the model, as ``GET .../metrics``. The key comes in
``Authorization: Bearer`` or ``X-API-Key`` like everywhere else, or, for a browser's
``EventSource``, which sends no headers of its own, in the cookie ``perceptron_key``
(URL-encoded): the dashboard sets it for this path alone, ``SameSite=Strict``, just before it
opens the stream. A key never travels in the URL, so it stays out of access logs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from urllib.parse import unquote

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.admin.challengers import shown_challengers
from service.admin.worker import Worker
from service.api.auth import NOBODY_NEEDED, KeyRing, Principal, Role, Unauthorized, key_from_headers
from service.api.callers import checked
from service.api.metrics_view import model_metrics
from service.api.routes.drift_routes import drift_of
from service.api.routes.history_routes import read_checkpoints
from service.api.schemas.model_schemas import error_responses
from service.api.streams import EVENT_STREAM, EventStream, Streams
from service.contract.names import check_name
from service.contract.store_protocol import Meta
from service.engine.standings import Standing
from service.errors import ModelNotFound
from service.store.redis_store import STAMP_FIELDS

COOKIE = "perceptron_key"
RETRY_MS = 1000  # how soon an EventSource connects again after the stream ends
# The stamp's fields (Store.read_stamp) that the checkpoints follow: epoch, snapv, ckseq,
# pastck, pastv (not the version, which every update moves).
HISTORY = (0, 2, 3, 4, 5)
CHALLENGERS = -2  # the stamp's count of challengers (Store.read_stamp)
# The stamp's fields that the drift detector's events follow: epoch, warnings, drifts.
DRIFT = tuple(STAMP_FIELDS.index(f) for f in (Meta.EPOCH, "drift_warnings", "drifts"))

EXAMPLE = (
    "retry: 1000\n\n"
    'event: metrics\ndata: {"model":"default","version":42,...}\n\n'
    'event: checkpoints\ndata: {"name":"default","version":42,"checkpoints":[]}\n\n'
    ": keep-alive\n\n"
    'event: metrics\ndata: {"model":"default","version":43,...}\n\n'
)

router = APIRouter(prefix="/models", tags=["models"])


@router.get(
    "/{name}/events",
    response_class=Response,
    responses={
        200: {
            "description": "Server-Sent Events: `metrics`, `checkpoints`, `challengers` and "
            "`drift` as they change",
            "content": {EVENT_STREAM: {"example": EXAMPLE}},
        },
        **error_responses((401, 403, 404, 422, 503)),
    },
)
async def model_events(name: str, request: Request) -> Response:
    """Follow a model: its metrics, checkpoints, challengers and drift detector's events pushed
    as they change (Server-Sent Events).
    A browser's `EventSource` may send its key in the cookie `perceptron_key`."""
    checked(stream_caller(request), Role.predict, check_name(name))
    worker: Worker = request.app.state.worker
    streams: Streams = request.app.state.streams
    streams.enter()  # (503 too_many_streams past the limit, before any work)
    try:
        stamp = await worker.store.read_stamp(name)
        first = await _metrics(worker, name)  # 404 for a model that does not exist
        history = await _checkpoints(worker, name)
        now = await _standing(worker, name, _challenged(stamp))
        history += _challengers(name, now)
        drift = await _drift(worker, name, now)
        history += event("drift", drift) if drift else b""
    except BaseException:
        streams.leave()
        raise
    return EventStream(_follow(worker, name, stamp, first + history, drift), streams)


def stream_caller(request: Request) -> Principal:
    """Who is calling: by the key in the headers, else in the cookie (401 without one)."""
    keys: KeyRing | None = request.app.state.keys
    if keys is None:
        return NOBODY_NEEDED
    key = key_from_headers(
        request.headers.getlist("authorization"), request.headers.getlist("x-api-key")
    )
    if key is None and request.cookies.get(COOKIE):
        key = unquote(request.cookies[COOKIE])
    if key is None:
        raise Unauthorized(
            "An API key is needed: send 'Authorization: Bearer <key>', or from a browser the "
            f"cookie {COOKIE}."
        )
    found = keys.find(key)
    if found is None:
        raise Unauthorized("The API key is not valid.")
    return found


def event(kind: str, data: bytes) -> bytes:
    """One event of the stream (``data`` is JSON on one line)."""
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


async def _metrics(worker: Worker, name: str) -> bytes:
    rep, obs = await worker.models.observe(name)
    body = model_metrics(rep, obs, worker.settings.series_bucket_s)
    return event("metrics", body.model_dump_json().encode())


async def _checkpoints(worker: Worker, name: str) -> bytes:
    body = await read_checkpoints(worker, name)
    return event("checkpoints", body.model_dump_json().encode())


async def _drift(worker: Worker, name: str, now: Standing | None) -> bytes:
    """The drift event's data, for a model with a detector (else nothing)."""
    answer = await drift_of(worker, name, now)
    return b"" if answer.drift is None else answer.model_dump_json().encode()


async def _standing(worker: Worker, name: str, challenged: bool) -> Standing | None:
    """The challengers' standing, read once for both events that show it (None: not
    ``challenged``)."""
    return await worker.challengers.standing(name) if challenged else None


def _challengers(name: str, now: Standing | None) -> bytes:
    return b"" if now is None else event("challengers", orjson.dumps(shown_challengers(name, now)))


def _challenged(stamp: tuple[bytes | str | None, ...] | None) -> bool:
    return stamp is not None and int(stamp[CHALLENGERS] or 0) > 0


async def _follow(
    worker: Worker,
    name: str,
    stamp: tuple[bytes | str | None, ...] | None,
    first: bytes,
    drifted: bytes,
) -> AsyncGenerator[bytes, None]:
    """The stream's chunks: ``first``, then each change the model's stamp shows. The stamp is
    read before the figures, so a change made meanwhile is sent again, never missed. The drift
    event goes when its data differs from the last sent (``drifted``): for a model with
    challengers, whose events come with their labels, it is made at each change."""
    s = worker.settings
    yield b"retry: %d\n\n" % RETRY_MS + first
    sent = opened = time.monotonic()
    while time.monotonic() - opened < s.stream_max_s:  # (then the client connects again)
        await asyncio.sleep(s.stream_poll_s)
        now = await worker.store.read_stamp(name)
        chunk = b""
        try:
            if now is None:
                raise ModelNotFound(name)
            if now != stamp:
                chunk = await _metrics(worker, name)
                if stamp is None or any(now[i] != stamp[i] for i in HISTORY):
                    chunk += await _checkpoints(worker, name)
                standing = await _standing(worker, name, _challenged(now) or _challenged(stamp))
                chunk += _challengers(name, standing)
                if (
                    _challenged(now)
                    or _challenged(stamp)  # (the last challenger gone: its detector with it)
                    or stamp is None
                    or any(now[i] != stamp[i] for i in DRIFT)
                ):
                    drift = await _drift(worker, name, standing)  # (challengers': by labels)
                    chunk += event("drift", drift) if drift and drift != drifted else b""
                    drifted = drift
                stamp = now
            elif time.monotonic() - sent >= s.stream_keepalive_s:
                chunk = b": keep-alive\n\n"
        except ModelNotFound as e:
            yield event("gone", orjson.dumps({"detail": e.message, "code": e.code}))
            return
        if chunk:
            sent = time.monotonic()
            yield chunk
