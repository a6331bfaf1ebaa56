"""Examples of one model with their true class indices and the names of the keys that sent
them, as three columns: what ``/learn`` queues, a worker hands to the model's writer, and a
commit learns. A packed batch's examples stay one matrix (``Rows``) all the way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.learner import Example
from service.learner.features import Rows


@dataclass(frozen=True, slots=True)
class Labelled:
    xs: Sequence[Example]  # Rows for a packed batch
    ts: list[int]  # true class indices
    sources: list[str]  # the name of the key that sent each example ("" for none)

    def __len__(self) -> int:
        return len(self.ts)

    @classmethod
    def of(cls, xs: Sequence[Example], ts: list[int], source: str = "") -> Labelled:
        """Examples sent by one key."""
        return cls(xs, ts, [source] * len(ts))

    @classmethod
    def join(cls, parts: Sequence[Labelled]) -> Labelled:
        """The parts end to end, in order (a group commit's requests)."""
        if len(parts) == 1:
            return parts[0]
        return cls(
            Rows.join([p.xs for p in parts]),
            [t for p in parts for t in p.ts],
            [s for p in parts for s in p.sources],
        )

    def keep(self, kept: Sequence[bool]) -> Labelled:
        """The examples where ``kept`` is true, in order."""
        at = np.flatnonzero(np.asarray(kept, dtype=bool))
        xs = self.xs
        return Labelled(
            xs.take(at) if isinstance(xs, Rows) else [xs[i] for i in at.tolist()],
            [self.ts[i] for i in at.tolist()],
            [self.sources[i] for i in at.tolist()],
        )
