"""GET /metrics: the Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.api import examples
from service.api.routing import Reader
from service.api.scrape import read_exposition

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"example": examples.PROMETHEUS}}}},
)
async def read_prometheus_metrics(who: Reader) -> Response:
    """Per-model and per-endpoint figures in the Prometheus text format."""
    return Response(await read_exposition(who), media_type=CONTENT_TYPE_LATEST)
