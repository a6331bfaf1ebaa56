"""The export file of a model: format, checks, and what an import may change. Pure: no I/O."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .errors import InvalidInput
from .learner import ConfigError, ModelConfig, Weights
from .learner.codec import pack_weights, unpack_weights

FORMAT = "perceptron-model"
FORMAT_VERSION = 1
# Counters an export carries; the time series, outcome ring and recent examples stay behind.
COUNTERS = (
    "predictions",
    "feedback",
    "learned",
    "mistakes",
    "duplicates",
    "conflicts",
    "unknown_feedback",
    "r2",
)


@dataclass(frozen=True)
class ModelFile:
    config: ModelConfig
    weights: Weights
    counters: dict[str, str]
    created: int


def export_document(
    name: str, config: ModelConfig, weights: Weights, meta: dict[str, str]
) -> dict[str, Any]:
    data = pack_weights(weights)
    counters = {k: v for k, v in meta.items() if k in COUNTERS or k.startswith("cm:")}
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "config": config.to_dict(),
        "created": int(meta.get("created", 0)),
        "version": weights.version,
        "seen": weights.seen,
        "counters": counters,
        "weights": base64.b64encode(data).decode(),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _bad(why: str) -> InvalidInput:
    return InvalidInput(f"This is not a valid model export: {why}", code="invalid_import")


def parse_document(doc: Any) -> ModelFile:
    """Check everything an import relies on; raise InvalidInput saying what is wrong."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(f"'format' must be {FORMAT!r}.")
    if doc.get("format_version") != FORMAT_VERSION:
        raise _bad(
            f"'format_version' {doc.get('format_version')!r} is not supported "
            f"(this service reads {FORMAT_VERSION})."
        )
    try:
        config = ModelConfig.from_dict(doc["config"])
        version, seen, created = int(doc["version"]), int(doc["seen"]), int(doc["created"])
        data = base64.b64decode(doc["weights"], validate=True)
        digest = str(doc["sha256"])
        counters = {
            str(k): str(int(v) if k != "r2" else float(v)) for k, v in dict(doc["counters"]).items()
        }
    except ConfigError as e:
        raise _bad(str(e)) from e
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(f"a field is missing or of the wrong type ({type(e).__name__}: {e}).") from e
    if hashlib.sha256(data).hexdigest() != digest:
        raise _bad("the weights do not match their sha256 checksum.")
    if version < 0 or seen < 0:
        raise _bad("'version' and 'seen' must be >= 0.")
    for k in counters:
        if k not in COUNTERS and not k.startswith("cm:"):
            raise _bad(f"unknown counter {k[:40]!r}.")
    try:
        weights = unpack_weights(config, data, version, seen)
    except ValueError as e:
        raise _bad(str(e)) from e
    return ModelFile(config, weights, counters, created)


def config_json(config: ModelConfig) -> str:
    return json.dumps(config.to_dict())
