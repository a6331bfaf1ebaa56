"""The service's answers as the client reads them: typed, and free of the server's code.

Each class declares the fields of the answer of the same name in the service's OpenAPI
document, in the same order and with the same JSON types; ``tests/test_client_answers.py``
holds the two together, so a field added, dropped or retyped on either side fails a test.
Fields the service may leave out or send as null default to ``None``, as there.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "ChallengerInfo",
    "Challengers",
    "LearnerRates",
    "Promotion",
    "ServedLearner",
    "CheckpointInfo",
    "UndoResponse",
    "UpdateInfo",
    "Updates",
    "Checkpoints",
    "Confusion",
    "DriftEvent",
    "DriftReport",
    "LearnerDrift",
    "Counters",
    "Curve",
    "CurvePoint",
    "ErrorResponse",
    "FeedbackBatchResponse",
    "FeedbackItemResult",
    "FeedbackResponse",
    "Health",
    "Label",
    "LearnBatchResponse",
    "LearnResponse",
    "MistakeBound",
    "MistakeRates",
    "ModelInfo",
    "ModelList",
    "LearnerInfo",
    "LearnerList",
    "SettingInfo",
    "ModelMetrics",
    "ModelSpec",
    "PredictBatchResponse",
    "PredictResponse",
    "RollbackResponse",
    "Series",
    "SeriesPoint",
    "WeightRow",
    "WeightsResponse",
]

Label = int | str


class ErrorResponse(BaseModel):
    """The body of every error answer."""

    detail: str
    code: str
    labelled_by: str | None = None  # "default": a second label for a prediction labelled so


# --- models ---------------------------------------------------------------------------------


class ModelSpec(BaseModel):
    """A model's configuration, fixed at creation: its own fields, its learner (``algorithm``,
    one of ``GET /learners``) and that learner's settings (``settings()``; the perceptron's
    ``learning_rate``, ``margin`` and ``averaged`` are fields, None for another learner)."""

    model_config = ConfigDict(extra="allow")

    classes: list[Label]
    multiclass: str
    n_features: int | None
    hash_bits: int
    fit_bias: bool
    feedback_ttl_s: int
    default_label: Label | None = None
    algorithm: str = "perceptron"
    drift: dict[str, Any] | None = None  # its drift detector's configuration (None: none)
    learning_rate: float | None = None
    margin: float | None = None
    averaged: bool | None = None

    def settings(self) -> dict[str, Any]:
        """The learner's settings, by name."""
        own = {"learning_rate": self.learning_rate, "margin": self.margin}
        own["averaged"] = self.averaged
        return {k: v for k, v in {**own, **(self.model_extra or {})}.items() if v is not None}


class Counters(BaseModel):
    """A model's counters since creation, reset or import."""

    predictions: int = 0
    feedback: int = 0
    learned: int = 0
    mistakes: int = 0
    updates: int = 0
    duplicates: int = 0
    conflicts: int = 0
    unknown_feedback: int = 0
    expired: int = 0
    defaulted: int = 0
    defaulted_mistakes: int = 0
    drift_warnings: int = 0
    drifts: int = 0
    retrains: int = 0
    seen: int = 0


class ModelInfo(BaseModel):
    name: str
    config: ModelSpec
    version: int
    created: int
    counters: Counters


class CheckpointInfo(BaseModel):
    id: int
    version: int
    seen: int
    time: float
    reason: str
    mistake_rate: float | None = None
    window: int
    bytes: int


class Checkpoints(BaseModel):
    """A model's checkpoints, oldest first; every version from ``restorable_from`` to
    ``version`` can be rolled back to by its number."""

    name: str
    version: int
    restorable_from: int
    bytes: int
    checkpoints: list[CheckpointInfo]


class DriftEvent(BaseModel):
    """A warning or a drift of a model's drift detector."""

    learner: str  # "served", or a challenger's id
    kind: Literal["warning", "drift"]
    at_seen: int  # the labelled examples the learner had seen when it came
    time: float | None  # (None for a challenger's: its at_seen says when)
    action: str | None = None
    version: int | None = None  # a retrain's: the model's version just before it


class LearnerDrift(BaseModel):
    learner: str
    state: Literal["stable", "warning", "drift"]
    seen: int


class DriftReport(BaseModel):
    """A model's drift detector (its configuration's ``drift``; None: none), each learner's
    state, and their last events, oldest first (``GET /models/{name}/drift``)."""

    drift: dict[str, Any] | None
    learners: list[LearnerDrift]
    events: list[DriftEvent]


class UpdateInfo(BaseModel):
    version: int
    source: str | None = None
    time: float | None = None
    label: Label


class Updates(BaseModel):
    """A model's kept updates, oldest first, each with the name of the API key that caused it
    and when; ``sources``: how many of them each key caused."""

    name: str
    version: int
    restorable_from: int
    updates: list[UpdateInfo]
    sources: dict[str, int]


class UndoResponse(BaseModel):
    name: str
    version: int
    removed: int
    undo_checkpoint: int | None = None  # rolling back to it undoes the undo (None: no change)
    before: int | None = None  # undo_checkpoint, by its former name


class RollbackResponse(BaseModel):
    name: str
    version: int
    restored_checkpoint: int | None = None  # None: a version was restored
    undo_checkpoint: int  # rolling back to it undoes the rollback
    checkpoint: int | None = None  # restored_checkpoint, by its former name
    before: int | None = None  # undo_checkpoint, by its former name


class ModelList(BaseModel):
    models: list[ModelInfo]


class SettingInfo(BaseModel):
    """One setting of a learner: its default and what it takes."""

    name: str
    default: float | bool
    description: str
    type: str  # "number" or "boolean"
    short: str


class LearnerInfo(BaseModel):
    """A learner a model's ``algorithm`` may name (``GET /learners``)."""

    name: str
    title: str
    description: str
    settings: list[SettingInfo]
    strategies: list[str]
    probabilities: bool


class LearnerList(BaseModel):
    learners: list[LearnerInfo]


class WeightRow(BaseModel):
    target: str
    weights: list[float] | dict[str, float]
    bias: float


class WeightsResponse(BaseModel):
    model: str
    version: int
    seen: int
    rows: list[WeightRow]
    averaged: list[WeightRow] | None = None


# --- metrics --------------------------------------------------------------------------------


class MistakeRates(BaseModel):
    cumulative: float | None
    last_100: float | None
    last_1000: float | None
    last_100_examples: int = 0  # the examples each window is over (after an import: since)
    last_1000_examples: int = 0
    without_defaults: float | None = None


class SeriesPoint(BaseModel):
    t: int
    examples: int
    mistakes: int
    rate: float | None
    examples_total: int
    mistakes_total: int


class Series(BaseModel):
    bucket_s: int
    points: list[SeriesPoint]


class CurvePoint(BaseModel):
    examples: int
    mistakes: int
    rate: float


class Curve(BaseModel):
    every: int
    points: list[CurvePoint]


class Confusion(BaseModel):
    labels: list[Label]
    matrix: list[list[int]]


class SourceCounts(BaseModel):
    source: str
    labelled: int
    mistakes: int
    updates: int


class MistakeBound(BaseModel):
    estimate: bool = True
    applies: bool
    reason: str | None = None
    mistakes: int
    window: int
    R: float | None = None
    gamma: float | None = None
    bound: float | None = None
    separable: bool | None = None


class LabelDelays(BaseModel):
    """How late labels come (seconds), and the share of them that came by default."""

    median_s: float | None
    p95_s: float | None
    counted: int
    defaulted_share: float | None
    awaiting_default: int


class ModelMetrics(BaseModel):
    model: str
    version: int
    counters: Counters
    mistake_rate: MistakeRates
    series: Series
    curve: Curve
    confusion: Confusion
    weight_norm: float
    max_feature_norm: float
    mistake_bound: MistakeBound
    sources: list[SourceCounts]
    labels: LabelDelays | None = None


# --- learning -------------------------------------------------------------------------------


class PredictResponse(BaseModel):
    prediction_id: str
    label: Label
    score: float | None = None
    scores: dict[str, float] | None = None
    # each class's probability, in the model's classes' order (None: its learner has none)
    probabilities: list[float] | None = None
    version: int


class PredictBatchResponse(BaseModel):
    predictions: list[PredictResponse]
    version: int


class FeedbackResponse(BaseModel):
    mistake: bool
    updated: bool
    version: int
    duplicate: bool = False
    labelled_by: str | None = None  # "default": the prediction was labelled by default


class FeedbackItemResult(BaseModel):
    """One item of a /feedback/batch answer: its result, or its ``error``."""

    mistake: bool | None = None
    updated: bool | None = None
    version: int | None = None
    duplicate: bool | None = None
    labelled_by: str | None = None
    error: ErrorResponse | None = None


class FeedbackBatchResponse(BaseModel):
    results: list[FeedbackItemResult]


class LearnResponse(BaseModel):
    label: Label
    mistake: bool
    updated: bool
    version: int


class LearnBatchResponse(BaseModel):
    labels: list[Label]
    mistakes: list[bool]
    updated: list[bool]
    version: int
    mistake_count: int


class Health(BaseModel):
    status: str
    store: str | None = None


# --- challengers ----------------------------------------------------------------------------


class LearnerRates(BaseModel):
    all: float | None
    last_100: float | None
    last_1000: float | None


class ServedLearner(BaseModel):
    """The learner that serves, counted as a challenger is (``Challengers.served``)."""

    id: str
    config: dict[str, Any]
    seen: int
    mistakes: int
    updates: int
    mistake_rate: LearnerRates


class ChallengerInfo(BaseModel):
    """One challenger: its configuration and its figures since it joined (``since``: the
    model's labels before it was added), counted by progressive validation; beside them the
    served learner's mistakes on the same examples (``served_mistakes``)."""

    promotable: bool
    not_promotable: str | None = None  # why it cannot serve this model
    id: str
    config: dict[str, Any]
    since: int
    seen: int
    mistakes: int
    served_mistakes: int | None  # the served learner's on the same examples
    updates: int
    drift_warnings: int = 0  # its drift detector's (the model's configuration's drift)
    drifts: int = 0
    mistake_rate: LearnerRates
    curve: Curve
    weights: ChallengerWeights | None = None  # asked for with weights=True


class ChallengerWeights(BaseModel):
    """A challenger's weights (``w``: a row each, of the model's dimension) and biases."""

    w: list[list[float]]
    b: list[float]


class Challengers(BaseModel):
    """``GET /models/{name}/challengers``: the served learner and each challenger."""

    model: str
    labels: int
    served: ServedLearner
    challengers: list[ChallengerInfo]


class Promotion(BaseModel):
    """``POST /models/{name}/promote``: who serves now, and the checkpoint of before."""

    model: str
    promoted: str
    demoted: str
    checkpoint: int
    config: dict[str, Any]
