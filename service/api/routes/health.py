"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.callers import WorkerDep
from service.api.schemas.model_schemas import ErrorResponse, Health
from service.errors import Unavailable

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def read_health() -> Health:
    """The process is alive."""
    return Health(status="ok")


@router.get("/readyz", responses={503: {"model": ErrorResponse}})
async def read_readiness(worker: WorkerDep) -> Health:
    """The store answers, keeps every model's keys and has memory left to learn."""
    condition = await worker.models.readiness()
    if not condition.ok:
        raise Unavailable(condition.detail, code=condition.code)
    return Health(status="ok", store="up")
