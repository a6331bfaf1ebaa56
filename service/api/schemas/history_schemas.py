"""The bodies and answers of the model-history routes: checkpoints, kept updates, rollback,
undo."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from service.api.openapi import openapi_history_examples
from service.api.schemas.model_schemas import Body, LabelValue, Time, Version, with_examples
from service.contract.names import KEY_NAME_PATTERN


class CheckpointInfo(BaseModel):
    id: int = Field(description="The checkpoint's number: POST /models/{name}/rollback takes it.")
    version: int = Field(description="The model's version it restores.")
    seen: int = Field(
        description="Labelled examples the model had at that version (a 'start' or "
        "'scheduled' checkpoint of a version before the model's own when it was made, of a "
        "learner without averaging: those it had when it was made)."
    )
    time: float = Field(description="When it was made, Unix seconds.")
    reason: str = Field(
        description="Why: 'scheduled', 'start' (where the kept updates start), 'before reset', "
        "'before import', 'before rollback', 'before undo', 'before promotion' or 'left'."
    )
    mistake_rate: float | None = Field(
        None,
        description="Mistakes among the last `window` labelled examples then (null: none "
        "yet, or not known: a 'start' or 'scheduled' checkpoint of a version before the "
        "model's own when it was made).",
    )
    window: int
    bytes: int = Field(description="What it takes in Redis: its weights (and updates).")


class Checkpoints(BaseModel):
    model_config = with_examples([openapi_history_examples.CHECKPOINTS])

    name: str
    version: int = Field(description="The model's version now.")
    restorable_from: int = Field(
        description="Every version from this one to `version` can be restored by its number."
    )
    bytes: int = Field(description="The model's checkpoints and kept updates, in bytes.")
    checkpoints: list[CheckpointInfo] = Field(description="Oldest first.")


class UpdateInfo(BaseModel):
    version: int = Field(description="The model's version this update made.")
    source: str | None = Field(
        None,
        description="The name of the API key that caused it ('' with keys off; null: made "
        "before updates recorded it).",
    )
    time: float | None = Field(None, description="When, Unix seconds (null: not recorded).")
    label: LabelValue = Field(description="The true label of the example it learned.")


class Updates(BaseModel):
    model_config = with_examples([openapi_history_examples.UPDATES])

    name: str
    version: int = Field(description="The model's version now.")
    restorable_from: int
    updates: list[UpdateInfo] = Field(description="Oldest first.")
    sources: dict[str, int] = Field(description="How many of these updates each key caused.")


class RollbackRequest(Body):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [openapi_history_examples.ROLLBACK_REQUEST, {"checkpoint": 3}]
        },
    )

    version: Version | None = Field(
        None, ge=0, description="An integer: the version to restore (from `restorable_from` on)."
    )
    checkpoint: Version | None = Field(
        None, ge=1, description="An integer: or the id of the checkpoint to restore."
    )

    @model_validator(mode="after")
    def _one(self) -> RollbackRequest:
        if (self.version is None) == (self.checkpoint is None):
            raise ValueError("Give either version or checkpoint.")
        return self


class UndoRequest(Body):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [openapi_history_examples.UNDO_REQUEST]}
    )

    source: str | None = Field(
        None,
        pattern=f"^(?:{KEY_NAME_PATTERN})?$",
        description="Leave out the updates this API key (its name: 1-64 letters, digits, '_', "
        "'-' or '.') caused; '' those of no key (made with keys off).",
    )
    from_time: Time | None = Field(
        None, description="A number: leave out the updates made from then on (Unix seconds)..."
    )
    to_time: Time | None = Field(
        None, description="A number: ...and before then (Unix seconds, after from_time)."
    )

    @model_validator(mode="after")
    def _some(self) -> UndoRequest:
        if self.source is None and self.from_time is None and self.to_time is None:
            raise ValueError("Give a source, a time range, or both.")
        start, stop = self.from_time, self.to_time
        if start is not None and stop is not None and start >= stop:
            raise ValueError(
                f"Give a from_time before to_time (got {start} and {stop}): the range is from "
                "from_time up to, not including, to_time"
            )
        return self


class UndoResponse(BaseModel):
    model_config = with_examples([openapi_history_examples.UNDO_RESPONSE])

    name: str
    version: int = Field(description="The model's version now.")
    removed: int = Field(description="Kept updates left out.")
    undo_checkpoint: int | None = Field(
        None,
        description="The checkpoint of the model as it was just before: rolling back to it "
        "undoes this (null: no kept update matched, nothing changed).",
    )
    before: int | None = Field(
        None, deprecated=True, description="`undo_checkpoint`, by its former name."
    )


class RollbackResponse(BaseModel):
    model_config = with_examples([openapi_history_examples.ROLLBACK_RESPONSE])

    name: str
    version: int = Field(description="The model's version now: the one restored.")
    restored_checkpoint: int | None = Field(
        None, description="The checkpoint restored (null: a version was asked for)."
    )
    undo_checkpoint: int = Field(
        description="The checkpoint of the model as it was just before: rolling back to it "
        "undoes this rollback."
    )
    checkpoint: int | None = Field(
        None, deprecated=True, description="`restored_checkpoint`, by its former name."
    )
    before: int = Field(deprecated=True, description="`undo_checkpoint`, by its former name.")
