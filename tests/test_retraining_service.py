"""Retraining (``"on_drift": "retrain"``) in the service: every prediction of a stream whose
concept turns equal to the reference's (``learner/retraining.py``, itself River's
``DriftRetrainingClassifier``), whichever way its labels come."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.learner.config import ModelConfig
from service.learner.drift_detectors import DDM
from service.learner.retraining import Retraining

from .test_retraining import stream

DRIFT = {"detector": "ddm", "on_drift": "retrain", "warm_start": 10, "drift_threshold": 2.5}


@pytest.mark.in_process
@pytest.mark.parametrize("settings", [{}, {"averaged": True}, {"algorithm": "arow"}], ids=str)
def test_predictions_and_their_feedback_retrain_as_the_reference(
    client: httpx.Client, settings: dict[str, Any]
) -> None:
    body = {"n_features": 2, "drift": DRIFT, **settings}
    assert client.put("/models/r", json=body).status_code == 201
    config = ModelConfig(n_features=2, **settings)
    ours = Retraining(config, DDM(warm_start=10, drift_threshold=2.5))
    xs, ys = stream("abrupt", 1200, 2, seed=11)
    retrains = 0
    for x, y in zip(xs, ys, strict=True):
        p = client.post("/predict", json={"model": "r", "features": x}).json()
        assert p["label"] == ours.predict(x)
        f = client.post("/feedback", json={"prediction_id": p["prediction_id"], "label": y})
        assert f.status_code == 200, f.text
        retrains += ours.learn(x, y).retrained
    assert retrains > 0
    events = client.get("/models/r/drift").json()["events"]
    assert sum(e["action"] == "retrained" for e in events) == retrains


@pytest.mark.in_process
@pytest.mark.parametrize("settings", [{}, {"averaged": True}, {"algorithm": "logistic"}], ids=str)
@pytest.mark.parametrize("size", [1, 37])
def test_learning_one_at_a_time_and_in_batches_retrains_as_the_reference(
    client: httpx.Client, settings: dict[str, Any], size: int
) -> None:
    body = {"n_features": 2, "drift": DRIFT, **settings}
    assert client.put("/models/r", json=body).status_code == 201
    config = ModelConfig(n_features=2, **settings)
    ours = Retraining(config, DDM(warm_start=10, drift_threshold=2.5))
    xs, ys = stream("abrupt", 1200, 2, seed=12)
    predicted, retrains = [], 0
    for i in range(0, len(xs), size):
        batch = {"model": "r", "features": xs[i : i + size], "labels": ys[i : i + size]}
        got = client.post("/learn/batch", json=batch)
        assert got.status_code == 200, got.text
        predicted += got.json()["labels"]
    expected = []
    for x, y in zip(xs, ys, strict=True):
        expected.append(ours.predict(x))
        retrains += ours.learn(x, y).retrained
    assert predicted == expected and retrains > 0
    events = client.get("/models/r/drift").json()["events"]
    assert sum(e["action"] == "retrained" for e in events) == retrains
    after = client.post("/predict/batch", json={"model": "r", "features": xs[:200]}).json()
    assert [p["label"] for p in after["predictions"]] == [ours.predict(x) for x in xs[:200]]
