"""The service's error answers as exceptions: one class per kind of HTTP status, each carrying
the service's ``status``, stable ``code`` and ``detail``."""

from __future__ import annotations

import httpx
from pydantic import ValidationError

from .answers import ErrorResponse

__all__ = [
    "AuthError",
    "ConflictError",
    "GoneError",
    "InvalidInputError",
    "NotFoundError",
    "PerceptronError",
    "UnavailableError",
    "error_from_item",
    "error_from_response",
]


class PerceptronError(Exception):
    """An error answer of the service: its HTTP ``status``, stable ``code`` and ``detail``."""

    def __init__(
        self, status: int, code: str, detail: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.retry_after = retry_after


class InvalidInputError(PerceptronError):
    """400 (malformed JSON), 413 (over a limit) or 422 (content not accepted)."""


class AuthError(PerceptronError):
    """401 (no or unknown API key) or 403 (the key may not do this)."""


class NotFoundError(PerceptronError):
    """404: no such model, or an unknown prediction."""


class ConflictError(PerceptronError):
    """409: another configuration under that name, a second label for a prediction, or a
    version a model no longer keeps."""


class GoneError(PerceptronError):
    """410: a label that came after its prediction's wait (the model's feedback_ttl_s) ran
    out."""


class UnavailableError(PerceptronError):
    """503 (or 429): retry later; ``retry_after`` holds the seconds the service asked for."""


_BY_STATUS: dict[int, type[PerceptronError]] = {
    400: InvalidInputError,
    401: AuthError,
    403: AuthError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    413: InvalidInputError,
    422: InvalidInputError,
    429: UnavailableError,
    503: UnavailableError,
}

# Items of /feedback/batch carry an error but no status of their own: the status the same
# error has on /feedback.
_ITEM_STATUS = {"prediction_not_found": 404, "feedback_conflict": 409, "prediction_expired": 410}


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: not sent by this service


def error_from_response(response: httpx.Response) -> PerceptronError:
    """The exception for an error answer; bodies that are not the service's JSON still map."""
    code, detail = f"http_{response.status_code}", response.reason_phrase
    try:
        body = ErrorResponse.model_validate_json(response.content)
        code, detail = body.code, body.detail
    except ValidationError:
        text = response.text.strip()
        if text:
            detail = text[:500]
    cls = _BY_STATUS.get(response.status_code, PerceptronError)
    return cls(
        response.status_code, code, detail, _retry_after(response.headers.get("retry-after"))
    )


def error_from_item(error: ErrorResponse) -> PerceptronError:
    """The exception for the error of one item of a /feedback/batch answer."""
    status = _ITEM_STATUS.get(error.code, 422)
    return _BY_STATUS.get(status, PerceptronError)(status, error.code, error.detail)
