"""``GET /learners``: the learners a model can name, their settings and what they answer."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.callers import Reader
from service.api.schemas.learner_schemas import LearnerList, learner_list
from service.api.schemas.model_schemas import error_responses

router = APIRouter(tags=["models"])


@router.get("/learners", responses=error_responses((401, 403)))
async def list_learners(who: Reader) -> LearnerList:
    """The learners a model's 'algorithm' may name: each one's settings with their defaults,
    how it learns more than two classes, and whether /predict answers its probabilities."""
    return learner_list()
