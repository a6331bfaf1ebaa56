"""Request and response bodies, named by direction."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import pybase64
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    create_model,
    model_validator,
)

from service.api.openapi import openapi_examples
from service.api.schemas import learner_schemas
from service.api.schemas.drift_schemas import DRIFT_TEXT, DriftSpec
from service.contract.names import NAME_MAX, NAME_PATTERN
from service.contract.store_protocol import MAX_COUNT
from service.errors import InvalidInput
from service.learner import ModelConfig
from service.learner.registry import SETTINGS

FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]
# Versions and checkpoint ids: integers (never booleans, strings or 1.0) the store keeps exact.
Version = Annotated[int, Field(strict=True, le=MAX_COUNT)]
# Times the service keeps (milliseconds, within MAX_COUNT), as Unix seconds: finite numbers.
MAX_TIME_S = MAX_COUNT // 1000
Time = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=MAX_TIME_S)]
LabelValue = StrictInt | StrictStr
# Values are checked by the learner (numbers, finite), which names the problem precisely.
_FEATURES_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "array", "items": {"type": "number"}},
        {"type": "object", "additionalProperties": {"type": "number"}},
    ]
}
FeatureValues = Annotated[list[Any] | dict[str, Any], WithJsonSchema(_FEATURES_SCHEMA)]
# A batch's examples are checked by the learner one by one too, each a list or an object:
# leaving them untyped here spares a check per example that would cost as much as learning it.
FeatureBatch = Annotated[
    list[Any],
    Field(min_length=1),
    WithJsonSchema({"type": "array", "items": _FEATURES_SCHEMA, "minItems": 1}),
]
ModelName = Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]

# What each request field takes, in words: the OpenAPI document shows them, and a request that
# gets one wrong is told them (``problems.py``).
MODEL = "A model's name: 1-64 letters, digits, '_', '-' or '.' (default: 'default')."
FEATURES = (
    "An example: a list of numbers for a dense model, or an object of feature names to "
    "numbers for a named-feature model."
)
FEATURE_BATCH = (
    "A list of 1 or more examples, each a list of numbers (dense model) or an object of "
    "feature names to numbers (named features)."
)
LABEL = "The true label, one of the model's classes: an integer or a string."


def with_examples(bodies: list[Any]) -> ConfigDict:
    """A schema's examples (``openapi_examples.py``): what /docs and /redoc show for it."""
    return ConfigDict(json_schema_extra={"examples": bodies})


LABELLED_BY = (
    "'default' where the prediction was labelled by its model's default_label (no label came "
    "within its wait): this label came after it (absent otherwise)."
)


class ErrorResponse(BaseModel):
    model_config = with_examples([openapi_examples.ERROR])

    detail: str
    code: str
    labelled_by: Literal["default"] | None = Field(None, description=LABELLED_BY)


def error_responses(statuses: Iterable[int]) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of routes that may answer these error statuses, each with an
    example of that status."""
    return {
        status: {
            "model": ErrorResponse,
            "content": {"application/json": {"example": openapi_examples.ERRORS[status]}},
        }
        for status in statuses
    }


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


_CONFIG = ModelConfig()  # every parameter's default, declared once: by the learner


def _config_field(name: str, takes: str, **constraints: Any) -> Any:
    """A configuration parameter of the API: its default is the learner's, and its description
    (what it takes) ends with that default, as JSON."""
    default = getattr(_CONFIG, name)
    if isinstance(default, tuple):
        default = list(default)
    text = f"{takes} (default {json.dumps(default)})."
    return Field(default=default, description=text, **constraints)


class ModelSpecFields(Body):
    """A model's configuration, fixed at creation: its own fields; ``ModelSpec`` adds each
    learner's settings, from the registry."""

    model_config = with_examples(openapi_examples.MODEL_SPEC)

    classes: list[LabelValue] = _config_field(
        "classes",
        "The labels: 2 or more integers or strings, all different; with two, the second is "
        "the positive class",
        min_length=2,
    )
    multiclass: Literal["multiclass", "ovr", "ovo"] = _config_field(
        "multiclass", "'multiclass', 'ovr' or 'ovo': how more than two classes are learned"
    )
    n_features: StrictInt | None = _config_field(
        "n_features",
        "The number of features of a dense model, an integer; null for named features",
    )
    hash_bits: StrictInt = _config_field(
        "hash_bits", "An integer: named features are hashed into 2**hash_bits weights"
    )
    fit_bias: StrictBool = _config_field("fit_bias", "true or false: learn a bias")
    feedback_ttl_s: StrictInt = _config_field(
        "feedback_ttl_s", "An integer: how many seconds a prediction waits for its label"
    )
    default_label: LabelValue | None = _config_field(
        "default_label",
        "One of the classes, or null: the label a prediction is learned with when its wait "
        "runs out with no label (null: it then takes none)",
    )
    algorithm: str = Field("perceptron", description=learner_schemas.algorithm_text())
    drift: DriftSpec | None = Field(None, description=DRIFT_TEXT)

    def settings(self) -> dict[str, Any]:
        """The configuration as ``ModelConfig`` takes it: the settings given, no others."""
        given = {k: v for k, v in self.model_dump().items() if v is not None or k not in SETTINGS}
        return given | {"drift": None if self.drift is None else self.drift.given()}


if TYPE_CHECKING:
    ModelSpec = ModelSpecFields
else:
    ModelSpec = create_model(
        "ModelSpec",
        __base__=ModelSpecFields,
        __doc__="A model's configuration, fixed at creation.",
        algorithm=(
            learner_schemas.AlgorithmName,
            Field("perceptron", description=learner_schemas.algorithm_text()),
        ),
        **learner_schemas.setting_fields(),
    )


class Counters(BaseModel):
    """A model's counters: service/contract/store_protocol.py's COUNTERS
    (tests/test_protocol.py checks that this class names each of them)."""

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
    model_config = with_examples(openapi_examples.MODEL_INFO_EXAMPLES)

    name: str
    config: ModelSpec
    version: int = Field(description="Number of weight updates so far.")
    created: int = Field(description="Creation time, Unix seconds.")
    counters: Counters


class ModelList(BaseModel):
    model_config = with_examples(openapi_examples.MODEL_LIST)

    models: list[ModelInfo]


class PredictRequest(Body):
    model_config = with_examples(openapi_examples.PREDICT_REQUEST)

    model: ModelName = Field("default", description=MODEL)
    features: FeatureValues = Field(description=FEATURES)


class PredictResponse(BaseModel):
    model_config = with_examples(openapi_examples.PREDICT_RESPONSE)

    prediction_id: str
    label: LabelValue
    score: float | None = Field(None, description="Binary models: w.x + b.")
    scores: dict[str, float] | None = Field(
        None, description="Multiclass models: score per class (ovo: votes per class)."
    )
    probabilities: list[float] | None = Field(
        None,
        description="Each class's probability, in the order of the model's classes, from a "
        "learner that has them (GET /learners); null from one that has none.",
    )
    version: int


class FeedbackRequest(Body):
    model_config = with_examples(openapi_examples.FEEDBACK_REQUEST)

    prediction_id: Annotated[str, Field(min_length=1, max_length=200)] = Field(
        description="The prediction_id of an answer of /predict: a string."
    )
    label: LabelValue = Field(description=LABEL)


class FeedbackResponse(BaseModel):
    model_config = with_examples(openapi_examples.FEEDBACK_RESPONSE)

    mistake: bool
    updated: bool
    version: int
    duplicate: bool = False
    labelled_by: Literal["default"] | None = Field(None, description=LABELLED_BY)


class LearnRequest(Body):
    model_config = with_examples(openapi_examples.LEARN_REQUEST)

    model: ModelName = Field("default", description=MODEL)
    features: FeatureValues = Field(description=FEATURES)
    label: LabelValue = Field(description=LABEL)


class LearnResponse(BaseModel):
    model_config = with_examples(openapi_examples.LEARN_RESPONSE)

    label: LabelValue = Field(description="The prediction made before learning.")
    mistake: bool
    updated: bool
    version: int


PackedFeatures = Annotated[
    str,
    Field(
        min_length=1,
        description="A string, instead of `features`, for a dense model: every example's "
        "feature values, one example after another, as little-endian float64 numbers, "
        "base64-encoded (RFC 4648, with padding). Several times cheaper to read than JSON "
        "numbers.",
    ),
]


class _Batch(Body):
    """A batch of examples, as JSON ``features`` or as ``packed_features``."""

    model: ModelName = Field("default", description=MODEL)
    features: FeatureBatch | None = Field(None, description=FEATURE_BATCH)
    packed_features: PackedFeatures | None = None

    @model_validator(mode="after")
    def _one_form(self) -> _Batch:
        if (self.features is None) == (self.packed_features is None):
            raise ValueError("give the examples as either features or packed_features")
        return self

    def examples(self) -> list[Any] | np.ndarray:
        """The examples: JSON features as sent, or the packed values decoded."""
        if self.packed_features is None:
            assert self.features is not None
            return self.features
        try:
            raw = pybase64.b64decode(self.packed_features, validate=True)  # SIMD: ~15 GB/s
        except ValueError as e:  # binascii.Error, or a character beyond ASCII
            raise InvalidInput(
                f"packed_features is not valid base64 ({e}).", code="invalid_packed_features"
            ) from e
        if len(raw) % 8:
            raise InvalidInput(
                f"packed_features holds {len(raw)} bytes: not a whole number of float64 values.",
                code="invalid_packed_features",
            )
        return np.frombuffer(raw, dtype="<f8")


class PredictBatchRequest(_Batch):
    model_config = with_examples(openapi_examples.PREDICT_BATCH_REQUEST)


class PredictBatchResponse(BaseModel):
    model_config = with_examples(openapi_examples.PREDICT_BATCH_RESPONSE)

    predictions: list[PredictResponse]
    version: int


class FeedbackBatchRequest(Body):
    model_config = with_examples(openapi_examples.FEEDBACK_BATCH_REQUEST)

    feedback: list[FeedbackRequest] = Field(
        min_length=1, description="A list of 1 or more objects {prediction_id, label}."
    )


class FeedbackItemResult(BaseModel):
    mistake: bool | None = None
    updated: bool | None = None
    version: int | None = None
    duplicate: bool | None = None
    labelled_by: Literal["default"] | None = Field(None, description=LABELLED_BY)
    error: ErrorResponse | None = None


class FeedbackBatchResponse(BaseModel):
    model_config = with_examples(openapi_examples.FEEDBACK_BATCH_RESPONSE)

    results: list[FeedbackItemResult]


class LearnBatchRequest(_Batch):
    model_config = with_examples(openapi_examples.LEARN_BATCH_REQUEST)

    labels: list[LabelValue] = Field(
        min_length=1,
        description="The true labels, one per example, each one of the model's classes (an "
        "integer or a string).",
    )

    @model_validator(mode="after")
    def _same_length(self) -> LearnBatchRequest:
        if self.features is not None and len(self.features) != len(self.labels):
            raise ValueError(
                f"features and labels must have the same length; got {len(self.features)} "
                f"and {len(self.labels)}"
            )
        return self


class LearnBatchResponse(BaseModel):
    model_config = with_examples(openapi_examples.LEARN_BATCH_RESPONSE)

    labels: list[LabelValue] = Field(description="The prediction made before learning each.")
    mistakes: list[bool]
    updated: list[bool]
    version: int
    mistake_count: int


class WeightRow(BaseModel):
    target: str = Field(description="What the row scores: a class, 'i|j' for ovo, or 'binary'.")
    weights: list[float] | dict[str, float] = Field(
        description="Dense models: a list; named features: non-zero buckets by index."
    )
    bias: float


class WeightsResponse(BaseModel):
    model_config = with_examples(openapi_examples.WEIGHTS)

    model: str
    version: int
    seen: int
    rows: list[WeightRow]
    averaged: list[WeightRow] | None = None


class Health(BaseModel):
    model_config = with_examples(openapi_examples.HEALTH)

    status: str
    store: str | None = None
