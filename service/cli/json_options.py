"""Options of the command line given as JSON: an object (``--config``: its numbers finite, as
JSON's are) and a drift detector (``--drift``: one the service takes), refused by argparse (exit
2) otherwise."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from service.learner.config import checked_drift
from service.learner.interface import ConfigError


def detector_arg(text: str) -> dict[str, Any]:
    """A drift detector: its name alone, or its configuration as a JSON object; checked here
    as the service checks it (so a replay refuses it before it deletes or sends anything)."""
    drift = json_object(text) if text.lstrip().startswith("{") else {"detector": text}
    try:
        checked_drift(drift)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return drift


def json_object(text: str) -> dict[str, Any]:
    """A JSON object, every number in it finite (as JSON's are)."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from e
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return value


def _no_constant(name: str) -> Any:
    raise argparse.ArgumentTypeError(f"not JSON: {name} is no number JSON has")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"{text} is past the largest number a double holds")
    return number
