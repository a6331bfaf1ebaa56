"""``GET /models/{name}/drift``: a model's drift detector, each learner's state, its events."""

from __future__ import annotations

from fastapi import APIRouter

from service.admin.worker import Worker
from service.api.auth import Role
from service.api.callers import FastJSONRoute, Reader
from service.api.schemas.drift_schemas import DriftAnswer, drift_answer
from service.api.schemas.model_schemas import error_responses
from service.contract.store_protocol import Meta
from service.engine.standings import Standing

router = APIRouter(prefix="/models", tags=["models"], route_class=FastJSONRoute)


@router.get("/{name}/drift", responses=error_responses((401, 403, 404, 422, 503)))
async def read_drift(name: str, who: Reader) -> DriftAnswer:
    """The model's drift detector (its configuration's ``drift``), whether each learner's
    mistakes are stable, warn or drifted now (the served learner's, then each challenger's),
    and their last warnings and drifts, each learner's oldest first, each with the examples
    that learner had seen when it came."""
    who.check(Role.predict, name)
    return await drift_of(who.worker, name)


async def drift_of(worker: Worker, name: str, now: Standing | None = None) -> DriftAnswer:
    """What ``GET /models/{name}/drift`` answers (and the event stream's ``drift`` event);
    ``now``: the challengers' standing, where the caller has it already."""
    config, meta = await worker.models.read_model(name)
    if config.drift is None or int(meta.get(Meta.CHALLENGERS, 0)) == 0:
        return drift_answer(config.drift, meta)
    now = now or await worker.challengers.standing(name)  # (each one's detector, replayed)
    return drift_answer(config.drift, meta, now.states)
