"""``perceptron replay``: stream a dataset through a running service and report its mistakes.

Each example is sent as a prediction whose true label follows as feedback (the default), or
to /learn (``mode="learn"``); one at a time or in batches, from one or more concurrent
clients, with labels optionally arriving ``delay`` examples late. The summary counts the
examples and the mistakes the service reported; ``write_curve`` draws the learning curve.

Datasets: a CSV file, a LIBSVM file, or one bundled with an installed package
(scikit-learn's breast_cancer, digits, iris, wine; River's Phishing: the ``replay`` extra).
"""

from .command import DESCRIPTION, add_arguments, run
from .curve import curve_points, write_curve
from .datasets import (
    DATASETS,
    Dataset,
    load_csv,
    load_dataset,
    load_libsvm,
    model_name_for,
)
from .errors import ReplayError
from .progress import Progress
from .stream import ensure_model, replay, replay_async
from .summary import MODES, Mode, Summary

__all__ = [
    "DATASETS",
    "DESCRIPTION",
    "MODES",
    "Dataset",
    "Mode",
    "Progress",
    "ReplayError",
    "Summary",
    "add_arguments",
    "curve_points",
    "ensure_model",
    "load_csv",
    "load_dataset",
    "load_libsvm",
    "model_name_for",
    "replay",
    "replay_async",
    "run",
    "write_curve",
]
