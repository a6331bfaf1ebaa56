"""Turning a request's features into a vector: dense lists or hashed named features."""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import overload

import numpy as np

from service.learner.config import ModelConfig

Features = Sequence[float] | Mapping[str, float]

# Weights are sums of learning_rate * x: this bound (with learning_rate <= 1e6) keeps every
# weight and score far from float64 overflow, whatever the stream.
MAX_ABS_VALUE = 1e15


class FeatureError(ValueError):
    """The features do not fit the model; ``code`` names the problem."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)  # not frozen: a batch makes thousands, and frozen ones cost twice as much
class Example:
    """One feature vector. Dense when ``index`` is None, else sparse over weight buckets.

    Sparse indices are sorted and unique: the values of names that hash to one bucket are
    summed (exactly, with ``math.fsum``).
    """

    values: np.ndarray
    index: np.ndarray | None = None
    sq: float | None = None  # the squared norm, once computed (or carried with the example)

    @property
    def sq_norm(self) -> float:
        if self.sq is None:
            # (einsum, as encode_matrix computes a whole batch's at once: bit for bit the same)
            self.sq = float(np.einsum("i,i->", self.values, self.values))
        return self.sq


class Rows(Sequence[Example]):
    """Dense examples as the rows of one matrix, with their squared norms: a packed batch from
    the route to the commit without an object per example. Indexed, a row is an ``Example``
    (a view of the matrix, as ``encode_matrix`` made them before); the kernel and the hand-over
    read the matrix itself."""

    __slots__ = ("matrix", "sq")

    def __init__(self, matrix: np.ndarray, sq: np.ndarray) -> None:
        self.matrix = matrix  # (examples, n_features), float64, C order
        self.sq = sq  # each row's squared norm, float64

    def __len__(self) -> int:
        return len(self.matrix)

    @overload
    def __getitem__(self, i: int) -> Example: ...
    @overload
    def __getitem__(self, i: slice) -> Rows: ...
    def __getitem__(self, i: int | slice) -> Example | Rows:
        if isinstance(i, slice):
            return Rows(self.matrix[i], self.sq[i])
        return Example(self.matrix[i], None, float(self.sq[i]))

    def __iter__(self) -> Iterator[Example]:
        return map(Example, self.matrix, repeat(None), self.sq.tolist())

    def take(self, at: np.ndarray) -> Rows:
        """The rows at the indices ``at``, in that order."""
        return Rows(self.matrix[at], self.sq[at])

    @staticmethod
    def join(parts: Sequence[Sequence[Example]]) -> Sequence[Example]:
        """Examples of one model end to end: one matrix where every part is rows."""
        if len(parts) == 1:
            return parts[0]
        if all(isinstance(p, Rows) for p in parts):
            rows = [p for p in parts if isinstance(p, Rows)]
            return Rows(
                np.concatenate([r.matrix for r in rows]), np.concatenate([r.sq for r in rows])
            )
        return [x for p in parts for x in p]


def bucket(name: str, hash_bits: int) -> int:
    """The weight bucket of a named feature: CRC-32 of its UTF-8 bytes, low ``hash_bits`` bits.

    Stable across processes, machines and Python versions.

    >>> bucket("colour=red", 18)
    170420
    """
    return zlib.crc32(name.encode("utf-8", "surrogatepass")) & ((1 << hash_bits) - 1)


def encode(config: ModelConfig, features: Sequence[float] | Mapping[str, float]) -> Example:
    """Validate ``features`` against ``config`` and return the example the learner uses."""
    if type(features) is list and config.dense:  # the common case, without ABC checks
        if len(features) != config.n_features:
            raise FeatureError(
                "wrong_dimension",
                f"This model takes exactly {config.n_features} features; got {len(features)}.",
            )
        return Example(_finite_array(features))
    if isinstance(features, Mapping):
        if config.dense:
            raise FeatureError(
                "wrong_dimension",
                f"This model takes dense features: a list of exactly {config.n_features} "
                "numbers, not an object of named features.",
            )
        names = list(features.keys())
        for name in names:
            if not isinstance(name, str):
                raise FeatureError("invalid_features", "Feature names must be strings.")
        return _encode_named(config, names, list(features.values()))
    if not isinstance(features, Sequence) or isinstance(features, str | bytes):
        raise FeatureError("invalid_features", "Features must be a list of numbers or an object.")
    if config.dense:
        if len(features) != config.n_features:
            raise FeatureError(
                "wrong_dimension",
                f"This model takes exactly {config.n_features} features; got {len(features)}.",
            )
        values = _finite_array(features)
        return Example(values)
    return _encode_named(config, [str(i) for i in range(len(features))], list(features))


_NUMBERS = frozenset((float, int))


def encode_many(config: ModelConfig, batch: Sequence[Features]) -> list[Example]:
    """``encode`` for each example; dense lists of plain numbers are checked all at once.

    Anything the fast path does not accept goes through ``encode`` one by one, so that the
    error names the example and the problem exactly as for a single example.
    """
    d = config.n_features
    if d is not None and all(type(r) is list and len(r) == d for r in batch):
        if all(_NUMBERS.issuperset(map(type, r)) for r in batch):
            try:
                arr = np.array(batch, dtype=np.float64)
            except OverflowError:
                arr = None
            if arr is not None and (np.abs(arr) <= MAX_ABS_VALUE).all():  # NaN fails too
                return [Example(row) for row in arr]
    return [encode(config, features) for features in batch]


def encode_matrix(config: ModelConfig, values: np.ndarray) -> Rows:
    """Examples of a dense model from its feature values laid end to end, one example after
    another (``n_features`` numbers each): what packed batches carry."""
    d = config.n_features
    if d is None:
        raise FeatureError(
            "wrong_dimension",
            "Packed features are for dense models (n_features); this one takes named features.",
        )
    if values.ndim != 1 or values.size == 0 or values.size % d:
        raise FeatureError(
            "wrong_dimension",
            f"Packed features must hold a whole number of examples of {d} values each; "
            f"got {values.size} values.",
        )
    arr = _in_range(values.astype(np.float64, copy=False).reshape(-1, d))
    return Rows(arr, np.einsum("ij,ij->i", arr, arr))  # each row's squared norm, as sq_norm's


def _finite_array(values: Sequence[float]) -> np.ndarray:
    if not _NUMBERS.issuperset(map(type, values)):  # bool is not int here: refused too
        for v in values:
            if type(v) is not float and type(v) is not int:
                raise FeatureError(
                    "invalid_features", f"Feature values must be numbers; got {v!r:.40}."
                )
    try:
        arr = np.asarray(values, dtype=np.float64)
    except OverflowError:
        arr = np.full(1, MAX_ABS_VALUE * 10)  # an int beyond float range: too large
    return _in_range(arr)


def _in_range(arr: np.ndarray) -> np.ndarray:
    """``arr`` itself, once every value is known finite and within ``MAX_ABS_VALUE``."""
    if not np.isfinite(arr).all():
        raise FeatureError(
            "non_finite_feature", "Feature values must be finite numbers: NaN and infinity are not."
        )
    if not (np.abs(arr) <= MAX_ABS_VALUE).all():
        raise FeatureError(
            "value_too_large",
            f"Feature values must be within +-{MAX_ABS_VALUE:g}, so that weights and scores "
            "cannot overflow.",
        )
    return arr


def _encode_named(config: ModelConfig, names: list[str], values: Sequence[float]) -> Example:
    if not names:
        raise FeatureError("empty_features", "At least one feature is needed.")
    arr = _finite_array(values)
    bits = config.hash_bits
    idx = np.fromiter((bucket(n, bits) for n in names), dtype=np.int64, count=len(names))
    order = np.argsort(idx, kind="stable")
    idx, arr = idx[order], arr[order]
    uniq, starts = np.unique(idx, return_index=True)
    if len(uniq) != len(idx):
        # Colliding names share a bucket; fsum makes the sum independent of their order.
        arr = np.array([math.fsum((0.0, *arr[s:e])) for s, e in _runs(starts, len(idx))])
        idx = uniq
    return Example(arr, idx)


def _runs(starts: np.ndarray, n: int) -> list[tuple[int, int]]:
    bounds = [*starts.tolist(), n]
    return list(zip(bounds[:-1], bounds[1:], strict=True))
