"""``perceptron replay``: stream a dataset through a running service and report its mistakes.

Each example is sent as a prediction whose true label follows as feedback (the default), or
to /learn (``mode="learn"``); one at a time or in batches, from one or more concurrent
clients, with labels optionally arriving ``delay`` examples late (``StreamOptions``; with the
service and the model, ``ReplayOptions``). The summary counts the examples and the mistakes
the service reported; ``write_curve`` draws the learning curve. A model that exists already is
trained on from where it is (``Summary.before``; ``ReplayOptions.reset`` starts from zero).
From Python (``replay`` runs its own event loop; ``replay_async`` runs on yours)::

    options = ReplayOptions(model="cancer", stream=StreamOptions("learn", batch=64))
    summary = replay(load_dataset("breast_cancer"), options)

Datasets: a CSV file, a LIBSVM file, or one bundled with an installed package
(scikit-learn's breast_cancer, digits, iris, wine; River's Phishing: the ``replay`` extra).
"""

from service.replay.curve import (
    CUMULATIVE_LABEL,
    curve_figure,
    curve_points,
    window_label,
    write_curve,
)
from service.replay.datasets import DATASETS, Dataset, load_csv, load_dataset, model_name_for
from service.replay.libsvm import load_libsvm
from service.replay.options import ReplayOptions, StreamOptions
from service.replay.progress import Progress
from service.replay.replay_error import ReplayError
from service.replay.stream import ensure_model, open_model, replay, replay_async
from service.replay.summary import MODES, Before, Mode, Summary

__all__ = [
    "CUMULATIVE_LABEL",
    "DATASETS",
    "MODES",
    "Before",
    "Dataset",
    "Mode",
    "Progress",
    "ReplayError",
    "ReplayOptions",
    "StreamOptions",
    "Summary",
    "curve_figure",
    "curve_points",
    "ensure_model",
    "load_csv",
    "load_dataset",
    "load_libsvm",
    "model_name_for",
    "open_model",
    "replay",
    "replay_async",
    "window_label",
    "write_curve",
]
