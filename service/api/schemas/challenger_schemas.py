"""The bodies and answers of the challengers' routes: add one, list them beside the served
learner, promote one. The routes read their bodies as JSON objects, which
``admin/challengers.parse_body`` and ``admin/promotions`` check (each error names the
setting, with the codes the docs give); these classes are what the API's schema says of them,
and what the answers hold."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model

from service.api.schemas.learner_schemas import setting_fields
from service.api.schemas.metrics_schemas import Curve
from service.learner.interface import STRATEGIES
from service.learner.registry import ALGORITHMS


class ChallengerFields(BaseModel):
    """A challenger's learner: each setting left out is the served model's where its learner
    has it, else the default; its classes and features are the model's. ``ChallengerSettings``
    adds each learner's settings, from the registry."""

    model_config = ConfigDict(extra="forbid")

    algorithm: str | None = Field(None, description=f"One of {', '.join(ALGORITHMS)}.")
    multiclass: str | None = Field(
        None,
        description=f"One of {', '.join(STRATEGIES)} (only the model's own can be promoted).",
    )
    from_: str | None = Field(
        None,
        alias="from",
        description="'zeros' (the default) or 'served': start from a copy of the served "
        "weights (only into the model's own 'multiclass').",
    )


if TYPE_CHECKING:
    ChallengerSettings = ChallengerFields
else:
    ChallengerSettings = create_model(
        "ChallengerSettings",
        __base__=ChallengerFields,
        __doc__=ChallengerFields.__doc__,
        **setting_fields(),
    )


class PromoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    challenger: str = Field(description="The id of the challenger to serve.")
    demote_as: str | None = Field(
        None,
        description="The id the learner that served takes among the challengers (default "
        "served-<checkpoint>, or served-<checkpoint>-2, -3... where a challenger has it).",
    )


class LearnerRates(BaseModel):
    all: float | None = Field(description="Mistakes over every example it has seen.")
    last_100: float | None
    last_1000: float | None


class ServedLearner(BaseModel):
    id: str = Field(description="Always 'served'.")
    config: dict[str, Any] = Field(description="The model's configuration.")
    seen: int = Field(description="Labelled examples it was given.")
    mistakes: int = Field(description="Its mistakes at prediction.")
    updates: int = Field(description="The examples that changed its weights: its version.")
    mistake_rate: LearnerRates


class ChallengerInfo(BaseModel):
    promotable: bool = Field(description="Whether it can serve this model.")
    not_promotable: str | None = Field(None, description="Why it cannot (absent when it can).")
    id: str
    config: dict[str, Any] = Field(description="Its configuration.")
    since: int = Field(description="The model's labels before it was added.")
    seen: int = Field(description="Labelled examples it has seen since.")
    mistakes: int = Field(description="Its mistakes, by progressive validation.")
    served_mistakes: int | None = Field(
        description="The served learner's mistakes on the same examples (each as the model "
        "served it): its rate over them is served_mistakes / seen (null: added before this "
        "was counted)."
    )
    updates: int
    drift_warnings: int = Field(description="Warnings of its drift detector (the model's).")
    drifts: int = Field(description="Drifts its detector found in its mistakes.")
    mistake_rate: LearnerRates
    curve: Curve
    weights: ChallengerWeights | None = Field(
        None, description="Its weights and biases, asked for with ?weights=true (else absent)."
    )


class ChallengerWeights(BaseModel):
    w: list[list[float]] = Field(description="Its weights: a row each, of the model's dimension.")
    b: list[float] = Field(description="Its biases, one a row.")


class ChallengersAnswer(BaseModel):
    model: str
    labels: int = Field(description="The model's labels so far.")
    served: ServedLearner
    challengers: list[ChallengerInfo]


class Promotion(BaseModel):
    model: str
    promoted: str = Field(description="The challenger that serves now.")
    demoted: str = Field(description="The id of the learner that served, now a challenger.")
    checkpoint: int = Field(description="The checkpoint of the model as it was before.")
    config: dict[str, Any] = Field(description="The model's configuration now.")


def documented_as(model: type[BaseModel]) -> WithJsonSchema:
    """A body read as a plain JSON object (its checks and their error codes are the route's
    own) that the API's schema describes as ``model``."""
    return WithJsonSchema(model.model_json_schema(by_alias=True))
