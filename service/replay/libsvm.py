"""LIBSVM (svmlight) files, read by scikit-learn and made dense."""

from __future__ import annotations

import bisect
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from service.replay.datasets import Dataset, labels_from_text, model_name_for
from service.replay.replay_error import ReplayError

# A replay holds every example densely, as lists of Python floats (about 32 bytes a value):
# a file past this (1.6 GB so held), or a mistyped index, is refused before it is made dense.
MAX_DENSE_VALUES = 50_000_000


def load_libsvm(path: str | Path) -> Dataset:
    """A LIBSVM (svmlight) file: ``label [qid:N] index:value ...``, made dense.

    Read by scikit-learn's ``load_svmlight_file``: ``#`` comments and blank lines are skipped,
    ``qid:`` (right after the label) ignored, a line's indices must increase. Indices are
    1-based unless some index is 0; the number of features is the largest index seen. Labels
    are numbers: integers ("1", "+1", "2.0") are sent as integers, others as strings ("0.5").
    """
    path = Path(path)
    x, y = _read_svmlight(path)
    if not y.size:
        raise ReplayError(f"{path}: no examples.")
    if not x.indices.size:
        raise ReplayError(f"{path}: no features.")
    bad = np.flatnonzero(~np.isfinite(x.data))
    if bad.size:
        example = int(np.searchsorted(x.indptr, bad[0], side="right"))
        raise ReplayError(f"{path}: example {example} has a value that is not a finite number.")
    if x.shape[0] * x.shape[1] > MAX_DENSE_VALUES:
        raise ReplayError(
            f"{path}: {x.shape[0]} examples of {x.shape[1]} features (the largest index) "
            f"are too many to replay: at most {MAX_DENSE_VALUES:,} values in all."
        )
    rows = x.toarray().tolist()
    return Dataset(
        model_name_for(path.stem), rows, labels_from_text([_label_text(v) for v in y.tolist()])
    )


def _read_svmlight(path: Path) -> tuple[Any, npt.NDArray[np.float64]]:
    """The file as scikit-learn reads it: a CSR matrix and the labels."""
    try:
        from sklearn.datasets import load_svmlight_file
    except ImportError as e:
        raise ReplayError(
            "--libsvm needs scikit-learn: pip install 'perceptron-service[replay]'."
        ) from e

    def read(data: bytes) -> tuple[Any, npt.NDArray[np.float64]]:
        x, y = load_svmlight_file(io.BytesIO(data), dtype=np.float64)
        return x, y

    data = path.read_bytes()
    try:
        return read(data)
    except (ValueError, OverflowError) as e:
        n, line = _first_refused(data, read)
        raise ReplayError(
            f"{path}, line {n}: {str(e).rstrip('.')} in {line[:80]!r} "
            "(a line is 'label index:value ...', with increasing indices)."
        ) from None


def _first_refused(data: bytes, read: Callable[[bytes], object]) -> tuple[int, str]:
    """The number and the text of the first line that ``read`` refuses.

    The reader does not say where: that line ends the shortest beginning of the file that
    it refuses (a line is read the same whatever the lines around it).
    """
    lines = io.BytesIO(data).readlines()  # split as the reader splits them

    def refuses(k: int) -> bool:
        try:
            read(b"".join(lines[:k]))
        except (ValueError, OverflowError):
            return True
        return False

    n = bisect.bisect_left(range(len(lines) + 1), True, key=refuses)
    return n, lines[n - 1].decode(errors="replace").strip()


def _label_text(value: float) -> str:
    """A label as a file would write it: "1" for 1.0, "0.5"."""
    return str(int(value)) if value.is_integer() else repr(value)
