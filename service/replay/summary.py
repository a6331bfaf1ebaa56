"""What a replay saw: its settings and one outcome per example."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["predict", "learn"]
MODES: tuple[Mode, ...] = ("predict", "learn")


@dataclass
class Summary:
    """What a replay saw: one entry of ``outcomes`` per example (True: a mistake)."""

    model: str
    mode: Mode
    batch: int
    concurrency: int
    delay: int
    seconds: float
    outcomes: list[bool] = field(repr=False)

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
        }

    def text(self) -> str:
        how = "predict + feedback" if self.mode == "predict" else "learn"
        clients = f"{self.concurrency} client{'s' if self.concurrency > 1 else ''}"
        lines = [
            ("model", f"{self.model} ({how}; {clients}; batch {self.batch}; delay {self.delay})"),
            ("examples", str(self.examples)),
            ("mistakes", str(self.mistakes)),
            ("mistake rate", f"{self.mistake_rate:.2%}"),
            ("time", f"{self.seconds:.2f} s"),
            ("throughput", f"{self.throughput:,.1f} examples/s"),
        ]
        return "".join(f"{k:<14}{v}\n" for k, v in lines)
