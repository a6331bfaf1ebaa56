"""What the API says of the learners, read from the registry: each learner's settings as
fields of a model's and a challenger's configuration, and the answer of ``GET /learners``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from service.learner.interface import Setting
from service.learner.registry import LEARNERS, SETTINGS, learners_by_setting

FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]
AlgorithmName: Any = Literal[tuple(LEARNERS)]  # (checked against the registry at run time)


def _absent(value: object) -> bool:
    return value is None


def setting_text(name: str) -> str:
    """A setting's description: what it takes for each learner that has it, with its default."""
    parts = []
    for learner_name in learners_by_setting()[name]:
        s = next(s for s in LEARNERS[learner_name].settings if s.name == name)
        parts.append(f"{learner_name}: {s.text} (default {_json(s.default)})")
    return "; ".join(parts) + ". Only for these learners; left out, the learner's default."


def setting_fields() -> dict[str, Any]:
    """Each learner's settings as optional fields (``create_model``'s form): left out, a
    setting is its learner's default, and an answer leaves out those of other learners (null
    is refused, as for any other field)."""
    return {
        name: (
            StrictBool if s.boolean else FiniteFloat,
            Field(None, description=setting_text(name), exclude_if=_absent),
        )
        for name, s in SETTINGS.items()
    }


def algorithm_text() -> str:
    names = ", ".join(f"'{n}' ({learner.text})" for n, learner in LEARNERS.items())
    return f"The learner: {names}"


def _json(value: float | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else f"{value!r}"


class SettingInfo(BaseModel):
    name: str
    default: float | bool
    description: str
    type: Literal["number", "boolean"]
    short: str = Field(description="How a summary writes it ('lr').")


class LearnerInfo(BaseModel):
    name: str = Field(description="What a configuration's 'algorithm' names it by.")
    title: str = Field(description="What the dashboard calls it.")
    description: str
    settings: list[SettingInfo]
    strategies: list[str] = Field(description="How it learns more than two classes.")
    probabilities: bool = Field(description="Whether /predict answers its probabilities.")


def _example(schema: dict[str, Any]) -> None:
    schema["examples"] = [learner_list().model_dump()]  # (the answer itself)


class LearnerList(BaseModel):
    model_config = ConfigDict(json_schema_extra=_example)

    learners: list[LearnerInfo]


def _setting_info(s: Setting) -> SettingInfo:
    kind: Literal["number", "boolean"] = "boolean" if s.boolean else "number"
    return SettingInfo(
        name=s.name, default=s.default, description=s.text, type=kind, short=s.short or s.name
    )


def learner_list() -> LearnerList:
    return LearnerList(
        learners=[
            LearnerInfo(
                name=name,
                title=learner.title or name,
                description=learner.text,
                settings=[_setting_info(s) for s in learner.settings],
                strategies=list(learner.strategies),
                probabilities=learner.has_probabilities,
            )
            for name, learner in LEARNERS.items()
        ]
    )
