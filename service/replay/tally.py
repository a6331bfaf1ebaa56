"""The count of a replay: one outcome per example, as the service's answers arrive."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from service.replay.progress import Progress


@dataclass
class Tally:
    """The answers so far: an outcome per example (True: a mistake; None: not yet labelled).

    Each ``record`` shows the counts on ``progress``, when there is one.
    """

    examples: int
    progress: Progress | None = None
    labelled: int = 0
    mistakes: int = 0
    _outcomes: list[bool | None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._outcomes = [None] * self.examples

    def record(self, answers: Iterable[tuple[int, bool]]) -> None:
        """The outcomes of some examples: (example, mistake) pairs, each example once."""
        for i, mistake in answers:
            if self._outcomes[i] is not None:
                raise AssertionError(f"example {i} was labelled twice")
            self._outcomes[i] = mistake
            self.labelled += 1
            self.mistakes += mistake
        if self.progress is not None:
            self.progress.update(self.labelled, self.mistakes)

    def outcomes(self) -> list[bool]:
        """Every example's outcome, once all are in."""
        missing = self._outcomes.count(None)
        if missing:  # cannot happen: every example is predicted, then labelled once
            raise AssertionError(f"{missing} examples got no answer")
        return [bool(o) for o in self._outcomes]
