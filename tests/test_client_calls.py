"""The client's operations as values (``client/perceptron_client/calls.py``): the request each
builds and how each reads an answer, without sending anything."""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pytest

from perceptron_client import (
    ConflictError,
    Features,
    ModelInfo,
    PerceptronError,
    PredictResponse,
    UnavailableError,
    calls,
)
from service.api.schemas.model_schemas import LearnBatchRequest

INFO = {
    "name": "m",
    "config": {
        "classes": [-1, 1],
        "multiclass": "multiclass",
        "n_features": 2,
        "hash_bits": 18,
        "fit_bias": True,
        "learning_rate": 1.0,
        "margin": 0.0,
        "averaged": False,
        "feedback_ttl_s": 86400,
    },
    "version": 3,
    "created": 1700000000,
    "counters": {"learned": 3, "mistakes": 1},
}


def test_model_names_are_one_path_segment() -> None:
    assert calls.read_model("a?b c").path == "/models/a%3Fb%20c"
    assert calls.weights("a#b").path == "/models/a%23b/weights"
    assert (calls.reset_model("m").method, calls.reset_model("m").path) == (
        "POST",
        "/models/m/reset",
    )


@pytest.mark.parametrize("op", [calls.drift, calls.read_model, calls.delete_model])
def test_a_name_that_no_path_holds_is_refused_before_anything_is_sent(op: Any) -> None:
    with pytest.raises(TypeError, match=r"a model's name is a string, not int \(5\)"):
        op(5)
    with pytest.raises(ValueError, match="a model's name is not empty"):
        op("")
    with pytest.raises(ValueError, match="a model's name holds no '/'"):
        op("m/challengers/c")  # (which the service would read as a challenger's path)
    with pytest.raises(TypeError, match="a challenger's id is a string, not int"):
        calls.challenger("m", 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a challenger's id is not empty"):
        calls.delete_challenger("m", "")


def test_numpy_values_become_plain_json() -> None:
    call = calls.learn("m", np.array([1.5, 2.0], dtype=np.float32), np.int64(1))
    assert call.body == {"model": "m", "features": [1.5, 2.0], "label": 1}
    assert json.loads(json.dumps(call.body)) == call.body
    batch = calls.feedback_batch([("m:1", np.int32(-1)), ("m:2", "b")])
    assert batch.body == {
        "feedback": [{"prediction_id": "m:1", "label": -1}, {"prediction_id": "m:2", "label": "b"}]
    }
    assert type(batch.body["feedback"][0]["label"]) is int


@pytest.mark.parametrize(
    "dtype",
    [
        pytest.param("<f8", id="float64"),
        pytest.param(">f4", id="big-endian-float32"),
        pytest.param("i2", id="int16"),
        pytest.param("u1", id="uint8"),
    ],
)
def test_a_numeric_matrix_travels_packed_and_reads_back_as_sent(dtype: str) -> None:
    x = np.arange(12).reshape(4, 3).astype(dtype)
    call = calls.learn_batch("m", x, [0, 1, 0, 1])
    assert set(call.body) == {"model", "packed_features", "labels"}
    decoded = LearnBatchRequest.model_validate(call.body).examples()  # as the service reads it
    assert isinstance(decoded, np.ndarray)
    np.testing.assert_array_equal(decoded.reshape(x.shape), x.astype(float))


def test_other_batches_travel_as_json_lists() -> None:
    rows: list[Features] = [np.array([1.0, 2.0]), {"x": 1.0}]
    assert calls.predict_batch("m", rows).body == {
        "model": "m",
        "features": [[1.0, 2.0], {"x": 1.0}],
    }
    strings = np.array([["a", "b"]])  # not numbers: as JSON, for the service to refuse
    assert calls.predict_batch("m", strings).body == {"model": "m", "features": [["a", "b"]]}


def answer(status: int, body: object = None, **headers: str) -> httpx.Response:
    if body is None:
        return httpx.Response(status, headers=headers)
    return httpx.Response(status, json=body, headers=headers)


def test_a_success_is_read_into_the_operations_type() -> None:
    info = calls.read_model("m").result(answer(200, INFO))
    assert isinstance(info, ModelInfo)
    assert (info.config.n_features, info.counters.learned, info.counters.seen) == (2, 3, 0)
    p = calls.predict("m", [1, 2]).result(
        answer(
            200, {"prediction_id": "m:1", "label": 1, "score": 0.5, "scores": None, "version": 3}
        )
    )
    assert isinstance(p, PredictResponse) and (p.label, p.score) == (1, 0.5)
    assert calls.delete_model("m").result(answer(204)) is None
    assert calls.export_model("m").result(answer(200, {"format": 1})) == {"format": 1}


def test_an_error_answer_raises_for_every_operation_alike() -> None:
    for call in (calls.read_model("m"), calls.feedback("m:1", 1), calls.delete_model("m")):
        with pytest.raises(ConflictError) as e:
            call.result(answer(409, {"detail": "Not again.", "code": "feedback_conflict"}))
        assert (e.value.status, e.value.code, e.value.detail) == (
            409,
            "feedback_conflict",
            "Not again.",
        )
        with pytest.raises(UnavailableError) as busy:
            call.result(
                answer(503, {"detail": "Busy.", "code": "model_busy"}, **{"Retry-After": "2"})
            )
        assert busy.value.retry_after == 2.0


def test_an_export_that_is_not_a_json_object_is_an_error() -> None:
    with pytest.raises(PerceptronError) as e:
        calls.export_model("m").result(answer(200, [1, 2]))
    assert (e.value.status, e.value.code) == (200, "unexpected_answer")


def test_a_name_of_dots_alone_reaches_the_service_as_that_name() -> None:
    """'perceptron models delete ..' sent DELETE / (405): the URL folded the name away."""
    assert calls.read_model("..").path == "/models/%2E%2E"
    assert calls.delete_model(".").path == "/models/%2E"
    assert calls.read_model("v1.2").path == "/models/v1.2"
    request = httpx.Request("GET", "http://127.0.0.1:8000" + calls.read_model("...").path)
    assert request.url.raw_path == b"/models/%2E%2E%2E"


def test_an_answer_that_is_not_the_services_raises_its_error_not_a_traceback() -> None:
    """'perceptron models show ""' printed pydantic's traceback for an empty 307."""
    call = calls.read_model("m")
    empty = httpx.Response(307, request=httpx.Request("GET", "http://h/models/"))
    with pytest.raises(PerceptronError) as raised:
        call.result(empty)
    assert raised.value.code == "unexpected_answer" and "307" in str(raised.value)
    page = httpx.Response(200, text="<html>", request=httpx.Request("GET", "http://h/models/m"))
    with pytest.raises(PerceptronError):
        call.result(page)


def test_a_drift_detector_may_be_named_alone() -> None:
    """``create_model(..., drift="ddm")`` sends the detector as the service takes it, as the
    command line's ``--drift ddm`` does; a configuration goes as given."""
    assert calls.create_model("m", {"drift": "ddm"}).body == {"drift": {"detector": "ddm"}}
    spec = {"detector": "eddm", "alpha": 0.9}
    assert calls.create_model("m", {"drift": spec}).body == {"drift": spec}
    assert calls.create_model("m", {"drift": None}).body == {"drift": None}
