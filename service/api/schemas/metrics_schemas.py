"""The answer of ``GET /models/{name}/metrics``: mistake rates, series, the learning curve,
confusion, per-key counts, the mistake bound."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    Field,
)

from service.api.openapi import openapi_examples
from service.api.schemas.model_schemas import Counters, LabelValue, with_examples
from service.learner.challenger import CURVE_POINTS


class MistakeRates(BaseModel):
    cumulative: float | None = Field(description="Mistakes over all labelled openapi_examples.")
    last_100: float | None
    last_1000: float | None
    last_100_examples: int = Field(
        description="The examples last_100 is over: fewer than 100 while the model has seen "
        "fewer, or whose outcomes it knows (after an import: those learned since)."
    )
    last_1000_examples: int = Field(description="The examples last_1000 is over, alike.")
    without_defaults: float | None = Field(
        None, description="Mistakes over the labels that came: those by default left out."
    )


class LabelDelays(BaseModel):
    median_s: float | None = Field(description="Median delay from prediction to label, s.")
    p95_s: float | None = Field(description="95th percentile of that delay, s.")
    counted: int = Field(description="Labels counted (feedback applied; not defaults).")
    defaulted_share: float | None = Field(
        description="Share of the served predictions' labels that came by default."
    )
    awaiting_default: int = Field(
        description="Predictions whose default is still to come: made since the model's last "
        "reset, import, rollback or undo, not labelled, the default not applied yet (those just "
        "past their deadline included until a sweep takes them). 0 without a default_label: "
        "the predictions awaiting a label are not counted then."
    )


class SeriesPoint(BaseModel):
    t: int = Field(description="Start of the bucket, Unix seconds.")
    examples: int
    mistakes: int
    rate: float | None
    examples_total: int = Field(description="Labelled examples up to this bucket (in the window).")
    mistakes_total: int


class Series(BaseModel):
    bucket_s: int
    points: list[SeriesPoint]


class CurvePoint(BaseModel):
    examples: int = Field(description="Labelled examples since creation, reset or import.")
    mistakes: int = Field(description="Mistakes among them.")
    rate: float = Field(description="mistakes / openapi_examples.")


class Curve(BaseModel):
    every: int = Field(description="A point every this many labelled examples (it doubles).")
    points: list[CurvePoint] = Field(description=f"At most {CURVE_POINTS}, oldest first.")


class Confusion(BaseModel):
    labels: list[LabelValue]
    matrix: list[list[int]] = Field(description="matrix[true][served] counts.")


class SourceCounts(BaseModel):
    source: str = Field(
        description="The API key's name (its entry's, else key- and 8 hex digits of its "
        "SHA-256; empty with keys off)."
    )
    labelled: int = Field(description="Labelled examples it sent (feedback and learned).")
    mistakes: int = Field(description="Those the model had served wrong.")
    updates: int = Field(description="Weight updates they caused.")


class MistakeBound(BaseModel):
    estimate: bool = True
    applies: bool
    reason: str | None = None
    mistakes: int
    window: int = Field(description="Labelled examples gamma was measured on.")
    R: float | None = None
    gamma: float | None = None
    bound: float | None = Field(None, description="R^2 / gamma^2 when gamma > 0.")
    separable: bool | None = None


class ModelMetrics(BaseModel):
    model_config = with_examples(openapi_examples.METRICS)

    model: str
    version: int
    counters: Counters
    mistake_rate: MistakeRates
    series: Series
    curve: Curve = Field(description="The learning curve: mistakes over labelled openapi_examples.")
    confusion: Confusion
    weight_norm: float
    max_feature_norm: float = Field(description="R: the largest feature-vector norm seen.")
    mistake_bound: MistakeBound
    sources: list[SourceCounts] = Field(
        description="Per API key: what it taught the model, most labelled first."
    )
    labels: LabelDelays | None = Field(
        None, description="How late the labels come, and how many came by default."
    )
