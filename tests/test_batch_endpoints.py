"""Batch endpoints do exactly what the same examples sent one at a time do."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from .conftest import MakeService

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

SPECS = [
    pytest.param({"n_features": 4}, id="binary"),
    pytest.param({"n_features": 4, "averaged": True, "margin": 1.0}, id="binary-averaged"),
    pytest.param({"classes": ["a", "b", "c"], "n_features": 4}, id="multiclass"),
    pytest.param({"classes": ["a", "b", "c"], "hash_bits": 6, "multiclass": "ovo"}, id="ovo"),
    pytest.param(
        {"classes": list(range(10)), "hash_bits": 12, "averaged": True},
        id="multiclass-averaged-named",
    ),
]


def stream(spec: dict[str, Any], n: int, seed: int = 3) -> tuple[list[Any], list[Any]]:
    rng = np.random.default_rng(seed)
    classes = spec.get("classes", [-1, 1])
    if "n_features" in spec:
        xs: list[Any] = rng.normal(size=(n, spec["n_features"])).round(3).tolist()
    else:
        xs = [{f"f{j}": round(float(rng.normal()), 3) for j in rng.choice(20, 3)} for _ in range(n)]
    ys = [classes[i] for i in rng.integers(len(classes), size=n)]
    return xs, ys


@pytest.mark.servers  # hundreds of requests: test_inprocess_api.py has a short one
@pytest.mark.parametrize("spec", SPECS)
def test_learn_batch_equals_one_at_a_time(client: httpx.Client, spec: dict[str, Any]) -> None:
    client.put("/models/one", json=spec)
    client.put("/models/many", json=spec)
    xs, ys = stream(spec, 300)
    singles = [
        client.post("/learn", json={"model": "one", "features": x, "label": y}).json()
        for x, y in zip(xs, ys, strict=True)
    ]
    batched: dict[str, Any] = {"labels": [], "mistakes": [], "updated": []}
    for start in range(0, 300, 70):  # uneven chunks
        r = client.post(
            "/learn/batch",
            json={
                "model": "many",
                "features": xs[start : start + 70],
                "labels": ys[start : start + 70],
            },
        )
        assert r.status_code == 200, r.text
        for key in batched:
            batched[key] += r.json()[key]
    assert batched["labels"] == [s["label"] for s in singles]
    assert batched["mistakes"] == [s["mistake"] for s in singles]
    assert batched["updated"] == [s["updated"] for s in singles]
    assert r.json()["version"] == singles[-1]["version"]
    one = client.get("/models/one/weights").json()
    many = client.get("/models/many/weights").json()
    assert one["rows"] == many["rows"] and one["averaged"] == many["averaged"]
    c1 = client.get("/models/one").json()["counters"]
    c2 = client.get("/models/many").json()["counters"]
    assert c1 == c2


@pytest.mark.servers  # hundreds of requests: test_inprocess_api.py has a short one
def test_predict_and_feedback_batches_equal_singles(client: httpx.Client) -> None:
    spec = {"classes": ["a", "b", "c"], "n_features": 4, "multiclass": "ovr"}
    client.put("/models/one", json=spec)
    client.put("/models/many", json=spec)
    xs, ys = stream(spec, 200)
    for start in range(0, 200, 50):
        chunk, labels = xs[start : start + 50], ys[start : start + 50]
        singles = [
            client.post("/predict", json={"model": "one", "features": x}).json() for x in chunk
        ]
        batch = client.post("/predict/batch", json={"model": "many", "features": chunk}).json()
        assert [p["label"] for p in batch["predictions"]] == [s["label"] for s in singles]
        assert [p["scores"] for p in batch["predictions"]] == [s["scores"] for s in singles]
        single_fb = [
            client.post("/feedback", json={"prediction_id": s["prediction_id"], "label": y}).json()
            for s, y in zip(singles, labels, strict=True)
        ]
        items = [
            {"prediction_id": p["prediction_id"], "label": y}
            for p, y in zip(batch["predictions"], labels, strict=True)
        ]
        batch_fb = client.post("/feedback/batch", json={"feedback": items}).json()["results"]
        assert [(f["mistake"], f["updated"], f["version"]) for f in batch_fb] == [
            (f["mistake"], f["updated"], f["version"]) for f in single_fb
        ]
    assert (
        client.get("/models/one/weights").json()["rows"]
        == client.get("/models/many/weights").json()["rows"]
    )


def test_feedback_batch_reports_each_item(client: httpx.Client) -> None:
    client.put("/models/m", json={"n_features": 2})
    preds = client.post("/predict/batch", json={"model": "m", "features": [[1, 0], [0, 1]]})
    a, b = (p["prediction_id"] for p in preds.json()["predictions"])
    client.post("/feedback", json={"prediction_id": b, "label": 1})
    items = [
        {"prediction_id": a, "label": 1},
        {"prediction_id": a, "label": 1},
        {"prediction_id": b, "label": -1},
        {"prediction_id": "m:AAAAAAAAAAAAAAAAAAAA", "label": 1},
        {"prediction_id": "gone:AAAAAAAAAAAAAAAAAAAA", "label": 1},
    ]
    results = client.post("/feedback/batch", json={"feedback": items}).json()["results"]
    assert results[0]["duplicate"] is False and results[0]["updated"] is True
    assert results[1]["duplicate"] is True and results[1]["version"] == results[0]["version"]
    assert results[2]["error"]["code"] == "feedback_conflict"
    assert results[3]["error"]["code"] == "prediction_not_found"
    assert results[4]["error"]["code"] == "prediction_not_found"
    counters = client.get("/models/m").json()["counters"]
    assert counters["feedback"] == 2 and counters["duplicates"] == 1
    assert counters["conflicts"] == 1 and counters["unknown_feedback"] == 1


@pytest.mark.parametrize(
    ("body", "code"),
    [
        pytest.param({"features": [[1, 2]], "labels": [1, -1]}, "validation_error", id="lengths"),
        pytest.param(
            {"features": [[1, 2], [1]], "labels": [1, -1]}, "wrong_dimension", id="one-bad-example"
        ),
        pytest.param(
            {"features": [[1, 2], [1, 2]], "labels": [1, 7]}, "unknown_label", id="one-bad-label"
        ),
        pytest.param({"features": [], "labels": []}, "validation_error", id="empty"),
    ],
)
def test_bad_batch_changes_nothing(client: httpx.Client, body: dict[str, Any], code: str) -> None:
    client.put("/models/m", json={"n_features": 2})
    client.post("/learn", json={"model": "m", "features": [1, 1], "label": 1})
    before = client.get("/models/m").json()
    r = client.post("/learn/batch", json={"model": "m", **body})
    assert r.status_code == 422 and r.json()["code"] == code
    assert "Example 1" in r.json()["detail"] or code in ("validation_error", "unknown_label")
    assert client.get("/models/m").json() == before


def test_batches_past_the_limit_are_413(make_service: MakeService) -> None:
    client = make_service(max_batch=3)
    client.put("/models/m", json={"n_features": 1})
    r = client.post("/learn/batch", json={"model": "m", "features": [[1]] * 4, "labels": [1] * 4})
    assert r.status_code == 413 and r.json()["code"] == "batch_too_large"
    assert "at most 3" in r.json()["detail"]
    r = client.post("/predict/batch", json={"model": "m", "features": [[1]] * 4})
    assert r.status_code == 413
    items = [{"prediction_id": "m:AAAAAAAAAAAAAAAAAAAA", "label": 1}] * 4
    assert client.post("/feedback/batch", json={"feedback": items}).status_code == 413
    assert client.get("/models/m").json()["counters"]["predictions"] == 0
