"""The per-key counters of a model's meta hash: the labelled examples, mistakes and updates each
API key caused (``Field.SOURCE``), as the commits count them and the API reads them."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from service.contract.store_protocol import Field


@lru_cache(maxsize=1 << 12)  # (a key's fields, at every commit: made once each)
def source_fields(source: str) -> tuple[str, str, str]:
    """The meta fields that count a key's labelled examples, mistakes and updates."""
    head = f"{Field.SOURCE}{source}"
    return head + Field.EXAMPLES, head + Field.MISTAKES, head + Field.UPDATES


def source_counts(
    sources: Sequence[str], served: Sequence[int], true: Sequence[int], updated: Sequence[bool]
) -> dict[str, int]:
    """The meta fields to add to (``source_fields``) for labelled examples, each caused by its
    source, served a class and given its true class, and updating the weights or not; fields
    at zero are left out."""
    tally: dict[str, list[int]] = {}
    for source, s, t, u in zip(sources, served, true, updated, strict=True):
        c = tally.setdefault(source, [0, 0, 0])
        c[0] += 1
        c[1] += s != t
        c[2] += u
    out: dict[str, int] = {}
    for source, (labelled, mistakes, updates) in tally.items():
        out |= one_source_counts(source, labelled, mistakes, updates)
    return out


def one_source_counts(source: str, labelled: int, mistakes: int, updates: int) -> dict[str, int]:
    """``source_counts`` of examples that one source sent, from their totals."""
    counts = zip(source_fields(source), (labelled, mistakes, updates), strict=True)
    return {field: count for field, count in counts if count}


def parse_source(field: str) -> tuple[str, str] | None:
    """``(source, suffix)`` of a per-source count field (suffix: ``Field.EXAMPLES``,
    ``MISTAKES`` or ``UPDATES``), or None for another field."""
    if not field.startswith(Field.SOURCE):
        return None
    source, suffix = field[len(Field.SOURCE) : -2], field[-2:]
    if suffix not in (Field.EXAMPLES, Field.MISTAKES, Field.UPDATES) or ":" in source:
        return None
    return source, suffix
