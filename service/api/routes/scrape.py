"""GET /metrics, in the Prometheus text format, and what one scrape reads: this replica's
readiness, Redis's memory, and every model the caller's key may see, with the bytes of its
pending predictions.

A scrape answers whatever the store does: while Redis is down it carries the HTTP figures and
``perceptron_ready 0`` (nothing read from Redis), so Prometheus still sees the replica (``up``
stays 1) and the alert on readiness, not a failed scrape, says what is wrong.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.api.callers import Caller, Reader
from service.api.openapi import openapi_examples
from service.contract.store_protocol import Meta, pending_life_s
from service.contract.store_values import Observations
from service.errors import STORE_UNAVAILABLE, ServiceError
from service.learner import ModelConfig
from service.metrics.prometheus import exposition
from service.metrics.readiness import Serving
from service.store import StoreError

log = logging.getLogger("perceptron")

Row = tuple[str, ModelConfig, Observations]

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"example": openapi_examples.PROMETHEUS}}}},
)
async def read_prometheus_metrics(who: Reader) -> Response:
    """Per-model and per-endpoint figures in the Prometheus text format."""
    return Response(await read_exposition(who), media_type=CONTENT_TYPE_LATEST)


async def read_exposition(who: Caller) -> bytes:
    """The Prometheus text of one scrape by ``who``."""
    worker = who.worker
    condition = await worker.models.readiness()
    serving = Serving(ready=condition.ok, pending_max=worker.settings.max_pending_bytes)
    rows: list[Row] = []
    challengers: list[tuple[str, list[dict[str, Any]]]] = []
    if condition.code != STORE_UNAVAILABLE:
        try:
            serving.memory.extend(await worker.store.read_memory())
            rows = await _read_models(who)
            for name, _, obs in rows:  # only the models that have challengers: replayed
                if int(obs.meta.get(Meta.CHALLENGERS, 0) or 0) > 0:
                    shown = await worker.challengers.show(name)
                    challengers.append((name, shown["challengers"]))
            ttls = [
                (name, pending_life_s(config.feedback_ttl_s, config.default_label is not None))
                for name, config, _ in rows
            ]
            serving.pending.update(await worker.store.read_pending(ttls))
        except ServiceError:  # a store that may evict keys: no model is read from it
            pass
        except StoreError as e:  # Redis went away since the readiness check
            log.warning("/metrics without the figures read from Redis: %s", e)
    return exposition(rows, serving, challengers)


async def _read_models(who: Caller) -> list[Row]:
    store = who.worker.store
    listed = [m for m in await who.worker.models.list_models() if who.allows(m[0])]
    observed = await asyncio.gather(*(store.read_observations(m[0]) for m in listed))
    return [(n, c, o) for (n, c, _), o in zip(listed, observed, strict=True) if o is not None]
