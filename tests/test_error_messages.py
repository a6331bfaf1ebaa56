"""Validation errors in plain words: each says what was wrong and what is accepted.

A table of requests and the words their 422 ``detail`` must hold; none may show pydantic's
internals (a union member's name such as ``list[any]``, "Input should be", "Field required")
or hide a problem behind "(and 1 more problems)".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from service.settings import Settings

from .servers import ServiceThread

pytestmark = pytest.mark.servers  # a service thread

JSON = {"content-type": "application/json"}
FEATURES_TAKE = "a list of numbers for a dense model, or an object of feature names to numbers"
INTERNALS = [
    "list[any]",
    "dict[str",
    "more problems",
    "Input should",
    "Field required",
    "after validation",
    "Value error",
    "extra_forbidden",
    "body.",
]


@pytest.fixture(scope="module")
def api() -> Iterator[httpx.Client]:
    """The service on its embedded store, with a dense model 'd' (classes a and b)."""
    server = ServiceThread(Settings(redis_url=None, auth=False)).start()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        spec = {"classes": ["a", "b"], "n_features": 3}
        assert client.put("/models/d", json=spec).status_code == 201
        yield client
    server.stop()


MESSAGES = [
    pytest.param(
        "post",
        "/predict",
        {"json": {"model": "d", "features": "1,2,3"}},
        ["'features' is a string (\"1,2,3\")", FEATURES_TAKE],
        id="features-as-a-string",
    ),
    pytest.param(
        "post",
        "/predict",
        {"content": b'{"model": "d", "features": [1, 2, 3]}'},
        ["no Content-Type", "not as JSON", "Content-Type: application/json", "model, features"],
        id="no-content-type",
    ),
    pytest.param(
        "post",
        "/predict",
        {"data": {"features": "1"}},
        ["sent as 'application/x-www-form-urlencoded'", "Content-Type: application/json"],
        id="form-body",
    ),
    pytest.param(
        "post",
        "/predict",
        {"content": b"features=1,2,3"},
        ["not as JSON", "send a JSON object"],
        id="not-json-no-content-type",
    ),
    pytest.param(
        "post",
        "/predict",
        {"json": {"model": "d", "feature": [1, 2, 3]}},
        [
            "2 problems",
            "'feature' is not a field of this request (did you mean 'features'?)",
            "the fields are model, features",
            "'features' is missing",
            FEATURES_TAKE,
        ],
        id="typo-feature",
    ),
    pytest.param(
        "post",
        "/predict",
        {"content": b"", "headers": JSON},
        ["The request has no body", "send a JSON object", "model, features"],
        id="no-body",
    ),
    pytest.param(
        "post",
        "/predict",
        {"json": [1, 2, 3]},
        ["The body is a list", "send a JSON object", "model, features"],
        id="body-a-list",
    ),
    pytest.param(
        "post",
        "/predict",
        {"json": {"model": "bad/name", "features": [1, 2, 3]}},
        ["'model' is a string (\"bad/name\")", "1-64 letters, digits, '_', '-' or '.'"],
        id="bad-model-name",
    ),
    pytest.param(
        "post",
        "/learn",
        {"json": {"model": "d", "features": [1, 2, 3], "label": 1.5}},
        ["'label' is the number 1.5", "one of the model's classes: an integer or a string"],
        id="label-a-float",
    ),
    pytest.param(
        "post",
        "/learn",
        {"json": {"model": "d", "features": [1, 2, 3]}},
        ["'label' is missing", "an integer or a string"],
        id="no-label",
    ),
    pytest.param(
        "put",
        "/models/m",
        {"json": {"n_features": 2, "drift": {"detector": "ddm", "warm_start": 30.0}}},
        ["'drift.warm_start' is the number 30.0", "examples (ddm) or mistakes (eddm)"],
        id="drift-parameter-a-float",
    ),
    pytest.param(
        "put",
        "/models/m",
        {"json": {"n_features": 2, "drift": {"detector": "eddm", "alpha": "0.9"}}},
        ["'drift.alpha' is a string (\"0.9\")", "the level under which it warns"],
        id="drift-parameter-a-string",
    ),
    pytest.param(
        "post",
        "/feedback",
        {"json": {"prediction_id": "d:x", "label": "a", "model": "d"}},
        ["'model' is not a field of this request", "the fields are prediction_id, label"],
        id="feedback-unknown-field",
    ),
    pytest.param(
        "post",
        "/feedback/batch",
        {"json": {"feedback": [{"prediction_id": "d:x", "lable": "a"}]}},
        [
            "'feedback[0].lable' is not a field of this request (did you mean 'label'?)",
            "'feedback[0].label' is missing",
        ],
        id="batch-item-typo",
    ),
    pytest.param(
        "post",
        "/learn/batch",
        {"json": {"model": "d", "labels": ["a"]}},
        ["either features or packed_features"],
        id="batch-no-examples",
    ),
    pytest.param(
        "post",
        "/learn/batch",
        {"json": {"model": "d", "features": [], "labels": []}},
        ["'features' has 0 items, fewer than 1", "a list of 1 or more examples"],
        id="batch-empty",
    ),
    pytest.param(
        "put",
        "/models/x",
        {"json": {"classes": ["a"]}},
        ["'classes' has 1 item, fewer than 2", "2 or more integers or strings"],
        id="one-class",
    ),
    pytest.param(
        "put",
        "/models/x",
        {"json": {"multiclass": "tree", "hash_bit": 3}},
        [
            "'hash_bit' is not a field of this request (did you mean 'hash_bits'?)",
            "'multiclass' is a string (\"tree\")",
            "'multiclass', 'ovr' or 'ovo': how more than two classes are learned (default "
            '"multiclass")',
        ],
        id="config-typo-and-bad-value",
    ),
    pytest.param(
        "put",
        "/models/x",
        {"json": {"n_features": "4"}},
        ["'n_features' is a string (\"4\")", "an integer; null for named features (default null)"],
        id="config-wrong-type",
    ),
]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"features": [1, 2,]}', ["not valid JSON (expecting value at character 19)"]),
        (b"{features: [1]}", ["not valid JSON (expecting property name"]),
        (b"\xff\xfe{", ["not valid JSON"]),
    ],
)
def test_a_body_that_is_not_json_says_so(api: httpx.Client, body: bytes, words: list[str]) -> None:
    r = api.post("/predict", content=body, headers=JSON)
    assert r.status_code == 400 and r.json()["code"] == "malformed_json"
    for w in [*words, "send a JSON object"]:
        assert w in r.json()["detail"], r.json()["detail"]


@pytest.mark.parametrize(("method", "path", "request_args", "words"), MESSAGES)
def test_validation_errors_say_what_was_wrong_and_what_is_accepted(
    api: httpx.Client, method: str, path: str, request_args: dict[str, Any], words: list[str]
) -> None:
    r = api.request(method.upper(), path, **request_args)
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "validation_error"
    detail = r.json()["detail"]
    for w in words:
        assert w in detail, f"{w!r} not in {detail!r}"
    for internal in INTERNALS:
        assert internal not in detail, f"{internal!r} in {detail!r}"
