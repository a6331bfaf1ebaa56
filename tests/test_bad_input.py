"""Bad inputs not covered elsewhere at the HTTP level: status, code, and that nothing changed.

Together with tests/test_api_errors.py, tests/test_batch_endpoints.py and
tests/test_security.py this covers every row of the table in deploy/RELIABILITY.md.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import MakeService
from .test_api_errors import MODEL, state

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one


@pytest.fixture
def dense(client: httpx.Client) -> httpx.Client:
    assert client.put("/models/d", json=MODEL).status_code == 201
    client.post("/learn", json={"model": "d", "features": [1, 2, 3], "label": "b"})
    return client


def raw(model: str, values: str) -> bytes:
    return b'{"model": "%s", "features": %s}' % (model.encode(), values.encode())


BAD_BODIES = [
    pytest.param(
        "/predict", b'\xff\xfe{"features": {"x": 1}}', 400, "malformed_json", id="not-utf8"
    ),
    pytest.param("/predict", b"", 422, "validation_error", id="empty-body"),
    pytest.param("/predict", b"[1, 2, 3]", 422, "validation_error", id="body-not-object"),
    pytest.param("/predict", b"null", 422, "validation_error", id="body-null"),
    pytest.param("/predict", raw("d", '[1, 2, "Infinity"]'), 422, "invalid_features", id="inf-str"),
    pytest.param(
        "/predict", raw("d", '[1, 2, "-Infinity"]'), 422, "invalid_features", id="-inf-str"
    ),
    pytest.param(
        "/predict", raw("d", '[1, 2, "nan"]'), 422, "invalid_features", id="nan-lower-str"
    ),
    pytest.param("/predict", raw("d", "[1, 2, null]"), 422, "invalid_features", id="null-value"),
    pytest.param("/predict", raw("d", "[1, 2, [3]]"), 422, "invalid_features", id="nested-list"),
    pytest.param("/predict", raw("d", "[1, -Infinity, 3]"), 422, "non_finite_feature", id="-inf"),
    pytest.param("/predict", raw("d", "[1, 2, 1e309]"), 422, "non_finite_feature", id="overflow"),
    pytest.param("/predict", raw("d", "[1, 2, 1e16]"), 422, "value_too_large", id="1e16"),
    pytest.param("/predict", raw("d", "[1, 2, -1e300]"), 422, "value_too_large", id="-1e300"),
    pytest.param(
        "/predict", raw("d", "[1, 2, %s]" % ("9" * 40)), 422, "value_too_large", id="bigint"
    ),
    pytest.param(
        "/predict", raw("d", "[1, 2, %s]" % ("9" * 5000)), 400, "malformed_json", id="5000-digits"
    ),
    pytest.param(
        "/predict", raw("default", '{"a": 1e999}'), 422, "non_finite_feature", id="named-inf"
    ),
    pytest.param("/predict", raw("default", '{"a": "1"}'), 422, "invalid_features", id="named-str"),
    pytest.param(
        "/predict", raw("default", '{"a": 1e16}'), 422, "value_too_large", id="named-huge"
    ),
    pytest.param("/predict", raw("default", "[]"), 422, "empty_features", id="empty-list-named"),
    pytest.param("/predict", raw("d", "[]"), 422, "wrong_dimension", id="empty-list-dense"),
    pytest.param(
        "/learn",
        raw("d", "[1, 2, 3]")[:-1] + b', "label": true}',
        422,
        "validation_error",
        id="label-bool",
    ),
    pytest.param(
        "/learn",
        raw("d", "[1, 2, 3]")[:-1] + b', "label": null}',
        422,
        "validation_error",
        id="label-null",
    ),
    pytest.param(
        "/learn",
        raw("d", "[1, 2, 1e16]")[:-1] + b', "label": "a"}',
        422,
        "value_too_large",
        id="learn-huge",
    ),
    pytest.param("/predict/batch", raw("d", "[]"), 422, "validation_error", id="empty-batch"),
    pytest.param(
        "/predict/batch",
        raw("d", "[[1, 2, 3], [1, 2]]"),
        422,
        "wrong_dimension",
        id="batch-one-bad",
    ),
    pytest.param(
        "/predict/batch",
        raw("d", '[[1, 2, 3], [1, 2, "NaN"]]'),
        422,
        "invalid_features",
        id="batch-nan",
    ),
    pytest.param(
        "/predict/batch", raw("d", '[[1, 2, 3], "abc"]'), 422, "invalid_features", id="batch-str"
    ),
    pytest.param(
        "/predict/batch", raw("d", "[[1, 2, 3], null]"), 422, "invalid_features", id="batch-null"
    ),
    pytest.param(
        "/learn/batch",
        raw("d", "[[1, 2, 3], 7]")[:-1] + b', "labels": ["a", "b"]}',
        422,
        "invalid_features",
        id="learn-batch-number",
    ),
    pytest.param(
        "/learn/batch",
        raw("d", "[[1, 2, 3], [[1], 2, 3]]")[:-1] + b', "labels": ["a", "b"]}',
        422,
        "invalid_features",
        id="learn-batch-nested",
    ),
    pytest.param(
        "/feedback", b'{"prediction_id": "", "label": "a"}', 422, "validation_error", id="empty-id"
    ),
    pytest.param(
        "/feedback",
        b'{"prediction_id": "d:x", "label": 1.5}',
        422,
        "validation_error",
        id="float-label",
    ),
    pytest.param(
        "/feedback/batch", b'{"feedback": []}', 422, "validation_error", id="empty-feedback-batch"
    ),
]


@pytest.mark.parametrize(("path", "body", "status", "code"), BAD_BODIES)
def test_bad_body_gets_clear_error_and_changes_nothing(
    dense: httpx.Client, path: str, body: bytes, status: int, code: str
) -> None:
    before = state(dense)
    r = dense.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["code"] == code, r.text
    assert isinstance(r.json()["detail"], str) and r.json()["detail"]
    assert state(dense) == before


def test_unknown_route_and_wrong_method_answer_json(client: httpx.Client) -> None:
    r = client.get("/nope")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = client.delete("/predict")
    assert r.status_code == 405 and r.json()["code"] == "method_not_allowed"
    assert "POST" in r.headers["allow"]


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"classes": [1, "1"]}, id="classes-equal-as-text"),
        pytest.param({"classes": [1, "1", 2], "n_features": 2}, id="multiclass-equal-as-text"),
        pytest.param({"n_features": 0}, id="n-features-zero"),
        pytest.param({"learning_rate": 0}, id="learning-rate-zero"),
        pytest.param({"feedback_ttl_s": 0}, id="ttl-zero"),
    ],
)
def test_bad_config_is_422(client: httpx.Client, spec: dict[str, Any]) -> None:
    r = client.put("/models/x", json=spec)
    assert r.status_code == 422 and r.json()["code"] == "invalid_config", r.text
    assert client.get("/models/x").status_code == 404


def test_a_model_too_big_to_hold_is_refused(make_service: MakeService) -> None:
    """Each worker holds a model's weights in memory: refuse what it could not allocate."""
    client = make_service(max_weights=1000, default_model=False)
    r = client.put("/models/big", json={"classes": list(range(50)), "multiclass": "ovo"})
    assert r.status_code == 422 and r.json()["code"] == "invalid_config"
    assert "PERCEPTRON_MAX_WEIGHTS" in r.json()["detail"] and "1225 x 262144" in r.json()["detail"]
    r = client.put("/models/ok", json={"classes": list(range(5)), "n_features": 200})
    assert r.status_code == 201
    r = client.put("/models/nope", json={"classes": list(range(5)), "n_features": 201})
    assert r.status_code == 422 and r.json()["code"] == "invalid_config"


def test_default_limits_refuse_a_model_no_worker_could_allocate(client: httpx.Client) -> None:
    """1000 classes one-vs-one: half a million rows of 2**18 weights. Once a 500 on /predict."""
    r = client.put("/models/huge", json={"classes": list(range(1000)), "multiclass": "ovo"})
    assert r.status_code == 422 and r.json()["code"] == "invalid_config"


def test_feedback_for_a_deleted_model_is_404(dense: httpx.Client) -> None:
    pid = dense.post("/predict", json={"model": "d", "features": [1, 1, 1]}).json()["prediction_id"]
    assert dense.delete("/models/d").status_code == 204
    r = dense.post("/feedback", json={"prediction_id": pid, "label": "a"})
    assert r.status_code == 404 and r.json()["code"] == "prediction_not_found"


def test_feedback_with_another_models_label_is_422(dense: httpx.Client) -> None:
    pid = dense.post("/predict", json={"model": "d", "features": [1, 1, 1]}).json()["prediction_id"]
    before = state(dense)
    r = dense.post("/feedback", json={"prediction_id": pid, "label": 1})
    assert r.status_code == 422 and r.json()["code"] == "unknown_label"
    assert state(dense)[0] == before[0]
