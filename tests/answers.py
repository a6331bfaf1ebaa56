"""What many tests check of an answer, written once: an error answer's status and code, and an
export document with other weights (their sha256 made to match)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import httpx
import numpy as np


def error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The error answer ``r``, once it is ``status`` with ``code``: JSON with the service's two
    fields, detail and code, and nothing else."""
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/json", r.headers
    body: dict[str, Any] = r.json()
    assert body["code"] == code, body
    assert set(body) == {"detail", "code"}, body
    return body


def with_weights(doc: dict[str, Any], values: np.ndarray | float) -> dict[str, Any]:
    """The export ``doc`` with these weights (a number: every weight that), its sha256 theirs."""
    if isinstance(values, float | int):
        values = np.full(len(base64.b64decode(doc["weights"])) // 8, float(values))
    data = np.ascontiguousarray(values, dtype=np.float64).tobytes()
    return {
        **doc,
        "weights": base64.b64encode(data).decode(),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
