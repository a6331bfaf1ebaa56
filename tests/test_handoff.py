"""A hand-over's request holds the examples as sent; its answer: what the writer answered a
handed-over request is what its requester answers, a 503's Retry-After included (or left out,
for an outcome that must not be retried)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.exceptions import OutOfMemoryError

from service.app import _answer
from service.contract.learn_wire import (
    Labelled,
    pack_error,
    pack_request,
    request_head,
    unpack_answer,
    unpack_examples,
)
from service.errors import (
    ModelBusy,
    OutcomeUnknown,
    ServiceError,
    Unavailable,
    store_unavailable,
)
from service.learner import Example
from service.learner.features import Rows
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


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 40),
    st.sampled_from([None, 1, 7]),
    st.lists(st.sampled_from(["", "a", "bé"]), min_size=1, max_size=3),
    st.data(),
)
def test_a_handed_over_request_holds_its_examples_as_sent(
    n: int, d: int | None, names: list[str], data: st.DataObject
) -> None:
    """Dense rows of one matrix or examples one by one, sent by one key or several: the
    writer reads the same examples, classes and keys, and the two forms are the same bytes."""
    rng = np.random.default_rng(n)
    sources = [data.draw(st.sampled_from(names)) for _ in range(n)]
    ts = [int(t) for t in rng.integers(0, 3, size=n)]
    if d is None:  # named features: sparse examples of 0 to 4 buckets
        xs: list[Example] = []
        for _ in range(n):
            index = np.sort(rng.choice(50, int(rng.integers(0, 5)), replace=False))
            xs.append(Example(rng.normal(size=len(index)), index.astype(np.int64)))
    else:
        rows = Rows(rng.normal(size=(n, d)), np.zeros(n))
        rows.sq[:] = [x.sq_norm for x in rows]
        xs = list(rows)
        assert pack_request("t" * 22, 5, "e" * 16, Labelled(rows, ts, sources)) == pack_request(
            "t" * 22, 5, "e" * 16, Labelled(xs, ts, sources)
        )
    request = pack_request("t" * 22, 5, "e" * 16, Labelled(xs, ts, sources))
    head = request_head(request)
    got = unpack_examples(request, head, d)
    assert (head.n, got.ts, got.sources) == (n, ts, sources)
    for a, b in zip(got.xs, xs, strict=True):
        assert np.array_equal(a.values, b.values) and a.sq_norm == b.sq_norm
        assert (a.index is None) == (b.index is None)
        assert a.index is None or b.index is None or np.array_equal(a.index, b.index)
    kept = [bool(k) for k in rng.integers(0, 2, size=n)]
    joined = Labelled.join([got, got.keep(kept)])
    assert joined.ts == ts + [t for t, k in zip(ts, kept, strict=True) if k]
    assert joined.sources == sources + [s for s, k in zip(sources, kept, strict=True) if k]
    assert [x.sq_norm for x in joined.xs] == [x.sq_norm for x in got.xs] + [
        x.sq_norm for x, k in zip(got.xs, kept, strict=True) if k
    ]
