"""Routes of the learning protocol: predict, feedback, learn; one example or a batch."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ..errors import ServiceError
from .deps import EngineDep
from .schemas import (
    ErrorResponse,
    FeedbackBatchRequest,
    FeedbackBatchResponse,
    FeedbackItemResult,
    FeedbackRequest,
    FeedbackResponse,
    LearnBatchRequest,
    LearnBatchResponse,
    LearnRequest,
    LearnResponse,
    PredictBatchRequest,
    PredictBatchResponse,
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
    config, (p,) = await engine.predict(body.model, [body.features])
    return PredictResponse(
        prediction_id=p.prediction_id,
        label=p.label,
        version=p.version,
        **score_fields(config, p.scores),
    )


@router.post("/predict/batch", responses=errors)
async def predict_batch(body: PredictBatchRequest, engine: EngineDep) -> PredictBatchResponse:
    """Predict many examples with one version of the model."""
    config, preds = await engine.predict(body.model, body.features)
    return PredictBatchResponse(
        predictions=[
            PredictResponse(
                prediction_id=p.prediction_id,
                label=p.label,
                version=p.version,
                **score_fields(config, p.scores),
            )
            for p in preds
        ],
        version=preds[0].version,
    )


@router.post("/feedback", responses=errors)
async def submit_feedback(body: FeedbackRequest, engine: EngineDep) -> FeedbackResponse:
    """Give the true label of a prediction: counts the mistake and learns from it, once."""
    (f,) = await engine.submit_feedback([(body.prediction_id, body.label)])
    if isinstance(f, ServiceError):
        raise f
    return FeedbackResponse(
        mistake=f.mistake, updated=f.updated, version=f.version, duplicate=f.duplicate
    )


@router.post("/feedback/batch", responses=errors)
async def submit_feedback_batch(
    body: FeedbackBatchRequest, engine: EngineDep
) -> FeedbackBatchResponse:
    """Give many true labels; each item gets its own result or error, in order."""
    results = await engine.submit_feedback([(f.prediction_id, f.label) for f in body.feedback])
    out = []
    for f in results:
        if isinstance(f, ServiceError):
            out.append(FeedbackItemResult(error=ErrorResponse(detail=f.message, code=f.code)))
        else:
            out.append(
                FeedbackItemResult(
                    mistake=f.mistake, updated=f.updated, version=f.version, duplicate=f.duplicate
                )
            )
    return FeedbackBatchResponse(results=out)


@router.post("/learn", responses=errors)
async def learn(body: LearnRequest, engine: EngineDep) -> LearnResponse:
    """Predict and learn a labelled example in one atomic step."""
    (r,) = await engine.learn(body.model, [body.features], [body.label])
    return LearnResponse(label=r.label, mistake=r.mistake, updated=r.updated, version=r.version)


@router.post("/learn/batch", responses=errors)
async def learn_batch(body: LearnBatchRequest, engine: EngineDep) -> LearnBatchResponse:
    """Predict then learn many labelled examples in order, atomically, as one sequence."""
    results = await engine.learn(body.model, body.features, body.labels)
    return LearnBatchResponse(
        labels=[r.label for r in results],
        mistakes=[r.mistake for r in results],
        updated=[r.updated for r in results],
        version=results[-1].version,
        mistake_count=sum(r.mistake for r in results),
    )
