"""What a replay saw: its settings and one outcome per example."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["predict", "learn"]
MODES: tuple[Mode, ...] = ("predict", "learn")


@dataclass(frozen=True)
class Before:
    """The model as a replay found it: what it had learned before (zeros when the replay
    created it, or deleted it first with ``reset``)."""

    examples: int = 0  # labelled examples it had counted (counters.seen)
    mistakes: int = 0
    version: int = 0  # weight updates applied
    multiclass: str | None = None  # its strategy, for more than two classes
    drift_warnings: int = 0  # its drift detector's counts
    drifts: int = 0

    @property
    def trained(self) -> bool:
        """Whether the replay continues from learned weights rather than from zero."""
        return self.examples > 0 or self.version > 0

    def notice(self, model: str, multiclass: str | None = None) -> str:
        """What a replay says up front when it continues training this model (one line).

        ``multiclass``: the strategy asked for, named when the model has another.
        """
        if self.examples:
            had = (
                f"already has {self.examples} labelled example{_s(self.examples)} "
                f"({self.mistakes} mistake{_s(self.mistakes)}, version {self.version})"
            )
        else:
            had = f"already has trained weights (version {self.version})"
        text = (
            f"model {model!r} {had}; continuing to train it: add --reset to start from zero weights"
        )
        if multiclass is not None and self.multiclass not in (None, multiclass):
            text += f" (it keeps its multiclass={self.multiclass!r}, not {multiclass!r})"
        return text + "."

    def as_dict(self) -> dict[str, int]:
        return {"examples": self.examples, "mistakes": self.mistakes, "version": self.version}


SHOWN = 10  # the drifts a summary names, at most (the first and last halves)


def _s(n: int) -> str:
    return "" if n == 1 else "s"


@dataclass
class Summary:
    """What a replay saw: one entry of ``outcomes`` per example (True: a mistake).

    ``before``: what the model had learned before the replay (it continued from there when
    ``before.trained``); ``examples`` and ``mistakes`` count this replay's alone.
    """

    model: str
    mode: Mode
    batch: int
    concurrency: int
    delay: int
    seconds: float
    outcomes: list[bool] = field(repr=False)
    before: Before = field(default_factory=Before)
    # The model's drift detector's warnings and drifts during the replay, each at the example
    # of the replay it came (from 1), in order; None: the model has no detector.
    drift: list[tuple[int, str]] | None = None
    # How many warnings and drifts came during the replay (the model's counts: ``drift`` lists
    # its last DRIFT_EVENTS_KEPT alone)
    drift_counts: tuple[int, int] = (0, 0)

    @property
    def examples(self) -> int:
        return len(self.outcomes)

    @property
    def mistakes(self) -> int:
        return sum(self.outcomes)

    @property
    def mistake_rate(self) -> float:
        return self.mistakes / self.examples if self.examples else 0.0

    @property
    def throughput(self) -> float:
        """Labelled examples per second."""
        return self.examples / self.seconds if self.seconds > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "mode": self.mode,
            "batch": self.batch,
            "concurrency": self.concurrency,
            "delay": self.delay,
            "examples": self.examples,
            "mistakes": self.mistakes,
            "mistake_rate": self.mistake_rate,
            "seconds": self.seconds,
            "throughput": self.throughput,
            "before": self.before.as_dict(),
            "drift": None
            if self.drift is None
            else [{"at": at, "kind": kind} for at, kind in self.drift],
            "drift_warnings": self.drift_counts[0],
            "drifts": self.drift_counts[1],
        }

    def text(self) -> str:
        how = "predict + feedback" if self.mode == "predict" else "learn"
        clients = f"{self.concurrency} client{'s' if self.concurrency > 1 else ''}"
        before, total = self._continued()
        lines = [
            ("model", f"{self.model} ({how}; {clients}; batch {self.batch}; delay {self.delay})"),
            *before,
            ("examples", str(self.examples)),
            ("mistakes", str(self.mistakes)),
            ("mistake rate", f"{self.mistake_rate:.2%}"),
            *total,
            *self._drift(),
            ("time", f"{self.seconds:.2f} s"),
            ("throughput", f"{self.throughput:,.1f} examples/s"),
        ]
        return "".join(f"{k:<14}{v}\n" for k, v in lines)

    def _drift(self) -> list[tuple[str, str]]:
        """The detector's drifts (and how many warnings), when the model has one."""
        if self.drift is None:
            return []
        ats = [f"{at:,}" for at, kind in self.drift if kind in ("drift", "retrained")]
        warnings, drifts = self.drift_counts
        said = f"{drifts} drift{_s(drifts)}"
        if ats:
            shown = ats if len(ats) <= SHOWN else [*ats[: SHOWN // 2], "...", *ats[-SHOWN // 2 :]]
            said += f" (at example {', '.join(shown)})"
        healed = sum(kind == "retrained" for _, kind in self.drift)
        if healed:
            said += f", {healed} retrained"
        said += f"; {warnings} warning{_s(warnings)}"
        if len(self.drift) < warnings + drifts:
            said += f"; the model lists its last {len(self.drift)}"
        return [("drift", said)]

    def _continued(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """When the model was trained before: a line that says so (above this replay's
        counts), and the model's counts with this replay's (below them)."""
        b = self.before
        if not b.trained:
            return [], []
        had = (
            f"{b.examples} example{_s(b.examples)} ({b.mistakes} mistake{_s(b.mistakes)})"
            if b.examples
            else f"weights of version {b.version}"
        )
        total = b.examples + self.examples
        mistakes = b.mistakes + self.mistakes
        return (
            [("continued", f"the model had learned {had} before this replay (--reset: from zero)")],
            [
                (
                    "model total",
                    f"{total} example{_s(total)}, {mistakes} mistake{_s(mistakes)} "
                    "(before + this replay)",
                )
            ],
        )
