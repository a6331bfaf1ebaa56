"""Routes of the learning protocol: predict, feedback, learn."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from .deps import EngineDep
from .schemas import (
    ErrorResponse,
    FeedbackRequest,
    FeedbackResponse,
    LearnRequest,
    LearnResponse,
    PredictRequest,
    PredictResponse,
)
from .views import score_fields

router = APIRouter(tags=["learning"])
errors: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse},
    409: {"model": ErrorResponse},
    422: {"model": ErrorResponse},
    503: {"model": ErrorResponse},
}


@router.post("/predict", responses=errors)
async def predict(body: PredictRequest, engine: EngineDep) -> PredictResponse:
    """Predict a label now; send its true label later to /feedback."""
    p = await engine.predict(body.model, body.features)
    return PredictResponse(
        prediction_id=p.prediction_id,
        label=p.label,
        version=p.version,
        **score_fields(p.config, p.scores),
    )


@router.post("/feedback", responses=errors)
async def submit_feedback(body: FeedbackRequest, engine: EngineDep) -> FeedbackResponse:
    """Give the true label of a prediction: counts the mistake and learns from it, once."""
    f = await engine.submit_feedback(body.prediction_id, body.label)
    return FeedbackResponse(
        mistake=f.mistake, updated=f.updated, version=f.version, duplicate=f.duplicate
    )


@router.post("/learn", responses=errors)
async def learn(body: LearnRequest, engine: EngineDep) -> LearnResponse:
    """Predict and learn a labelled example in one atomic step."""
    r = await engine.learn(body.model, body.features, body.label)
    return LearnResponse(label=r.label, mistake=r.mistake, updated=r.updated, version=r.version)
