"""Every client error: its status, its code, and that nothing changed."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import numpy as np
import pytest

from .inprocess import WaitingClock

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

MODEL = {"classes": ["a", "b"], "n_features": 3}


@pytest.fixture
def dense(client: httpx.Client) -> httpx.Client:
    assert client.put("/models/d", json=MODEL).status_code == 201
    client.post("/learn", json={"model": "d", "features": [1, 2, 3], "label": "b"})
    return client


def state(client: httpx.Client) -> tuple[Any, Any]:
    return client.get("/models/d/weights").json(), client.get("/models/d").json()["counters"]


BAD_REQUESTS = [
    pytest.param("post", "/predict", b"{not json", 400, "malformed_json", id="malformed-json"),
    pytest.param("post", "/predict", {"model": "d"}, 422, "validation_error", id="no-features"),
    pytest.param(
        "post",
        "/predict",
        {"model": "d", "features": "1,2,3"},
        422,
        "validation_error",
        id="features-string",
    ),
    pytest.param(
        "post",
        "/predict",
        {"model": "d", "features": [1, 2]},
        422,
        "wrong_dimension",
        id="wrong-dimension",
    ),
    pytest.param(
        "post",
        "/predict",
        {"model": "d", "features": {"x": 1}},
        422,
        "wrong_dimension",
        id="named-to-dense",
    ),
    pytest.param(
        "post",
        "/predict",
        {"model": "d", "features": [1, 2, "NaN"]},
        422,
        "invalid_features",
        id="nan-string",
    ),
    pytest.param(
        "post",
        "/predict",
        {"model": "d", "features": [1, True, 3]},
        422,
        "invalid_features",
        id="boolean-value",
    ),
    pytest.param(
        "post",
        "/predict",
        b'{"model": "d", "features": [1, 2, NaN]}',
        422,
        "non_finite_feature",
        id="nan-literal",
    ),
    pytest.param(
        "post",
        "/predict",
        b'{"model": "d", "features": [1, Infinity, 3]}',
        422,
        "non_finite_feature",
        id="infinity-literal",
    ),
    pytest.param(
        "post",
        "/predict",
        {"model": "nope", "features": [1, 2, 3]},
        404,
        "model_not_found",
        id="unknown-model",
    ),
    pytest.param(
        "post",
        "/predict",
        {"model": "bad/name", "features": [1]},
        422,
        "validation_error",
        id="bad-model-name",
    ),
    pytest.param("post", "/predict", {"features": {}}, 422, "empty_features", id="empty-features"),
    pytest.param(
        "post",
        "/predict",
        {"model": "d", "features": [1, 2, 3], "x": 1},
        422,
        "validation_error",
        id="unknown-field",
    ),
    pytest.param(
        "post",
        "/learn",
        {"model": "d", "features": [1, 2, 3], "label": "c"},
        422,
        "unknown_label",
        id="learn-unknown-label",
    ),
    pytest.param(
        "post",
        "/learn",
        {"model": "d", "features": [1, 2, 3], "label": 1.5},
        422,
        "validation_error",
        id="learn-float-label",
    ),
    pytest.param(
        "post",
        "/feedback",
        {"prediction_id": "d:AAAAAAAAAAAAAAAAAAAA", "label": "a"},
        404,
        "prediction_not_found",
        id="unknown-prediction",
    ),
    pytest.param(
        "post",
        "/feedback",
        {"prediction_id": "garbage", "label": "a"},
        404,
        "prediction_not_found",
        id="malformed-prediction-id",
    ),
    pytest.param(
        "post",
        "/feedback",
        {"prediction_id": "d:../../etc", "label": "a"},
        404,
        "prediction_not_found",
        id="hostile-prediction-id",
    ),
    pytest.param("put", "/models/d", {"n_features": 4}, 409, "model_exists", id="other-config"),
    pytest.param("put", "/models/x", {"margin": -1}, 422, "invalid_config", id="bad-margin"),
    pytest.param("put", "/models/x", {"classes": ["a"]}, 422, "validation_error", id="one-class"),
    pytest.param(
        "put", "/models/x", {"classes": ["a", "a"]}, 422, "invalid_config", id="duplicate-classes"
    ),
    pytest.param(
        "put",
        "/models/x",
        {"classes": ["\u00e9", "e\u0301"]},
        422,
        "invalid_config",
        id="classes-equal-in-nfc",
    ),
    pytest.param(
        "put", "/models/x", {"classes": ["a", " a"]}, 422, "invalid_config", id="classes-spaced"
    ),
    pytest.param("put", "/models/x", {"classes": ["a", " "]}, 422, "invalid_config", id="blank"),
    pytest.param(
        "put", "/models/x", {"hash_bits": 40}, 422, "invalid_config", id="hash-bits-too-large"
    ),
    pytest.param(
        "put", "/models/x", {"multiclass": "tree"}, 422, "validation_error", id="unknown-strategy"
    ),
    pytest.param("put", "/models/" + "x" * 65, {}, 422, "invalid_model_name", id="name-too-long"),
    pytest.param("put", "/models/a%20b", {}, 422, "invalid_model_name", id="name-with-space"),
    pytest.param("get", "/models/nope", None, 404, "model_not_found", id="read-unknown"),
    pytest.param("get", "/models/nope/weights", None, 404, "model_not_found", id="weights-unknown"),
    pytest.param("delete", "/models/nope", None, 404, "model_not_found", id="delete-unknown"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), BAD_REQUESTS)
def test_bad_request_gets_clear_error_and_changes_nothing(
    dense: httpx.Client, method: str, path: str, body: Any, status: int, code: str
) -> None:
    before = state(dense)
    kwargs: dict[str, Any] = {}
    if isinstance(body, bytes):
        kwargs = {"content": body, "headers": {"content-type": "application/json"}}
    elif body is not None:
        kwargs = {"json": body}
    r = dense.request(method.upper(), path, **kwargs)
    assert r.status_code == status, r.text
    assert r.json()["code"] == code
    assert isinstance(r.json()["detail"], str) and r.json()["detail"]
    after = state(dense)
    assert after[0] == before[0]
    counters_before, counters_after = before[1], after[1]
    counters_after.pop("unknown_feedback")
    counters_before.pop("unknown_feedback")
    assert counters_after == counters_before


def test_duplicate_feedback_is_not_applied_twice(dense: httpx.Client) -> None:
    pid = dense.post("/predict", json={"model": "d", "features": [-1, -2, -3]}).json()
    first = dense.post("/feedback", json={"prediction_id": pid["prediction_id"], "label": "b"})
    assert first.json()["duplicate"] is False and first.json()["updated"] is True
    before = state(dense)
    again = dense.post("/feedback", json={"prediction_id": pid["prediction_id"], "label": "b"})
    assert again.status_code == 200
    assert again.json() == {**first.json(), "duplicate": True}
    after = state(dense)
    assert after[0] == before[0]
    assert after[1]["duplicates"] == before[1]["duplicates"] + 1
    assert after[1]["feedback"] == before[1]["feedback"]


def test_conflicting_feedback_is_409(dense: httpx.Client) -> None:
    pid = dense.post("/predict", json={"model": "d", "features": [1, 1, 1]}).json()["prediction_id"]
    assert dense.post("/feedback", json={"prediction_id": pid, "label": "a"}).status_code == 200
    before = state(dense)
    r = dense.post("/feedback", json={"prediction_id": pid, "label": "b"})
    assert r.status_code == 409 and r.json()["code"] == "feedback_conflict"
    after = state(dense)
    assert after[0] == before[0]


def test_feedback_with_unknown_label_is_422_and_keeps_the_prediction(dense: httpx.Client) -> None:
    pid = dense.post("/predict", json={"model": "d", "features": [1, 1, 1]}).json()["prediction_id"]
    r = dense.post("/feedback", json={"prediction_id": pid, "label": "zzz"})
    assert r.status_code == 422 and r.json()["code"] == "unknown_label"
    assert dense.post("/feedback", json={"prediction_id": pid, "label": "a"}).status_code == 200


def test_a_label_in_another_form_of_a_class_lands_on_that_class(client: httpx.Client) -> None:
    """Labels are compared in Unicode NFC without surrounding spaces: "e" with a combining
    accent, or a class with spaces around it, is the class as the model names it."""
    nfc, nfd = "\u00e9t\u00e9", "e\u0301te\u0301"  # "été", two ways
    assert (
        client.put("/models/u", json={"classes": [nfc, " b"], "n_features": 2}).status_code == 201
    )

    def learn(body: dict[str, Any]) -> None:
        r = client.post(body.pop("path"), json={"model": "u", **body})
        assert r.status_code == 200, r.text

    learn({"path": "/learn", "features": [1, 0], "label": f" {nfd}\t"})
    learn({"path": "/learn", "features": [0, 1], "label": "b"})
    learn({"path": "/learn/batch", "features": [[1, 0], [0, 1]], "labels": [nfd, "b "]})
    x = base64.b64encode(np.array([[1, 0], [0, 1]], dtype="<f8").tobytes()).decode()
    learn({"path": "/learn/batch", "packed_features": x, "labels": [nfd, "b"]})
    pid = client.post("/predict", json={"model": "u", "features": [1, 0]}).json()["prediction_id"]
    r = client.post("/feedback", json={"prediction_id": pid, "label": nfd})
    assert r.status_code == 200, r.text
    assert client.post("/feedback", json={"prediction_id": pid, "label": nfc}).json()["duplicate"]
    item = {"prediction_id": pid, "label": f"{nfc} "}
    results = client.post("/feedback/batch", json={"feedback": [item]}).json()["results"]
    assert results[0]["duplicate"], results
    matrix = client.get("/models/u/metrics").json()["confusion"]
    assert matrix["labels"] == [nfc, " b"]
    assert [sum(row) for row in matrix["matrix"]] == [4, 3]  # true class: none unknown
    assert client.get("/models/u").json()["counters"]["learned"] == 6


def test_unknown_prediction_is_counted(dense: httpx.Client) -> None:
    dense.post("/feedback", json={"prediction_id": "d:AAAAAAAAAAAAAAAAAAAA", "label": "a"})
    assert dense.get("/models/d").json()["counters"]["unknown_feedback"] == 1


def test_a_label_after_the_wait_is_410_and_counted(
    client: httpx.Client, clock: WaitingClock
) -> None:
    client.put("/models/e", json={"n_features": 1, "feedback_ttl_s": 1})
    r = client.post("/predict/batch", json={"model": "e", "features": [[1], [2]]})
    late, later = (p["prediction_id"] for p in r.json()["predictions"])
    clock.wait(2.1)  # skipped in-process; slept on a real Redis, which keeps its own time
    r = client.post("/feedback", json={"prediction_id": late, "label": 1})
    assert r.status_code == 410 and r.json()["code"] == "prediction_expired"
    assert "after its prediction's wait of 1 s" in r.json()["detail"]
    items = [{"prediction_id": later, "label": 1}, {"prediction_id": "e:" + "A" * 20, "label": 1}]
    results = client.post("/feedback/batch", json={"feedback": items}).json()["results"]
    assert [x["error"]["code"] for x in results] == ["prediction_expired", "prediction_not_found"]
    counters = client.get("/models/e").json()["counters"]
    assert (counters["expired"], counters["unknown_feedback"], counters["feedback"]) == (2, 1, 0)
    assert client.get("/models/e/metrics").json()["counters"]["expired"] == 2
    assert 'perceptron_model_expired_total{model="e"} 2.0' in client.get("/metrics").text
