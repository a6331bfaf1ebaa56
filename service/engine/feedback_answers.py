"""What the items of a feedback commit answer, from the store's reply, and what a prediction
id's time tells: how late its label is, and the delay the store counts."""

from __future__ import annotations

from dataclasses import dataclass

from service.contract.names import issued_ms
from service.contract.store_protocol import Status, delay_bucket
from service.contract.store_values import FeedbackBatch
from service.errors import (
    Conflict,
    InvalidInput,
    PredictionExpired,
    PredictionNotFound,
    ServiceError,
)
from service.learner import ModelConfig


@dataclass(frozen=True, slots=True)
class Feedback:
    mistake: bool
    updated: bool
    version: int
    duplicate: bool
    labelled_by: str | None = None  # "default": the prediction was labelled by default first


LABELLED_BY_DEFAULT = "default"


def answers(
    config: ModelConfig, batch: FeedbackBatch, late_s: list[float | None]
) -> list[Feedback | ServiceError]:
    """Each feedback item's answer, or its error, from the store's."""
    ttl_s = config.feedback_ttl_s
    out: list[Feedback | ServiceError] = []
    for item, late_by in zip(batch.items, late_s, strict=True):
        by = LABELLED_BY_DEFAULT if item.by_default else None
        if item.status == Status.UNKNOWN:
            out.append(PredictionNotFound())
        elif item.status == Status.EXPIRED:
            out.append(PredictionExpired(late_by or 0.0, ttl_s))
        elif item.status == Status.BAD_LABEL:
            out.append(BadLabel())
        elif item.given is not None:
            given = config.classes[item.given]
            how = " (its default label: no label came within its wait)" if by else ""
            conflict = Conflict(
                f"This prediction already has the true label {given!r}{how}; a "
                "prediction takes one true label.",
                code="feedback_conflict",
            )
            conflict.labelled_by = by
            out.append(conflict)
        else:
            duplicate = item.status == Status.DUPLICATE
            out.append(Feedback(item.mistake, item.updated, item.version, duplicate, by))
    return out


def late_s(token: str, ttl_s: int, now_ms: int) -> float | None:
    """How long ago the wait of the prediction ``token`` names ran out, by the time its id
    tells; None while it runs, or when the id tells no time."""
    issued = issued_ms(token)
    if issued is None or issued + 1000 * ttl_s > now_ms:
        return None
    return (now_ms - issued) / 1000 - ttl_s


def delay(token: str, now_ms: int) -> str:
    """The delay from the prediction ``token`` names to its label now, as the feedback script
    counts it: "<bucket>:<ms>", or "-" when the id tells no time."""
    issued = issued_ms(token)
    if issued is None:
        return "-"
    ms = max(0, now_ms - issued)
    return f"{delay_bucket(ms / 1000)}:{ms}"


class BadLabel(InvalidInput):
    """A feedback item the store answered BAD_LABEL: its label, named by the caller."""

    def __init__(self) -> None:
        super().__init__("The label is none of the model's classes.", code="unknown_label")
