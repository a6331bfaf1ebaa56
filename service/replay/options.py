"""What a replay is asked to do: the service, the model, and how the examples are sent.

The two groups mirror the command's options ("service" and "model", "stream"), checked once
when made: a replay never starts with settings it would refuse halfway.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perceptron_client import DEFAULT_TIMEOUT, DEFAULT_URL
from service.replay.summary import MODES, Mode


@dataclass(frozen=True)
class StreamOptions:
    """How the examples go to the service.

    ``mode``: "predict" (a prediction, then its true label as feedback) or "learn" (/learn).
    ``batch``: examples a request. ``concurrency``: requests in flight at once.
    ``delay`` (predict mode): each true label is sent once ``delay`` more predictions have
    been answered, as labels arrive late in a real stream; the last ones at the end.
    ``rate``: at most that many examples a second (to watch a replay on the dashboard).
    ``retries``: how often a request the service answers 503 is sent again.
    """

    mode: Mode = "predict"
    batch: int = 1
    concurrency: int = 1
    delay: int = 0
    rate: float | None = None
    retries: int = 5

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        if (
            self.batch < 1
            or self.concurrency < 1
            or self.delay < 0
            or (self.rate is not None and self.rate <= 0)
        ):
            raise ValueError("batch and concurrency must be >= 1, delay >= 0, rate > 0")
        if self.delay and self.mode != "predict":
            raise ValueError(
                "delay applies to predict mode only (--delay-labels with --mode predict): "
                "/learn takes the label at once"
            )
        if self.retries < 0:
            raise ValueError("retries must be >= 0")


@dataclass(frozen=True)
class ReplayOptions:
    """A whole replay: where the service is, which model, and how to stream to it.

    ``model``: its name (default: the dataset's), created when missing with ``multiclass``
    as its strategy for more than two classes and ``drift`` as its drift detector (its
    configuration's ``drift``; None: none); ``reset`` deletes it first.
    """

    url: str = DEFAULT_URL
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    model: str | None = None
    multiclass: str = "multiclass"
    reset: bool = False
    drift: dict[str, Any] | None = None
    stream: StreamOptions = field(default_factory=StreamOptions)
