"""A hand-over's answer: what the writer answered a handed-over request is what its requester
answers, a 503's Retry-After included (or left out, for an outcome that must not be retried)."""

from __future__ import annotations

import pytest
from redis.exceptions import OutOfMemoryError

from service.app import _answer
from service.contract.learn_wire import pack_error, unpack_answer
from service.errors import (
    ModelBusy,
    OutcomeUnknown,
    ServiceError,
    Unavailable,
    store_unavailable,
)
from service.store.refusals import service_error


def handed_back(error: ServiceError) -> ServiceError:
    with pytest.raises(ServiceError) as raised:
        unpack_answer(pack_error(error))
    return raised.value


@pytest.mark.parametrize(
    "error",
    [
        store_unavailable(),
        ModelBusy("Model 'm' kept changing; retry shortly."),
        service_error(OutOfMemoryError("OOM command not allowed")),  # store_full, 5 s
    ],
    ids=lambda e: e.code,
)
def test_a_503_that_says_to_retry_keeps_its_retry_after(error: Unavailable) -> None:
    back = handed_back(error)
    assert isinstance(back, Unavailable)
    assert (back.status, back.code, back.message) == (503, error.code, error.message)
    assert back.retry_after_s == error.retry_after_s
    answer = _answer(back)
    assert answer.headers["retry-after"] == str(error.retry_after_s)


def test_an_outcome_that_must_not_be_retried_stays_without_retry_after() -> None:
    back = handed_back(OutcomeUnknown("Model 'm': the learn's outcome is unknown."))
    assert not isinstance(back, Unavailable)
    assert (back.status, back.code) == (503, "learn_outcome_unknown")
    assert "retry-after" not in _answer(back).headers


def test_any_other_error_keeps_its_status_and_code() -> None:
    error = ServiceError("The model was replaced.", code="stale_model")
    back = handed_back(error)
    assert (back.status, back.code, back.message) == (error.status, error.code, error.message)
    assert "retry-after" not in _answer(back).headers
