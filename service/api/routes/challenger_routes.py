"""Routes of a model's challengers: add, remove, show them beside the served learner, promote
one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response

from service.api.auth import Role
from service.api.callers import Admin, FastJSONRoute, Reader
from service.api.model_answers import WeightsStream, challengers_body
from service.api.schemas.challenger_schemas import (
    ChallengerInfo,
    ChallengersAnswer,
    ChallengerSettings,
    PromoteRequest,
    Promotion,
    documented_as,
)
from service.api.schemas.model_schemas import error_responses
from service.learner import ModelConfig
from service.learner.passive_aggressive import PA1

router = APIRouter(prefix="/models", tags=["models"], route_class=FastJSONRoute)
errors = error_responses((401, 403, 404, 409, 422, 503))
with_body = error_responses((400, 401, 403, 404, 409, 413, 422, 503))
CHALLENGER_EXAMPLE = {"algorithm": PA1.name, "C": 0.1, "from": "served"}
BODY_EXAMPLES: dict[str, Any] = {PA1.name: {"value": CHALLENGER_EXAMPLE}}
RATES = {"all": 0.125, "last_100": 0.1, "last_1000": 0.125}
CONFIG = {"classes": [-1, 1], "n_features": 2, "algorithm": PA1.name, "C": 0.1}
CURVE = {"every": 100, "points": [{"examples": 100, "mistakes": 14, "rate": 0.14},
                                  {"examples": 200, "mistakes": 25, "rate": 0.125}]}  # fmt: skip
CHALLENGER = {"promotable": True, "id": "pa", "config": CONFIG, "since": 40, "seen": 200,
              "mistakes": 25, "served_mistakes": 31, "updates": 61, "drift_warnings": 0,
              "drifts": 0, "mistake_rate": RATES, "curve": CURVE}  # fmt: skip
SERVED = {"id": "served", "config": {"classes": [-1, 1], "n_features": 2}, "seen": 240,
          "mistakes": 36, "updates": 36, "mistake_rate": {**RATES, "all": 0.15}}  # fmt: skip
STANDING = {"model": "default", "labels": 240, "served": SERVED, "challengers": [CHALLENGER]}
PROMOTE_EXAMPLES: dict[str, Any] = {"pa": {"value": {"challenger": "pa"}}}
PROMOTED = {"model": "default", "promoted": "pa", "demoted": "served-3", "checkpoint": 3,
            "config": CONFIG}  # fmt: skip


def answers(
    status: int, example: dict[str, Any], what: str, model: type[Any]
) -> dict[int | str, Any]:
    content = {"application/json": {"example": example}}
    return {status: {"description": what, "model": model, "content": content}}


SIDE_BY_SIDE = answers(200, STANDING, "Side by side", ChallengersAnswer)
ONE = answers(200, CHALLENGER, "The challenger", ChallengerInfo)


@router.get("/{name}/challengers", responses={**errors, **SIDE_BY_SIDE})
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


@router.get("/{name}/challengers/{id}", responses={**errors, **ONE})
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
    responses={**with_body, **answers(201, CHALLENGER, "Added", ChallengerInfo)},
)
async def add_challenger(
    name: str,
    id: str,
    who: Admin,
    settings: Annotated[
        dict[str, Any] | None,
        Body(openapi_examples=BODY_EXAMPLES),
        documented_as(ChallengerSettings),
    ] = None,
) -> Any:
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
    responses={**with_body, **answers(200, PROMOTED, "Promoted", Promotion)},
)
async def promote(
    name: str,
    who: Admin,
    body: Annotated[
        dict[str, Any], Body(openapi_examples=PROMOTE_EXAMPLES), documented_as(PromoteRequest)
    ],
) -> Any:
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
