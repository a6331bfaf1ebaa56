"""What learning each example answered: per example (the label predicted before learning it,
whether that was a mistake, whether the weights changed, the model's version after it), kept
as columns for a batch, which holds thousands."""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from itertools import accumulate, islice
from typing import overload

from service.learner import Label

Learned = tuple[Label, bool, bool, int]
# In a group commit's results, what stands for the examples of a handed-off request that the
# commit left out (another writer learned it, or its requester withdrew it): never read.
NOT_LEARNED: Learned = ("", False, False, -1)


class LearnedRows(Sequence[Learned]):
    """Each example's ``Learned``, from the classes served (indices into ``classes``), the
    true ones, whether each updated, and the version after each."""

    __slots__ = ("classes", "served", "ts", "updated", "versions")

    def __init__(
        self,
        classes: Sequence[Label],
        served: list[int],
        ts: list[int],
        updated: list[bool],
        versions: list[int],
    ) -> None:
        self.classes, self.served, self.ts = classes, served, ts
        self.updated, self.versions = updated, versions

    @classmethod
    def after(
        cls,
        classes: Sequence[Label],
        served: list[int],
        ts: list[int],
        updated: list[bool],
        *,
        version: int,
    ) -> LearnedRows:
        """The rows of examples learned in order from the model's ``version``."""
        versions = list(islice(accumulate(updated, initial=version), 1, None))
        return cls(classes, served, ts, updated, versions)

    def __len__(self) -> int:
        return len(self.served)

    @overload
    def __getitem__(self, i: int) -> Learned: ...
    @overload
    def __getitem__(self, i: slice) -> LearnedRows: ...
    def __getitem__(self, i: int | slice) -> Learned | LearnedRows:
        if isinstance(i, slice):
            return LearnedRows(
                self.classes, self.served[i], self.ts[i], self.updated[i], self.versions[i]
            )
        s = self.served[i]
        return (self.classes[s], s != self.ts[i], self.updated[i], self.versions[i])

    def __iter__(self) -> Iterator[Learned]:
        return zip(
            map(self.classes.__getitem__, self.served),
            map(operator.ne, self.served, self.ts),
            self.updated,
            self.versions,
            strict=True,
        )


def columns(results: Sequence[Learned]) -> tuple[list[Label], list[bool], list[bool], list[int]]:
    """The labels, mistakes, updates and versions of ``results``, each a list."""
    if isinstance(results, LearnedRows):
        return (
            list(map(results.classes.__getitem__, results.served)),
            list(map(operator.ne, results.served, results.ts)),
            results.updated,
            results.versions,
        )
    labels, mistakes, updated, versions = zip(*results, strict=True)
    return list(labels), list(mistakes), list(updated), list(versions)
