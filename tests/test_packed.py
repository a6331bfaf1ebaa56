"""Packed batches: the same examples as JSON features, read from base64 float64 values."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import numpy as np
import pytest

from perceptron_client import Client

from .conftest import MakeService
from .inprocess import reach

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one


def packed(x: Any) -> str:
    return base64.b64encode(np.asarray(x, dtype="<f8").tobytes()).decode()


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"n_features": 5}, id="binary"),
        pytest.param({"n_features": 5, "margin": 0.5, "averaged": True}, id="binary-averaged"),
        pytest.param({"classes": ["a", "b", "c"], "n_features": 5, "multiclass": "ovr"}, id="ovr"),
    ],
)
def test_packed_batches_do_what_json_batches_do(client: httpx.Client, spec: dict[str, Any]) -> None:
    rng = np.random.default_rng(5)
    classes = spec.get("classes", [-1, 1])
    x = rng.normal(size=(240, 5))  # full float64 precision: JSON carries it exactly too
    x[:20] = rng.integers(-2, 3, size=(20, 5))  # and ties at zero
    y = [classes[i] for i in rng.integers(len(classes), size=240)]
    for name in ("json", "packed"):
        assert client.put(f"/models/{name}", json=spec).status_code == 201
    for lo in range(0, 240, 80):
        a = client.post(
            "/learn/batch",
            json={"model": "json", "features": x[lo : lo + 80].tolist(), "labels": y[lo : lo + 80]},
        )
        b = client.post(
            "/learn/batch",
            json={
                "model": "packed",
                "packed_features": packed(x[lo : lo + 80]),
                "labels": y[lo : lo + 80],
            },
        )
        assert a.status_code == b.status_code == 200, b.text
        assert a.json() == b.json()
    assert (
        client.get("/models/json/weights").json()["rows"]
        == client.get("/models/packed/weights").json()["rows"]
    )
    test = rng.normal(size=(30, 5))
    a = client.post("/predict/batch", json={"model": "json", "features": test.tolist()}).json()
    b = client.post(
        "/predict/batch", json={"model": "packed", "packed_features": packed(test)}
    ).json()

    def strip(r: dict[str, Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in p.items() if k != "prediction_id"} for p in r["predictions"]]

    assert strip(a) == strip(b) and len(strip(b)) == 30


BAD = [
    pytest.param(
        {"packed_features": "not base64!", "labels": [1]},
        422,
        "invalid_packed_features",
        id="not-base64",
    ),
    pytest.param(
        {"packed_features": "AAAAAAAA8D\u00d2", "labels": [1]},
        422,
        "invalid_packed_features",
        id="not-ascii",
    ),
    pytest.param(
        {"packed_features": packed([1.0, 2.0])[:-2], "labels": [1]},
        422,
        "invalid_packed_features",
        id="cut-short",
    ),
    pytest.param(
        {"packed_features": base64.b64encode(b"12345").decode(), "labels": [1]},
        422,
        "invalid_packed_features",
        id="not-whole-floats",
    ),
    pytest.param(
        {"packed_features": packed([1.0, 2.0, 3.0]), "labels": [1]},
        422,
        "wrong_dimension",
        id="not-whole-examples",
    ),
    pytest.param(
        {"packed_features": packed([1.0, 2.0, 3.0, 4.0]), "labels": [1]},
        422,
        "length_mismatch",
        id="two-examples-one-label",
    ),
    pytest.param(
        {"packed_features": packed([1.0, np.nan]), "labels": [1]},
        422,
        "non_finite_feature",
        id="nan",
    ),
    pytest.param(
        {"packed_features": packed([1.0, np.inf]), "labels": [1]},
        422,
        "non_finite_feature",
        id="inf",
    ),
    pytest.param(
        {"packed_features": packed([1.0, 1e16]), "labels": [1]}, 422, "value_too_large", id="huge"
    ),
    pytest.param(
        {"packed_features": packed([1.0, 2.0]), "features": [[1, 2]], "labels": [1]},
        422,
        "validation_error",
        id="both-forms",
    ),
    pytest.param({"labels": [1]}, 422, "validation_error", id="neither-form"),
    pytest.param({"packed_features": "", "labels": [1]}, 422, "validation_error", id="empty"),
    pytest.param(
        {"packed_features": packed([1.0, 2.0]), "labels": [7]}, 422, "unknown_label", id="bad-label"
    ),
]


@pytest.mark.parametrize(("body", "status", "code"), BAD)
def test_bad_packed_batch_is_refused_and_changes_nothing(
    client: httpx.Client, body: dict[str, Any], status: int, code: str
) -> None:
    client.put("/models/m", json={"n_features": 2})
    client.put("/models/named", json={"hash_bits": 4})
    client.post("/learn", json={"model": "m", "features": [1, 1], "label": 1})
    before = client.get("/models/m").json()
    r = client.post("/learn/batch", json={"model": "m", **body})
    assert r.status_code == status and r.json()["code"] == code, r.text
    assert client.get("/models/m").json() == before
    if code in (
        "invalid_packed_features",
        "wrong_dimension",
        "non_finite_feature",
        "value_too_large",
    ):
        r = client.post(
            "/predict/batch",
            json={"model": "m", "packed_features": body.get("packed_features", "")},
        )
        assert r.status_code == 422
    assert (
        client.get("/models/m").json()["counters"]["predictions"]
        == before["counters"]["predictions"]
    )
    # Named features have no fixed layout: packed values are refused for them.
    r = client.post("/predict/batch", json={"model": "named", "packed_features": packed([1.0])})
    assert r.status_code == 422 and r.json()["code"] == "wrong_dimension"


def test_packed_batches_past_the_limit_are_413(make_service: MakeService) -> None:
    client = make_service(max_batch=3)
    client.put("/models/m", json={"n_features": 1})
    r = client.post(
        "/learn/batch", json={"model": "m", "packed_features": packed([1.0] * 4), "labels": [1] * 4}
    )
    assert r.status_code == 413 and r.json()["code"] == "batch_too_large"
    r = client.post("/predict/batch", json={"model": "m", "packed_features": packed([1.0] * 4)})
    assert r.status_code == 413 and r.json()["code"] == "batch_too_large"
    assert client.get("/models/m").json()["counters"]["predictions"] == 0


def test_the_client_sends_numpy_arrays_packed(make_service: MakeService) -> None:
    http = make_service()
    sent: list[dict[str, Any]] = []
    with Client(str(http.base_url), **reach(http)) as c:
        c._http.event_hooks["request"].append(lambda r: sent.append(json.loads(r.content)))
        c.create_model("m", n_features=3)
        x = np.array([[1, 2, 3], [-1, 0, 2]], dtype=np.int32)
        learned = c.learn_batch("m", x, [1, -1])
        assert "packed_features" in sent[-1] and "features" not in sent[-1]
        assert learned.labels == [-1, 1] and learned.version == 2
        preds = c.predict_batch("m", x.astype(np.float32))
        assert "packed_features" in sent[-1] and len(preds.predictions) == 2
        c.learn_batch("m", x.tolist(), [1, -1])  # lists stay JSON
        assert "features" in sent[-1]


@pytest.mark.parametrize("d", [1, 3, 100, 784])
def test_a_packed_batchs_squared_norms_are_each_examples_own_bit_for_bit(d: int) -> None:
    """A packed batch's squared norms are computed for the whole batch at once; each equals,
    bit for bit, what the example alone computes (a JSON request's), so the model's R^2 does
    not depend on how its examples were sent."""
    from service.learner import ModelConfig
    from service.learner.features import Example, encode_matrix

    rng = np.random.default_rng(d)
    values = rng.normal(scale=100, size=300 * d).round(rng.integers(0, 8))
    batch = encode_matrix(ModelConfig(n_features=d), values)
    alone = [Example(row.copy()).sq_norm for row in values.reshape(-1, d)]
    assert [x.sq for x in batch] == alone
