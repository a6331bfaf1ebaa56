"""Arguments of the command line checked before anything is sent, refused by argparse (exit 2)
otherwise: numbers within their range (finite, positive, a port), a model's name and a
challenger's id as the service takes them, a JSON object (``--config``: its numbers finite, as
JSON's are) and a drift detector (``--drift``: one the service takes)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, ClassVar, NoReturn

from service.contract.names import (
    CHALLENGER_ID_RULE,
    KEY_NAME_RE,
    NAME_RULE,
    valid_challenger_id,
    valid_name,
)
from service.learner.config import checked_drift
from service.learner.interface import ConfigError


class Parser(argparse.ArgumentParser):
    """argparse's parser (and its subcommands'), whose refusal of a command line that asks
    for ``--json`` (``as_json``, set from the command line before it is parsed) is JSON on
    stderr, as the commands' other failures are: ``{"status": null, "code": "usage",
    "detail"}``; exit 2 either way."""

    as_json: ClassVar[bool] = False

    def error(self, message: str) -> NoReturn:
        if not Parser.as_json:
            super().error(message)
        detail = f"{self.prog}: {message}"
        self.exit(2, json.dumps({"status": None, "code": "usage", "detail": detail}) + "\n")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def positive_number(text: str) -> float:
    value = float(text)
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def finite_number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {value}")
    return value


def challenger_id(text: str) -> str:
    """A challenger's id as the service takes it."""
    if not valid_challenger_id(text):
        raise argparse.ArgumentTypeError(f"{CHALLENGER_ID_RULE}; got {text[:80]!r}")
    return text


def key_name(text: str) -> str:
    """An API key's name as the service records it, or '' (no key)."""
    if text and not KEY_NAME_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r} is not an API key's name: 1-64 letters, digits, '_', '-' or '.'"
        )
    return text


def model_name(text: str) -> str:
    """A model's name as the service takes it (an empty one would ask for another path)."""
    if not valid_name(text):
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a model's name: {NAME_RULE}")
    return text


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
