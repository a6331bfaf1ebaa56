"""The files of ``perceptron models from-sklearn`` and ``to-sklearn``: a fitted scikit-learn
estimator saved with joblib (``joblib.dump``; a plain pickle reads too).

Loading such a file runs code from it (that is how pickles work): load only files you made or
trust. Each error here is one line naming the file and what is wrong with it.
"""

from __future__ import annotations

import os
from typing import Any

from service.cli.exit_codes import file_error

NEEDS = (
    "scikit-learn is not installed here: deploy/setup.sh installs it in .venv "
    "(or: pip install scikit-learn)"
)


class EstimatorFileError(Exception):
    """A file that holds no estimator, or that cannot be read or written."""


def _joblib() -> Any:
    try:
        import joblib
        import sklearn  # noqa: F401 - what the files hold, and what the bridge needs
    except ImportError as e:
        raise EstimatorFileError(NEEDS) from e
    return joblib


def load_estimator(path: str | os.PathLike[str]) -> Any:
    """The object saved in ``path`` (it runs the file's code)."""
    joblib = _joblib()
    try:
        return joblib.load(path)
    except OSError as e:
        raise EstimatorFileError(file_error(path, e)) from e
    except Exception as e:  # a file of anything else: unpickling can fail in any way
        raise EstimatorFileError(
            f"cannot read an estimator from {os.fspath(path)} (a joblib or pickle file): "
            f"{type(e).__name__}: {str(e)[:200]}"
        ) from e


def dump_estimator(estimator: Any, path: str | os.PathLike[str]) -> None:
    """Save ``estimator`` in ``path``, as ``joblib.dump`` does."""
    joblib = _joblib()
    try:
        joblib.dump(estimator, path)
    except OSError as e:
        raise EstimatorFileError(file_error(path, e, writing=True)) from e
