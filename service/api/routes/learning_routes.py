"""Routes of the learning protocol: predict, feedback, learn; one example or a batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from fastapi import APIRouter, Response

from service.api.auth import Role
from service.api.callers import Caller, FastJSONRoute, Reader, Trainer
from service.api.json_bodies import json_response
from service.api.schemas.model_schemas import (
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
    error_responses,
)
from service.contract.names import PredictionId
from service.engine.learn_commits import columns
from service.engine.learning import Predicted
from service.errors import ServiceError
from service.learner import ModelConfig
from service.learner.perceptron import class_votes

router = APIRouter(tags=["learning"], route_class=FastJSONRoute)
errors = error_responses((400, 401, 403, 404, 409, 413, 422, 503))
feedback_errors = error_responses((400, 401, 403, 404, 409, 410, 413, 422, 503))


# The hot routes answer with orjson directly; ``response_model`` still documents the body.
@router.post("/predict", responses=errors, response_model=PredictResponse)
async def predict(body: PredictRequest, who: Reader) -> Response:
    """Predict a label now; send its true label later to /feedback."""
    who.check(Role.predict, body.model)
    config, (p,) = await who.worker.learning.predict(body.model, [body.features])
    return json_response(
        {
            "prediction_id": p.prediction_id,
            "label": p.label,
            "score": None,
            "scores": None,
            "probabilities": None,
            **score_fields(config, p.scores),
            "version": p.version,
        }
    )


@router.post("/predict/batch", responses=errors)
async def predict_batch(body: PredictBatchRequest, who: Reader) -> PredictBatchResponse:
    """Predict many examples with one version of the model."""
    who.check(Role.predict, body.model)
    config, preds = await who.worker.learning.predict(body.model, body.examples())
    return predict_batch_response(config, preds)


@router.post("/feedback", responses=feedback_errors, response_model=FeedbackResponse)
async def submit_feedback(body: FeedbackRequest, who: Trainer) -> Response:
    """Give the true label of a prediction: counts the mistake and learns from it, once."""
    (f,) = await who.worker.learning.submit_feedback(
        [(_checked_id(who, body.prediction_id), body.label)], who.source
    )
    if isinstance(f, ServiceError):
        raise f
    answer: dict[str, object] = {
        "mistake": f.mistake,
        "updated": f.updated,
        "version": f.version,
        "duplicate": f.duplicate,
    }
    if f.labelled_by is not None:
        answer["labelled_by"] = f.labelled_by
    return json_response(answer)


@router.post("/feedback/batch", responses=feedback_errors)
async def submit_feedback_batch(body: FeedbackBatchRequest, who: Trainer) -> FeedbackBatchResponse:
    """Give many true labels; each item gets its own result or error, in order."""
    results = await who.worker.learning.submit_feedback(
        [(_checked_id(who, f.prediction_id), f.label) for f in body.feedback], who.source
    )
    out = []
    for f in results:
        if isinstance(f, ServiceError):
            error = ErrorResponse(detail=f.message, code=f.code, labelled_by=f.labelled_by)
            out.append(FeedbackItemResult(error=error))
        else:
            out.append(
                FeedbackItemResult(
                    mistake=f.mistake,
                    updated=f.updated,
                    version=f.version,
                    duplicate=f.duplicate,
                    labelled_by=f.labelled_by,
                )
            )
    return FeedbackBatchResponse(results=out)


@router.post("/learn", responses=errors, response_model=LearnResponse)
async def learn(body: LearnRequest, who: Trainer) -> Response:
    """Predict and learn a labelled example in one atomic step."""
    who.check(Role.train, body.model)
    ((label, mistake, updated, version),) = await who.worker.learning.learn(
        body.model, [body.features], [body.label], who.source
    )
    return json_response(
        {"label": label, "mistake": mistake, "updated": updated, "version": version}
    )


@router.post("/learn/batch", responses=errors, response_model=LearnBatchResponse)
async def learn_batch(body: LearnBatchRequest, who: Trainer) -> Response:
    """Predict then learn many labelled examples in order, atomically, as one sequence."""
    who.check(Role.train, body.model)
    results = await who.worker.learning.learn(body.model, body.examples(), body.labels, who.source)
    labels, mistakes, updated, versions = columns(results)
    return json_response(
        {
            "labels": labels,
            "mistakes": mistakes,
            "updated": updated,
            "version": versions[-1],
            "mistake_count": sum(mistakes),
        }
    )


def _checked_id(who: Caller, text: str) -> PredictionId | None:
    """The prediction id ``text`` holds, parsed once, if the caller may train its model (403
    otherwise); None if it cannot be an id, which the learning layer answers as not found."""
    pid = PredictionId.parse(text)
    if pid is not None:
        who.check(Role.train, pid.model)
    return pid


# -- the answers' bodies ----------------------------------------------------------------


def score_fields(config: ModelConfig, scores: np.ndarray) -> dict[str, object]:
    """``score`` for a binary model; ``scores`` by class otherwise (ovo: votes); and
    ``probabilities`` where the learner has them."""
    found: dict[str, object] = {}
    probabilities = config.learner.probabilities(config, scores)
    if probabilities is not None:
        found["probabilities"] = probabilities.tolist()
    if config.binary:
        found["score"] = float(scores[0])
        return found
    if config.multiclass == "ovo":
        scores = class_votes(config.n_classes, scores)
    found["scores"] = {str(c): float(s) for c, s in zip(config.classes, scores, strict=True)}
    return found


def predict_batch_response(config: ModelConfig, preds: Sequence[Predicted]) -> PredictBatchResponse:
    """The body of /predict/batch: each prediction, and the version they were made with."""
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
