"""GET /metrics: the Prometheus text format."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from ..metrics.prometheus import exposition
from . import examples
from .deps import Reader

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"example": examples.PROMETHEUS}}}},
)
async def read_prometheus_metrics(who: Reader) -> Response:
    """Per-model and per-endpoint figures in the Prometheus text format."""
    models = [m for m in await who.worker.models.list_models() if who.allows(m[0])]
    observed = await asyncio.gather(*(who.worker.store.read_observations(m[0]) for m in models))
    rows = [(n, c, o) for (n, c, _), o in zip(models, observed, strict=True) if o is not None]
    return Response(exposition(rows), media_type=CONTENT_TYPE_LATEST)
