"""Drift detectors on a learner's stream of mistakes (1 a mistake, 0 not, one per labelled
example), making River 0.26's floating-point operations in its order, so that fed the same
mistakes they warn and detect at the same examples:

- ``ddm``: River's ``drift.binary.DDM`` (Gama et al., 2004): the running mistake rate ``p`` and
  its deviation ``s = sqrt(p (1 - p) / n)``; past ``warm_start`` examples it keeps the smallest
  ``p + s`` seen, and warns where ``p + s`` exceeds that ``p_min + warning_threshold * s_min``,
  detects past ``p_min + drift_threshold * s_min``. Suited to abrupt changes.
- ``eddm``: River's ``drift.binary.EDDM`` (Baena-García et al., 2006): the mean and deviation
  of the distance between mistakes, ``p' + 2 s'``, against its largest; it warns under
  ``alpha`` of it and detects under ``beta``, once more than ``warm_start`` mistakes are seen.
  Suited to gradual changes, where mistakes come closer together slowly.

After a drift, the next example starts the detector afresh (River's reset). A detector's state
is a short list of floats (``state``), what the model keeps beside its weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal

Status = Literal["stable", "warning", "drift"]
STABLE, WARNING, DRIFT = 0.0, 1.0, 2.0  # the status, as a state holds it
MOST_WARM_START = 1_000_000
EVENTS_KEPT = 100  # a learner's last warnings and drifts, kept


class DetectorError(ValueError):
    """A detector's configuration that cannot be; the message says why."""


@dataclass(frozen=True)
class DDM:
    """River's ``DDM``; its state: [status, n, mean, p_min, s_min, ps_min] (p_min and s_min 0
    and ps_min infinite until warm)."""

    name: ClassVar[str] = "ddm"
    warm_start: int = 30
    warning_threshold: float = 2.0
    drift_threshold: float = 3.0

    def __post_init__(self) -> None:
        _check_warm_start(self.warm_start)
        for key in ("warning_threshold", "drift_threshold"):
            value = getattr(self, key)
            if not _positive(value):
                raise DetectorError(f"DDM's {key} must be a finite number > 0; got {value!r}.")
        if self.warning_threshold > self.drift_threshold:
            raise DetectorError("DDM's warning_threshold must be at most its drift_threshold.")

    def start(self) -> list[float]:
        return [STABLE, 0.0, 0.0, 0.0, 0.0, math.inf]

    def flags(self, state: list[float]) -> tuple[bool, bool]:
        """River's two flags after the last example: a warning, a drift."""
        return state[0] == WARNING, state[0] == DRIFT

    def update(self, state: list[float], mistake: int) -> list[float]:
        """The state after one more example, ``mistake`` 1 or 0."""
        status, n, mean, p_min, s_min, ps_min = self.start() if state[0] == DRIFT else state
        status = STABLE if status == DRIFT else status
        n += 1.0
        mean += (1.0 / n) * (mistake - mean)
        p, s = mean, math.sqrt(mean * (1 - mean) / n)
        if n > self.warm_start:
            if p + s <= ps_min:
                p_min, s_min = p, s
                ps_min = p_min + s_min
            status = WARNING if p + s > p_min + self.warning_threshold * s_min else STABLE
            if p + s > p_min + self.drift_threshold * s_min:
                status = DRIFT
        return [status, n, mean, p_min, s_min, ps_min]


@dataclass(frozen=True)
class EDDM:
    """River's ``EDDM``; its state: [status, n, last_error, errors, distances' count, their
    mean, their sum of squared deviations, the largest p' + 2 s' (-1 before the first), the
    warning flag]. River's EDDM may raise its drift flag while its warning flag stays up from
    before (and its retraining then learns in the background rather than swap), so the warning
    is kept apart from the status, which says the drift."""

    name: ClassVar[str] = "eddm"
    warm_start: int = 30
    alpha: float = 0.95
    beta: float = 0.9

    def __post_init__(self) -> None:
        _check_warm_start(self.warm_start)
        if not (0 < self.beta <= self.alpha <= 1):
            raise DetectorError(
                f"EDDM needs 0 < beta <= alpha <= 1; got alpha {self.alpha!r}, beta {self.beta!r}."
            )

    def start(self) -> list[float]:
        return [STABLE, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0]

    def flags(self, state: list[float]) -> tuple[bool, bool]:
        """River's two flags after the last example: a warning, a drift."""
        return state[8] == 1.0, state[0] == DRIFT

    def update(self, state: list[float], mistake: int) -> list[float]:
        """The state after one more example, ``mistake`` 1 or 0."""
        if state[0] == DRIFT:
            state = self.start()
        status, n, last, errors, count, mean, sq, most, warned = state
        n += 1.0
        if mistake == 1:
            errors += 1.0
            distance = n - last
            old = mean
            count += 1.0
            mean += (1.0 / count) * (distance - mean)
            sq += 1.0 * (distance - old) * (distance - mean)
            if n > self.warm_start:
                deviation = (sq / (count - 1) if count > 1 else 0.0) ** 0.5
                p2s = mean + 2 * deviation
                if p2s > most:
                    most = p2s
                elif errors > self.warm_start:
                    level = p2s / most
                    if level < self.beta:
                        status = DRIFT
                    elif level < self.alpha:
                        warned = 1.0
                    else:
                        warned = 0.0
            last = n
        if status != DRIFT:
            status = WARNING if warned else STABLE
        return [status, n, last, errors, count, mean, sq, most, warned]


Detector = DDM | EDDM
DETECTORS: dict[str, type[DDM] | type[EDDM]] = {DDM.name: DDM, EDDM.name: EDDM}
ON_DRIFT = ("alert", "retrain")


def _positive(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value > 0


def _check_warm_start(value: Any) -> None:
    if type(value) is not int or not 1 <= value <= MOST_WARM_START:
        raise DetectorError(
            f"warm_start must be a whole number from 1 to {MOST_WARM_START:,}; got {value!r}."
        )


def detector_of(config: dict[str, Any]) -> tuple[Detector, str]:
    """The detector a model's ``drift`` configuration names, and what it does at a drift:
    ``{"detector": "ddm" | "eddm", "on_drift": "alert" | "retrain", ...its parameters}``."""
    settings = dict(config)
    name = settings.pop("detector", None)
    on_drift = settings.pop("on_drift", "alert")
    if name not in DETECTORS:
        raise DetectorError(f"drift.detector must be one of {sorted(DETECTORS)}; got {name!r}.")
    if on_drift not in ON_DRIFT:
        raise DetectorError(f"drift.on_drift must be one of {list(ON_DRIFT)}; got {on_drift!r}.")
    kind = DETECTORS[name]
    known = {f.name for f in fields(kind)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise DetectorError(f"{kind.__name__} takes {sorted(known)}; got {unknown}.")
    return kind(**settings), on_drift


def spec_of(detector: Detector) -> str:
    """The detector as the store's scripts read it (``store/ops/drift.py``)."""
    numbers = [getattr(detector, f.name) for f in fields(detector)]
    return " ".join([detector.name, *(f"{float(v):.17g}" for v in numbers)])


def feed(
    detector: Detector, state: list[float], mistakes: Sequence[int]
) -> tuple[list[float], list[tuple[int, Status]]]:
    """The state after ``mistakes`` in order, and the flags they raised: each example (from 1)
    whose update raised River's warning or drift flag, and which."""
    events: list[tuple[int, Status]] = []
    warned, drifted = detector.flags(state)
    for i, m in enumerate(mistakes, 1):
        state = detector.update(state, m)
        w, d = detector.flags(state)
        if w and not warned:
            events.append((i, "warning"))
        if d and not drifted:
            events.append((i, "drift"))
        warned, drifted = w, d
    return state, events


def check_state(detector: Detector, state: list[float]) -> None:
    """Raise DetectorError unless ``state`` is one ``detector`` could have come to: its size,
    a status it takes, whole counts, finite numbers (but DDM's ps_min before warm: infinite)."""
    size = len(detector.start())
    if len(state) != size:
        raise DetectorError(f"{detector.name}'s state holds {size} numbers; got {len(state)}.")
    if state[0] not in (STABLE, WARNING, DRIFT):
        raise DetectorError(f"its status must be 0, 1 or 2; got {state[0]!r}.")
    whole = (1,) if isinstance(detector, DDM) else (1, 2, 3, 4)
    for i, v in enumerate(state):
        if i == size - 1 and isinstance(detector, DDM) and v == math.inf:
            continue
        if not math.isfinite(v) or (i in whole and not (v == int(v) and 0 <= v <= 2.0**53)):
            raise DetectorError(f"number {i} of its state must be finite, a count whole: {v!r}.")
    why = _ddm_bounds(state) if isinstance(detector, DDM) else _eddm_bounds(state)
    if why:
        raise DetectorError(f"{detector.name}'s {why}.")


def _ddm_bounds(state: list[float]) -> str:
    """Why a DDM state is none it reaches ('' it may be): rates within [0, 1], a deviation
    within 0.5 (sqrt(p (1 - p) / n)), the best p + s within 1.5 or infinite before warm."""
    _, _, mean, p_min, s_min, ps_min = state
    if not (0 <= mean <= 1 and 0 <= p_min <= 1 and 0 <= s_min <= 0.5):
        return "mistake rates must be in [0, 1], their deviation in [0, 0.5]"
    if not (ps_min == math.inf or 0 <= ps_min <= 1.5):
        return "best p + s must be in [0, 1.5], or infinite before it is warm"
    return ""


def _eddm_bounds(state: list[float]) -> str:
    """Why an EDDM state is none it reaches ('' it may be): the last mistake and the mistakes
    within the examples, distances (at most the examples) and their deviations within them, so
    that no later update overflows."""
    _, n, last, errors, count, mean, sq, most, warned = state
    if warned not in (0.0, 1.0):
        return "warning flag must be 0 or 1"
    if not (last <= n and count <= errors <= n):
        return "last mistake and mistakes counted must be within its examples"
    if not (0 <= mean <= n and 0 <= sq <= count * n * n and (most == -1 or 0 <= most <= 4 * n)):
        return "distances and their deviations must be within its examples"
    return ""


def read_state(detector: Detector, text: str) -> list[float]:
    """A state as the store keeps it (numbers as %.17g, separated by spaces; '' a fresh one)."""
    return [float(v) for v in text.split()] or detector.start()


def state_text(state: Sequence[float]) -> str:
    """A state as the store keeps it, each number exact."""
    return " ".join(f"{v:.17g}" for v in state)


def status_of(detector: Detector, state: list[float]) -> Status:
    """What an operator is shown: a drift, else a warning, else stable."""
    warning, drift = detector.flags(state)
    return "drift" if drift else "warning" if warning else "stable"
