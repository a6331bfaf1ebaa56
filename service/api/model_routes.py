"""Routes of the /models resource: create, read, list, delete, weights."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response
from fastapi.responses import JSONResponse

from service.admin.worker import Worker
from service.api import openapi_examples
from service.api.auth import Role
from service.api.history_schemas import (
    CheckpointInfo,
    Checkpoints,
    RollbackRequest,
    RollbackResponse,
    UndoRequest,
    UndoResponse,
    UpdateInfo,
    Updates,
)
from service.api.metrics_schemas import ModelMetrics
from service.api.metrics_view import model_metrics
from service.api.model_answers import WeightsStream, model_info, weights_body
from service.api.routing import Admin, FastJSONRoute, Reader
from service.api.schemas import ModelInfo, ModelList, ModelSpec, WeightsResponse, error_responses
from service.contract.store_protocol import MAX_COUNT

MAX_UPDATES_LISTED = 10_000  # one page of GET /models/{name}/updates
router = APIRouter(prefix="/models", tags=["models"], route_class=FastJSONRoute)
OptionalSpec = Annotated[ModelSpec | None, Body()]
errors = error_responses((401, 403, 404, 409, 422, 503))
# Operations with a JSON body may also get 400 (not JSON) and 413 (too large).
with_body = error_responses((400, 401, 403, 404, 409, 413, 422, 503))


@router.put(
    "/{name}",
    status_code=201,
    responses={**with_body, 200: {"model": ModelInfo, "description": "Exists, same config"}},
)
async def create_model(
    name: str, who: Admin, response: Response, spec: OptionalSpec = None
) -> ModelInfo:
    """Create a model (201), or confirm one with the same configuration (200)."""
    who.check(Role.admin, name)
    params = (spec or ModelSpec()).settings()
    _, created = await who.worker.models.create_model(name, params)
    if not created:
        response.status_code = 200
    return model_info(name, *await who.worker.models.read_model(name))


@router.get("", responses=errors)
async def list_models(who: Reader) -> ModelList:
    """List every model (this key may use) with its configuration and counters."""
    models = await who.worker.models.list_models()
    return ModelList(models=[model_info(*m) for m in models if who.allows(m[0])])


@router.get("/{name}", responses=errors)
async def read_model(name: str, who: Reader) -> ModelInfo:
    """Read a model's configuration, version and counters."""
    who.check(Role.predict, name)
    return model_info(name, *await who.worker.models.read_model(name))


@router.delete("/{name}", status_code=204, responses=errors)
async def delete_model(name: str, who: Admin) -> Response:
    """Delete a model, its weights and its counters."""
    who.check(Role.admin, name)
    await who.worker.models.delete_model(name)
    return Response(status_code=204)


@router.get("/{name}/metrics", responses=errors)
async def read_metrics(name: str, who: Reader) -> ModelMetrics:
    """Read mistake rates, time series, confusion matrix and the mistake-bound estimate."""
    who.check(Role.predict, name)
    rep, obs = await who.worker.models.observe(name)
    return model_metrics(rep, obs, who.worker.settings.series_bucket_s)


@router.get(
    "/{name}/export",
    responses={
        **errors,
        200: {
            "description": "The export file (`<name>.perceptron.json`)",
            "content": {"application/json": {"example": openapi_examples.EXPORT}},
        },
    },
)
async def export_model(
    name: str,
    who: Admin,
    checkpoints: Annotated[
        bool,
        Query(
            description="true or false: carry the model's checkpoints too (each its whole "
            "weights); default false."
        ),
    ] = False,
) -> JSONResponse:
    """Download the model (configuration, weights, counters) as a file to import elsewhere."""
    who.check(Role.admin, name)
    doc = await who.worker.models.export_model(name, checkpoints)
    disposition = f'attachment; filename="{name}.perceptron.json"'
    return JSONResponse(doc, headers={"Content-Disposition": disposition})


@router.post("/{name}/import", responses=with_body)
async def import_model(
    name: str,
    who: Admin,
    document: Annotated[dict[str, Any], Body(examples=[openapi_examples.EXPORT])],
) -> ModelInfo:
    """Create or overwrite a model from an export file; a bad file changes nothing."""
    who.check(Role.admin, name)
    await who.worker.models.import_model(name, document)
    return model_info(name, *await who.worker.models.read_model(name))


@router.post("/{name}/reset", responses=errors)
async def reset_model(name: str, who: Admin) -> ModelInfo:
    """Zero the model's weights and counters; its pending predictions lapse."""
    who.check(Role.admin, name)
    await who.worker.models.reset_model(name)
    return model_info(name, *await who.worker.models.read_model(name))


@router.get("/{name}/checkpoints", responses=errors)
async def list_checkpoints(name: str, who: Reader) -> Checkpoints:
    """List the model's checkpoints, and the versions it can be rolled back to."""
    who.check(Role.predict, name)
    return await read_checkpoints(who.worker, name)


async def read_checkpoints(worker: Worker, name: str) -> Checkpoints:
    """The answer of GET /models/{name}/checkpoints (its event stream pushes it too)."""
    h = await worker.history.checkpoints(name)
    return Checkpoints(
        name=name,
        version=h.version,
        restorable_from=h.first_version,
        bytes=h.bytes,
        checkpoints=[
            CheckpointInfo(
                id=c.id,
                version=c.version,
                seen=c.seen,
                time=c.ms / 1000,
                reason=c.reason,
                mistake_rate=c.mistake_rate,
                window=c.window,
                bytes=c.bytes,
            )
            for c in h.checkpoints
        ],
    )


@router.get("/{name}/updates", responses=errors)
async def list_updates(
    name: str,
    who: Admin,
    from_version: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_COUNT,
            description="The version of the first update listed, an integer from 1 (default: "
            "the last `limit`).",
        ),
    ] = None,
    limit: Annotated[
        int,
        Query(
            ge=1,
            le=MAX_UPDATES_LISTED,
            description=f"How many updates to list at most, an integer from 1 to "
            f"{MAX_UPDATES_LISTED} (default 100).",
        ),
    ] = 100,
) -> Updates:
    """List the model's kept updates with who caused each (an API key's name) and when."""
    who.check(Role.admin, name)
    kept = await who.worker.history.updates(name, from_version, limit)
    return Updates(
        name=name,
        version=kept.version,
        restorable_from=kept.first_kept - 1,
        updates=[UpdateInfo(**u) for u in kept.updates],
        sources=dict(Counter(u["source"] or "" for u in kept.updates)),
    )


@router.post("/{name}/rollback", responses=with_body)
async def rollback_model(name: str, who: Admin, body: RollbackRequest) -> RollbackResponse:
    """Restore the model's weights exactly as they were at a kept version or checkpoint; every
    worker serves them at once, and predictions still waiting for their label lapse."""
    who.check(Role.admin, name)
    version, before = await who.worker.history.rollback(name, body.version, body.checkpoint)
    return RollbackResponse(
        name=name,
        version=version,
        restored_checkpoint=body.checkpoint,
        undo_checkpoint=before,
        checkpoint=body.checkpoint,
        before=before,
    )


@router.post("/{name}/undo", responses=with_body)
async def undo_updates(name: str, who: Admin, body: UndoRequest) -> UndoResponse:
    """Rebuild the model, exactly, from its oldest kept weights through its kept updates but
    those of one API key (or of a time range): the recovery from bad labels. Every worker
    serves the result at once; predictions waiting for their label lapse."""
    who.check(Role.admin, name)
    done = await who.worker.history.undo(name, body.source, body.from_time, body.to_time)
    return UndoResponse(
        name=name,
        version=done.version,
        removed=done.removed,
        undo_checkpoint=done.before,
        before=done.before,
    )


@router.get("/{name}/weights", responses=errors, response_model=WeightsResponse)
async def read_weights(name: str, who: Reader) -> WeightsStream:
    """Read the current weights and bias (and the averaged ones when enabled): one version's,
    streamed row by row."""
    who.check(Role.predict, name)
    rep = await who.worker.replicas.current(name)
    return WeightsStream(weights_body(rep), rep.config)
