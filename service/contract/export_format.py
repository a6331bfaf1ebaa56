"""The export file of a model: format, checks, and what an import may change. Pure: no I/O."""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.contract import store_protocol as protocol
from service.contract.export_background import background_document, background_of
from service.contract.names import KEY_NAME_PATTERN
from service.contract.sources import parse_source
from service.contract.store_protocol import Field, Meta, Reason, parse_cell
from service.contract.store_values import drift_events
from service.errors import InvalidInput
from service.learner import ConfigError, ModelConfig, Weights
from service.learner.codec import pack_weights, unpack_weights
from service.learner.drift_detectors import (
    DetectorError,
    check_state,
    read_state,
    state_text,
)
from service.learner.interface import MAX_WEIGHT

FORMAT = "perceptron-model"
FORMAT_VERSION = 1
# What an export carries of the meta hash; the time series, outcome ring and recent examples
# stay behind.
COUNTERS = (*(c.name for c in protocol.COUNTERS if c.exported), Meta.R2)


@dataclass(frozen=True)
class FileCheckpoint:
    """A checkpoint an export carries: its weights at ``version``, and what it recorded."""

    weights: Weights
    ms: int
    reason: str
    mistakes: int
    window: int


@dataclass(frozen=True)
class ModelFile:
    config: ModelConfig
    weights: Weights
    counters: dict[str, str]
    created: int
    checkpoints: list[FileCheckpoint] = field(default_factory=list)
    # The drift detector's state and events, as the model's hash keeps them (none without a
    # detector, or from a file made before files carried them: the detector starts afresh).
    drift: dict[str, str] = field(default_factory=dict)
    # A retraining's background learner: the examples it learned (``export_background.py``)
    background: list[bytes] = field(default_factory=list, kw_only=True)


def export_document(
    name: str,
    config: ModelConfig,
    weights: Weights,
    meta: dict[str, str],
    checkpoints: list[FileCheckpoint] | None = None,
    *,
    background: list[bytes] | None = None,
) -> dict[str, Any]:
    """The export file; with ``checkpoints`` (oldest first), those too; ``background``: the
    background learner of a model that retrains."""
    doc = _weights_document(weights)
    counters = {
        k: v
        for k, v in meta.items()
        if k in COUNTERS
        or k == Meta.SEEN_OFFSET  # (an averaged learner's own count apart: 'seen' is it)
        or parse_cell(k) is not None
        or parse_source(k) is not None
    }
    out = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "config": config.to_dict(),
        "created": int(meta.get(Meta.CREATED, 0)),
        "version": weights.version,
        "seen": weights.seen,
        "counters": counters,
        **doc,
    }
    if config.drift is not None:
        drift = _drift_document(config, meta)
        if config.retrains:
            drift["background"] = background_document(background or [])
        out["drift"] = drift
    if checkpoints is not None:
        out["checkpoints"] = [
            {
                "version": c.weights.version,
                "seen": c.weights.seen,
                "time_ms": c.ms,
                "reason": c.reason,
                "mistakes": c.mistakes,
                "window": c.window,
                **_weights_document(c.weights),
            }
            for c in checkpoints
        ]
    return out


def _drift_document(config: ModelConfig, meta: dict[str, str]) -> dict[str, Any]:
    """The detector's state (its numbers as the store keeps them) and its last events."""
    assert config.drift_detector is not None
    events = [
        {
            "at_seen": e.at,
            "kind": e.kind,
            "time_ms": e.ms,
            "action": "retrained" if e.retrained else None,
            "version": e.version,
        }
        for e in drift_events(meta.get(Meta.DRIFT_EVENTS, ""))
    ]
    state = read_state(config.drift_detector, meta.get(Meta.DRIFT_STATE, ""))
    return {"state": state_text(state), "events": events}


def _weights_document(weights: Weights) -> dict[str, str]:
    data = pack_weights(weights)
    return {"weights": base64.b64encode(data).decode(), "sha256": hashlib.sha256(data).hexdigest()}


def _bad(why: str) -> InvalidInput:
    return InvalidInput(f"This is not a valid model export: {why}", code="invalid_import")


FIELDS = {"format", "format_version", "name", "config", "created", "version", "seen"}
FIELDS |= {"counters", "weights", "sha256", "checkpoints", "drift"}
DRIFT_FIELDS = {"state", "events"}
EVENT_FIELDS = {"at_seen", "kind", "time_ms"}
CHECKPOINT_FIELDS = {"version", "seen", "time_ms", "reason", "mistakes", "window"}
CHECKPOINT_FIELDS |= {"weights", "sha256"}
MAX_CHECKPOINTS = 1000  # carried by one file (the request's size bounds them first)
MAX_COUNT = protocol.MAX_COUNT
_COUNT_RANGE = f"an integer in [0, 2**{MAX_COUNT.bit_length() - 1}]"
_DIGITS = re.compile(r"0|[1-9][0-9]{0,15}")
_CELL = re.compile(re.escape(Field.CELL) + r"(0|[1-9][0-9]{0,3}):(0|[1-9][0-9]{0,3})")
# a count per API key's name (empty: keys off) of labelled examples, mistakes or updates
_SOURCE = re.compile(
    f"{re.escape(Field.SOURCE)}(?:{KEY_NAME_PATTERN})?"
    f"(?:{'|'.join(map(re.escape, (Field.EXAMPLES, Field.MISTAKES, Field.UPDATES)))})"
)
MAX_SOURCE_COUNTERS = 3 * 1024  # those of 1,024 keys


def _count(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise _bad(f"{key!r} must be {_COUNT_RANGE}; got {str(value)[:40]}.")
    return value


def _seen_offset(raw: dict[str, Any], seen: int) -> int:
    """What the counters count beyond the learner's own ``seen`` (an averaged learner rolled
    back to an earlier count): an integer, ``seen`` plus it a count."""
    offset = raw.get(Meta.SEEN_OFFSET, 0)  # (counted = 'seen' + this)
    if isinstance(offset, str) and re.fullmatch("-?[0-9]{1,16}", offset):
        offset = int(offset)
    if (
        isinstance(offset, bool)
        or not isinstance(offset, int)
        or not 0 <= seen + offset <= MAX_COUNT
    ):
        raise _bad(
            f"counter {Meta.SEEN_OFFSET!r} must be an integer, 'seen' plus it {_COUNT_RANGE}."
        )
    return offset


def _counters(raw: Any, config: ModelConfig, seen: int) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise _bad("'counters' must be an object.")
    out: dict[str, str] = {}
    sources = sum(1 for key in raw if isinstance(key, str) and key.startswith(Field.SOURCE))
    if sources > MAX_SOURCE_COUNTERS:
        raise _bad(f"{sources} per-key counters; at most {MAX_SOURCE_COUNTERS}.")
    offset = _seen_offset(raw, seen)
    for key, value in ((k, v) for k, v in raw.items() if k != Meta.SEEN_OFFSET):
        cell = _CELL.fullmatch(key)
        source = _SOURCE.fullmatch(key) is not None
        if key not in COUNTERS and cell is None and not source:
            raise _bad(f"unknown counter {key[:40]!r}.")
        if cell is not None and max(int(i) for i in cell.groups()) >= config.n_classes:
            raise _bad(f"counter {key!r} names a class this model does not have.")
        # Exports write the counters as Redis keeps them: decimal strings.
        if key == Meta.R2:
            r2 = _number(value)
            if r2 is None or not 0 <= r2 <= 1e300:
                raise _bad(f"'r2' must be a finite number >= 0; got {str(value)[:40]}.")
            out[key] = str(r2)
            continue
        if isinstance(value, str) and _DIGITS.fullmatch(value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            raise _bad(f"counter {key!r} must be {_COUNT_RANGE}; got {str(value)[:40]}.")
        # (the stream's counts, feedback, learned and per key, may pass it: since a
        # promotion, 'seen' counts what the promoted learner has seen)
        out[key] = str(value)
    return _with_counted(out, seen + offset, offset)


def _with_counted(out: dict[str, str], counted: int, offset: int) -> dict[str, str]:
    """The counters with the labelled examples counted, when the learner's own count is apart
    (an averaged learner rolled back counts its own examples apart from those counted)."""
    if int(out.get("mistakes", 0)) > counted:
        raise _bad(
            f"counter 'mistakes' ({out['mistakes']}) exceeds the labelled examples ({counted})."
        )
    if offset:
        out[Meta.SEEN], out[Meta.SEEN_OFFSET] = str(counted), str(offset)
    return out


def _number(v: Any) -> float | None:
    """A finite number given as a JSON number or a decimal string (as JSON writes a number:
    not Python's '5_0' nor ' 5 '), else None."""
    if isinstance(v, str):
        if len(v) > 40 or _DECIMAL.fullmatch(v) is None:
            return None
        v = float(v)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def parse_document(doc: Any) -> ModelFile:
    """Check every field an import relies on; raise InvalidInput saying what is wrong.

    The file may have been edited by hand: nothing in it is trusted beyond what is checked
    here, so that no imported model can break a request, the metrics of any model, or the
    store's counters.
    """
    config = _config_of(doc)
    # (A version past 'seen' is a model's own after a rollback past a reset: counters stay.)
    version, seen, created = _count(doc, "version"), _count(doc, "seen"), _count(doc, "created")
    counters = _counters(doc.get("counters"), config, seen)
    weights = _weights_of(doc, config, version, seen)
    checkpoints = _checkpoints_of(doc.get("checkpoints", []), config)
    drift = _drift_of(doc.get("drift"), config)
    try:
        background = background_of((doc.get("drift") or {}).get("background"), config)
    except ValueError as e:
        raise _bad(str(e)) from e
    return ModelFile(
        config, weights, counters, created, checkpoints, drift=drift, background=background
    )


def _drift_of(raw: Any, config: ModelConfig) -> dict[str, str]:
    """The file's drift detector state and events, as the model's hash keeps them."""
    if raw is None:
        return {}
    detector = config.drift_detector
    if detector is None:
        raise _bad("'drift' carries a detector's state, but the configuration has none.")
    if not isinstance(raw, dict) or set(raw) - {"background"} != DRIFT_FIELDS:
        raise _bad(f"'drift' must be an object of {sorted(DRIFT_FIELDS)} (and 'background').")
    text, events = raw["state"], raw["events"]
    try:
        if not isinstance(text, str) or len(text) > 1000:
            raise DetectorError("it must be its numbers in a string, separated by spaces.")
        state = [float(v) for v in text.split()]
        check_state(detector, state)
    except (DetectorError, ValueError) as e:
        raise _bad(f"the drift detector's state: {e}") from e
    if not isinstance(events, list) or len(events) > protocol.DRIFT_EVENTS_KEPT:
        raise _bad(f"'drift.events' must be a list of at most {protocol.DRIFT_EVENTS_KEPT}.")
    lines = []
    for i, one in enumerate(events):
        if (
            not isinstance(one, dict)
            or set(one) - {"action", "version"} != EVENT_FIELDS
            or one["kind"] not in KINDS
            or one.get("action") not in (None, "retrained")
            or (one.get("action") and one["kind"] != "drift")
            or (one.get("version") is not None and not one.get("action"))
        ):
            raise _bad(
                f"drift event {i} must be {sorted(EVENT_FIELDS)} (and 'action', null or "
                f"'retrained' for a drift, with its 'version'), kind one of {KINDS}."
            )
        healed = " retrained" if one.get("action") else ""
        if one.get("action") and one.get("version") is not None:
            healed += f" {_count(one, 'version')}"
        lines.append(f"{_count(one, 'at_seen')} {one['kind']} {_count(one, 'time_ms')}{healed}\n")
    return {Meta.DRIFT_STATE: state_text(state), Meta.DRIFT_EVENTS: "".join(lines)}


KINDS = ("warning", "drift")
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")  # (JSON's number)


def _checkpoints_of(raw: Any, config: ModelConfig) -> list[FileCheckpoint]:
    """The file's checkpoints, each checked as the model's own weights are."""
    if not isinstance(raw, list):
        raise _bad("'checkpoints' must be a list.")
    if len(raw) > MAX_CHECKPOINTS:
        raise _bad(f"{len(raw)} checkpoints; at most {MAX_CHECKPOINTS}.")
    out = []
    for i, c in enumerate(raw):
        where = f"checkpoint {i}"
        if not isinstance(c, dict):
            raise _bad(f"{where} must be an object.")
        if set(c) != CHECKPOINT_FIELDS:
            odd = sorted(set(c) ^ CHECKPOINT_FIELDS)[0]
            raise _bad(f"{where}: field {str(odd)[:40]!r} is unknown or missing.")
        version, seen, ms = _count(c, "version"), _count(c, "seen"), _count(c, "time_ms")
        mistakes, window = _count(c, "mistakes"), _count(c, "window")
        # (the window's examples were counted: an averaged learner's own count may be less)
        if mistakes > window or window > protocol.RING_SIZE:
            raise _bad(f"{where}: 'mistakes' <= 'window' <= {protocol.RING_SIZE}.")
        if c["reason"] not in Reason.fields().values():
            raise _bad(f"{where}: 'reason' must be one of {sorted(Reason.fields().values())}.")
        weights = _weights_of(c, config, version, seen)
        out.append(FileCheckpoint(weights, ms, c["reason"], mistakes, window))
    return out


def _config_of(doc: Any) -> ModelConfig:
    """The document's configuration, once its header and fields are checked."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(f"'format' must be {FORMAT!r}.")
    if type(doc.get("format_version")) is not int or doc["format_version"] != FORMAT_VERSION:
        raise _bad(
            f"'format_version' {str(doc.get('format_version'))[:40]!r} is not supported "
            f"(this service reads {FORMAT_VERSION})."
        )
    unknown = sorted(set(doc) - FIELDS)
    if unknown:
        raise _bad(f"unknown field {str(unknown[0])[:40]!r}.")
    if not isinstance(doc.get("config"), dict):
        raise _bad("'config' must be an object.")
    unknown = sorted(set(doc["config"]) - ModelConfig.field_names())
    if unknown:
        raise _bad(f"unknown configuration field {str(unknown[0])[:40]!r}.")
    try:
        return ModelConfig.from_dict(doc["config"])
    except (ConfigError, TypeError) as e:
        raise _bad(str(e)) from e


def _weights_of(doc: dict[str, Any], config: ModelConfig, version: int, seen: int) -> Weights:
    """The document's weights, checked against their checksum and within bounds."""
    if not isinstance(doc.get("weights"), str) or not isinstance(doc.get("sha256"), str):
        raise _bad("'weights' and 'sha256' must be strings.")
    try:
        data = base64.b64decode(doc["weights"], validate=True)
    except ValueError as e:
        raise _bad(f"'weights' is not base64 ({e}).") from e
    if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), doc["sha256"].lower()):
        raise _bad("the weights do not match their sha256 checksum.")
    if not data:  # (a snapshot's "all zeros"; a file holds every weight: unpack counts them)
        raise _bad("'weights' holds no bytes; an export holds every weight and bias.")
    try:
        weights = unpack_weights(config, data, version, seen)
    except ValueError as e:
        raise _bad(str(e)) from e
    for a in weights.arrays():
        if not (np.isfinite(a).all() and np.abs(a).max() <= MAX_WEIGHT):
            raise _bad("the weights must be finite numbers within +-1e250.")
    return weights
