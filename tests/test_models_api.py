"""The /models resource: create, read, list, delete, weights."""

from __future__ import annotations

import httpx
import pytest

from service.learner.features import bucket

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one


def test_create_is_201_then_200_for_the_same_config(client: httpx.Client) -> None:
    spec = {"classes": ["x", "y", "z"], "n_features": 3, "multiclass": "ovo"}
    first = client.put("/models/m.1", json=spec)
    assert first.status_code == 201
    assert first.json()["config"]["multiclass"] == "ovo"
    again = client.put("/models/m.1", json=spec)
    assert again.status_code == 200
    assert again.json()["config"] == first.json()["config"]


def test_create_with_another_config_is_409(client: httpx.Client) -> None:
    assert client.put("/models/m", json={"n_features": 3}).status_code == 201
    r = client.put("/models/m", json={"n_features": 4})
    assert r.status_code == 409
    assert r.json()["code"] == "model_exists"
    assert client.get("/models/m").json()["config"]["n_features"] == 3


def test_create_without_body_uses_defaults(client: httpx.Client) -> None:
    r = client.put("/models/plain")
    assert r.status_code == 201
    config = r.json()["config"]
    assert config["classes"] == [-1, 1] and config["n_features"] is None
    assert config["hash_bits"] == 18 and config["feedback_ttl_s"] == 86400


def test_list_read_and_delete(client: httpx.Client) -> None:
    client.put("/models/a", json={"n_features": 2})
    names = [m["name"] for m in client.get("/models").json()["models"]]
    assert names == ["a", "default"]
    info = client.get("/models/a").json()
    assert info["version"] == 0 and info["counters"]["predictions"] == 0
    assert client.delete("/models/a").status_code == 204
    assert client.get("/models/a").status_code == 404
    assert client.delete("/models/a").status_code == 404
    assert [m["name"] for m in client.get("/models").json()["models"]] == ["default"]


def test_recreated_model_starts_from_zero_and_old_predictions_are_unknown(
    client: httpx.Client,
) -> None:
    client.put("/models/m", json={"n_features": 2})
    client.post("/learn", json={"model": "m", "features": [1, 2], "label": 1})
    pid = client.post("/predict", json={"model": "m", "features": [1, 2]}).json()["prediction_id"]
    client.delete("/models/m")
    client.put("/models/m", json={"n_features": 2, "classes": [0, 1]})
    r = client.post("/feedback", json={"prediction_id": pid, "label": 1})
    assert r.status_code == 404 and r.json()["code"] == "prediction_not_found"
    w = client.get("/models/m/weights").json()
    assert w["version"] == 0 and w["rows"][0]["weights"] == [0.0, 0.0]
    p = client.post("/predict", json={"model": "m", "features": [1, 2]}).json()
    assert p["label"] == 0 and p["version"] == 0


def test_weights_of_named_features_are_listed_by_bucket(client: httpx.Client) -> None:
    client.put("/models/n", json={"hash_bits": 10})
    client.post("/learn", json={"model": "n", "features": {"a": 2.0, "b": -1.0}, "label": 1})
    body = client.get("/models/n/weights").json()
    by_bucket = {str(bucket("a", 10)): 2.0, str(bucket("b", 10)): -1.0}
    assert body["rows"] == [{"target": "1", "weights": by_bucket, "bias": 1.0}]
    assert body["averaged"] is None


def test_scores_are_per_class_for_multiclass_and_votes_for_ovo(client: httpx.Client) -> None:
    client.put("/models/mc", json={"classes": ["a", "b", "c"], "n_features": 2})
    client.put(
        "/models/oo", json={"classes": ["a", "b", "c"], "n_features": 2, "multiclass": "ovo"}
    )
    client.post("/learn", json={"model": "mc", "features": [1, 0], "label": "b"})
    mc = client.post("/predict", json={"model": "mc", "features": [1, 0]}).json()
    assert mc["label"] == "b" and mc["score"] is None
    assert mc["scores"] == {"a": -2.0, "b": 2.0, "c": 0.0}
    oo = client.post("/predict", json={"model": "oo", "features": [1, 0]}).json()
    assert oo["scores"] == {"a": 2.0, "b": 1.0, "c": 0.0}  # all pairs at 0: the first class wins
    assert oo["label"] == "a"


def test_health_and_readiness(client: httpx.Client) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.get("/readyz").json() == {"status": "ok", "store": "up"}
