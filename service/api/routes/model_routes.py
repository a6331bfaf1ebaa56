"""Routes of the /models resource: create, read, list, delete, metrics, export and import,
reset, weights. A model's history has its own (``history_routes.py``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response
from fastapi.responses import JSONResponse

from service.api.auth import Role
from service.api.callers import Admin, FastJSONRoute, Reader
from service.api.metrics_view import model_metrics
from service.api.model_answers import WeightsStream, model_info, weights_body
from service.api.openapi import openapi_examples
from service.api.schemas.metrics_schemas import ModelMetrics
from service.api.schemas.model_schemas import (
    ModelInfo,
    ModelList,
    ModelSpec,
    WeightsResponse,
    error_responses,
)

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


@router.get("/{name}/weights", responses=errors, response_model=WeightsResponse)
async def read_weights(name: str, who: Reader) -> WeightsStream:
    """Read the current weights and bias (and the averaged ones when enabled): one version's,
    streamed row by row."""
    who.check(Role.predict, name)
    rep = await who.worker.replicas.current(name)
    return WeightsStream(weights_body(rep), rep.config)
