"""Routes of a model's challengers: add, remove, show them beside the served learner, promote
one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response

from service.api.auth import Role
from service.api.routing import Admin, FastJSONRoute, Reader
from service.api.schemas import error_responses
from service.api.views import WeightsStream, challengers_body
from service.learner import ModelConfig

router = APIRouter(prefix="/models", tags=["models"], route_class=FastJSONRoute)
errors = error_responses(401, 403, 404, 409, 422, 503)
with_body = error_responses(400, 401, 403, 404, 409, 413, 422, 503)
CHALLENGER_EXAMPLE = {"algorithm": "pa1", "C": 0.1, "from": "served"}
BODY_EXAMPLES: dict[str, Any] = {"pa1": {"value": CHALLENGER_EXAMPLE}}
RATES = {"all": 0.125, "last_100": 0.1, "last_1000": 0.125}
CONFIG = {"classes": [-1, 1], "n_features": 2, "algorithm": "pa1", "C": 0.1}
CHALLENGER = {"id": "pa", "config": CONFIG, "since": 40, "seen": 200, "mistakes": 25,
              "updates": 61, "mistake_rate": RATES}  # fmt: skip
SERVED = {"id": "served", "config": {"classes": [-1, 1], "n_features": 2}, "seen": 240,
          "mistakes": 36, "updates": 36, "mistake_rate": {**RATES, "all": 0.15}}  # fmt: skip
STANDING = {"model": "default", "labels": 240, "served": SERVED, "challengers": [CHALLENGER]}
PROMOTE_EXAMPLES: dict[str, Any] = {"pa": {"value": {"challenger": "pa"}}}
PROMOTED = {"model": "default", "promoted": "pa", "demoted": "served-3", "checkpoint": 3,
            "config": CONFIG}  # fmt: skip


def answers(status: int, example: dict[str, Any], what: str) -> dict[int | str, Any]:
    return {status: {"description": what, "content": {"application/json": {"example": example}}}}


@router.get("/{name}/challengers", responses={**errors, **answers(200, STANDING, "Side by side")})
async def list_challengers(
    name: str,
    who: Reader,
    weights: Annotated[
        bool, Query(description="true: each challenger's weights and biases too.")
    ] = False,
) -> Any:
    """The served learner and each challenger side by side: labelled examples seen, mistakes
    (each challenger's by progressive validation), updates, mistake rates."""
    who.check(Role.predict, name)
    if weights:  # (streamed, and a large model's one request of the worker at a time)
        now = await who.worker.challengers.standing(name)
        return WeightsStream(challengers_body(name, now), ModelConfig.from_json(now.data.config))
    return await who.worker.challengers.show(name)


@router.get(
    "/{name}/challengers/{id}", responses={**errors, **answers(200, CHALLENGER, "The challenger")}
)
async def get_challenger(
    name: str,
    id: str,
    who: Reader,
    weights: Annotated[bool, Query(description="true: its weights and biases too.")] = False,
) -> Any:
    """One challenger as the list shows it (404 challenger_not_found when the model has none
    of that id)."""
    who.check(Role.predict, name)
    if weights:  # (streamed, and a large model's one request of the worker at a time)
        now = await who.worker.challengers.standing_with(name, id)
        return WeightsStream(challengers_body(name, now, id), now.states[id].config)
    return await who.worker.challengers.show_one(name, id)


@router.put(
    "/{name}/challengers/{id}",
    status_code=201,
    responses={**with_body, **answers(201, CHALLENGER, "Added")},
)
async def add_challenger(
    name: str,
    id: str,
    who: Admin,
    settings: Annotated[dict[str, Any] | None, Body(openapi_examples=BODY_EXAMPLES)] = None,
) -> dict[str, Any]:
    """Add a challenger: a learner (algorithm, C, learning_rate, margin, averaged,
    multiclass) that learns every label of the model from now on, from zero weights or, with
    "from": "served", from a copy of the served weights."""
    who.check(Role.admin, name)
    return await who.worker.challengers.add(name, id, settings)


@router.delete("/{name}/challengers/{id}", status_code=204, responses=errors)
async def remove_challenger(name: str, id: str, who: Admin) -> Response:
    """Remove a challenger, its weights and its figures."""
    who.check(Role.admin, name)
    await who.worker.challengers.remove(name, id)
    return Response(status_code=204)


@router.post(
    "/{name}/promote",
    responses={**with_body, **answers(200, PROMOTED, "Promoted")},
)
async def promote(
    name: str,
    who: Admin,
    body: Annotated[dict[str, Any], Body(openapi_examples=PROMOTE_EXAMPLES)],
) -> dict[str, Any]:
    """Serve a challenger from the next request on, on every worker, its weights exactly as
    they are; the learner that served stays as a challenger ("demote_as" names it, else
    served-<checkpoint>). A checkpoint of the model is made first, and no label is lost or
    learned twice around the switch."""
    who.check(Role.admin, name)
    done = await who.worker.promotions.promote(name, body)
    return {
        "model": name,
        "promoted": done.promoted,
        "demoted": done.demoted,
        "checkpoint": done.checkpoint,
        "config": done.config,
    }
