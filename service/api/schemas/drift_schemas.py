"""A model's drift detector: its configuration (``drift`` in a model's), and what
``GET /models/{name}/drift`` answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

from service.contract.store_protocol import Meta
from service.contract.store_values import drift_events
from service.learner.challenger import ChallengerState
from service.learner.drift_detectors import DDM, EDDM, detector_of, read_state, status_of

DRIFT_TEXT = (
    "A drift detector on the served learner's mistakes, or null (none, the default): "
    '{"detector": "ddm" | "eddm", "on_drift": "alert" | "retrain", ...its parameters}. '
    "DDM (River's drift.binary.DDM; warm_start, warning_threshold, drift_threshold) suits "
    "abrupt changes; "
    "EDDM (River's drift.binary.EDDM; warm_start, alpha, beta) gradual ones. A parameter left "
    "out is River's default. Its warnings and drifts are GET /models/{name}/drift's. With "
    '"retrain", River\'s DriftRetrainingClassifier: while it warns, a background learner of the '
    "same configuration, from zero, learns each labelled example; at a drift it replaces the "
    "served learner, and a fresh one waits for the next warning."
)


class _DetectorSpec(BaseModel):
    """What every drift detector's configuration takes."""

    model_config = ConfigDict(extra="forbid")

    detector: str = Field(description="its name")  # (each detector's names it alone)
    on_drift: Literal["alert", "retrain"] = Field(
        "alert",
        description="what a drift does: alert only, or retrain (a background learner trained "
        "while it warns replaces the served one)",
    )
    warm_start: StrictInt | None = Field(
        None, description=f"examples (ddm) or mistakes (eddm) before it decides ({DDM.warm_start})"
    )

    def given(self) -> dict[str, object]:
        """The parameters given, as a model's configuration takes them."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class DDMSpec(_DetectorSpec):
    """DDM's configuration (River's drift.binary.DDM)."""

    detector: Literal["ddm"] = Field(description="ddm")
    warning_threshold: StrictFloat | None = Field(
        None, description=f"deviations over the best that warn ({DDM.warning_threshold})"
    )
    drift_threshold: StrictFloat | None = Field(
        None, description=f"deviations over the best that detect ({DDM.drift_threshold})"
    )


class EDDMSpec(_DetectorSpec):
    """EDDM's configuration (River's drift.binary.EDDM)."""

    detector: Literal["eddm"] = Field(description="eddm")
    alpha: StrictFloat | None = Field(
        None, description=f"the level under which it warns ({EDDM.alpha})"
    )
    beta: StrictFloat | None = Field(
        None, description=f"the level under which it detects ({EDDM.beta})"
    )


# A drift detector's configuration: its parameters are those of the detector it names.
DriftSpec = Annotated[DDMSpec | EDDMSpec, Field(discriminator="detector")]
SPECS: dict[str, type[DDMSpec] | type[EDDMSpec]] = {"ddm": DDMSpec, "eddm": EDDMSpec}


class DriftEvent(BaseModel):
    learner: str = Field(description="whose mistakes: 'served', or a challenger's id")
    kind: Literal["warning", "drift"]
    at_seen: int = Field(description="labelled examples the learner had seen when it came")
    time: float | None = Field(
        description="when, Unix seconds (null for a challenger's, and for the served learner's "
        "from before it was promoted: its at_seen says when)"
    )
    action: Literal["retrained"] | None = Field(
        None,
        description="what it did: 'retrained' (a drift at which the background learner replaced "
        "the served one: on_drift 'retrain'), or nothing but the alert (null)",
    )
    version: int | None = Field(
        None,
        description="a retrain's: the model's version just before it (POST "
        '.../rollback {"version": it} serves the learner before again); else null',
    )


class LearnerDrift(BaseModel):
    learner: str = Field(description="'served', or a challenger's id")
    state: Literal["stable", "warning", "drift"] = Field(
        description="its detector after the last labelled example"
    )
    seen: int = Field(description="labelled examples the learner has seen")


class DriftAnswer(BaseModel):
    """A model's drift detector, each learner's state, and their last events (oldest first)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "drift": {"detector": "ddm", "on_drift": "alert", "warm_start": 30,
                              "warning_threshold": 2.0, "drift_threshold": 3.0},
                    "learners": [{"learner": "served", "state": "warning", "seen": 6120}],
                    "events": [
                        {"learner": "served", "kind": "warning", "at_seen": 3021,
                         "time": 1796380112.5, "action": None},
                        {"learner": "served", "kind": "drift", "at_seen": 3077,
                         "time": 1796380113.25, "action": None},
                        {"learner": "served", "kind": "warning", "at_seen": 6102,
                         "time": 1796380190.0, "action": None},
                    ],
                }
            ]
        }
    )  # fmt: skip

    drift: DriftSpec | None = Field(description="the detector configured; null: none")
    learners: list[LearnerDrift]
    events: list[DriftEvent]


def drift_answer(
    config: dict[str, Any] | None,
    meta: dict[str, str],
    challengers: Mapping[str, ChallengerState] | None = None,
) -> DriftAnswer:
    """What ``GET /models/{name}/drift`` answers, from the model's configuration and hash,
    and its ``challengers``' states (their detectors are theirs, each on its own mistakes)."""
    if config is None:
        return DriftAnswer(drift=None, learners=[], events=[])
    detector, _ = detector_of(config)
    state = read_state(detector, meta.get(Meta.DRIFT_STATE, ""))
    events = [
        DriftEvent(
            learner="served",
            kind=e.kind,
            at_seen=e.at,
            time=e.ms / 1000 if e.ms else None,
            action="retrained" if e.retrained else None,
            version=e.version,
        )
        for e in drift_events(meta.get(Meta.DRIFT_EVENTS, ""))
    ]
    seen = int(meta.get(Meta.SEEN, 0))
    learners = [LearnerDrift(learner="served", state=status_of(detector, state), seen=seen)]
    for id, c in (challengers or {}).items():
        learners.append(LearnerDrift(learner=id, state=c.drift_status() or "stable", seen=c.seen))
        for seen_then, what in c.drift_events:
            events.append(DriftEvent(learner=id, kind=what, at_seen=seen_then, time=None))
    return DriftAnswer(drift=SPECS[config["detector"]](**config), learners=learners, events=events)
