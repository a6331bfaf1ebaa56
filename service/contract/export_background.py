"""A retraining model's background learner in its export (``"drift": {"background": [...]}``):
each example it learned, as the store keeps it (a log entry without its ordinal: ``ops/drift.py``'s
RETRAIN), in base64; written, and checked whole on import, so that no example a file carries
can make a learner's update anything but finite."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from service.contract.store_protocol import BACKGROUND_BYTES
from service.learner import ModelConfig
from service.learner.codec import RELEARNED, relearned_entry, unpack_entry
from service.learner.features import MAX_ABS_VALUE


def background_document(items: list[bytes]) -> list[str]:
    return [base64.b64encode(item).decode() for item in items]


def background_of(raw: Any, config: ModelConfig) -> list[bytes]:
    """The file's background learner, each example checked; ValueError says what is wrong."""
    if raw is None:
        return []
    if not config.retrains:
        raise ValueError("'drift.background' is a retraining's, and the model does not retrain.")
    if not isinstance(raw, list):
        raise ValueError("'drift.background' must be a list of base64 strings.")
    items, held = [], 0
    for i, text in enumerate(raw):
        try:
            if not isinstance(text, str):
                raise ValueError("not a string")
            item = base64.b64decode(text, validate=True)
            held += len(item)
            if held > BACKGROUND_BYTES:
                raise ValueError(f"past the {BACKGROUND_BYTES:,} bytes a background learner keeps")
            _check(config, item)
        except (ValueError, IndexError, binascii.Error) as e:
            raise ValueError(f"'drift.background' example {i} is not one of this model: {e}") from e
        items.append(item)
    return items


def _check(config: ModelConfig, item: bytes) -> None:
    """An example of this model: its true class, its scores and values of its sizes, each
    value finite and within the largest the API accepts, each bucket within the model's."""
    _, t, raw, x = unpack_entry(config, relearned_entry(item, 1, RELEARNED))
    if not 0 <= t < config.n_classes or len(raw) != config.n_scores:
        raise ValueError("its class or its scores do not fit the model")
    values = x.values
    if not (np.isfinite(values).all() and (np.abs(values) <= MAX_ABS_VALUE).all()):
        raise ValueError("its values must be finite and within the largest accepted")
    if config.dense:
        if len(values) != config.dim:
            raise ValueError(f"a dense example holds {config.dim} values")
    elif (
        x.index is None
        or len(x.index) != len(values)
        or not ((x.index >= 0).all() and (x.index < config.dim).all())
    ):
        raise ValueError("its buckets must be within the model's")
