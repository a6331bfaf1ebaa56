"""The Redis-backed service against the learner core, weight for weight."""

from __future__ import annotations

from collections import deque
from typing import Any

import httpx
import numpy as np
import pytest

from service.cli.loopback import wait_until
from service.learner import ModelConfig, Weights, encode
from service.learner.perceptron import predict_index

from .conftest import MakeService

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

CONFIGS = [
    pytest.param({"n_features": 6}, id="binary-dense"),
    pytest.param({"hash_bits": 5}, id="binary-named"),
    pytest.param({"n_features": 6, "margin": 2.0, "learning_rate": 0.5}, id="binary-margin"),
    pytest.param({"n_features": 6, "fit_bias": False}, id="binary-no-bias"),
    pytest.param({"n_features": 6, "averaged": True}, id="binary-averaged"),
    pytest.param({"classes": ["a", "b", "c", "d"], "n_features": 5}, id="multiclass"),
    pytest.param(
        {"classes": ["a", "b", "c", "d"], "n_features": 5, "margin": 1.0}, id="multiclass-margin"
    ),
    pytest.param({"classes": [0, 1, 2, 3], "n_features": 5, "multiclass": "ovr"}, id="ovr"),
    pytest.param({"classes": [0, 1, 2, 3], "hash_bits": 6, "multiclass": "ovo"}, id="ovo-named"),
    pytest.param(
        {"classes": [0, 1, 2], "n_features": 4, "multiclass": "ovr", "averaged": True},
        id="ovr-averaged",
    ),
    # passive-aggressive: the step from each example's loss and norm, decided where the
    # perceptron's is (from the scores kept with a prediction), on every path
    pytest.param({"n_features": 6, "algorithm": "pa1", "C": 0.05}, id="pa1-binary-dense"),
    pytest.param({"hash_bits": 5, "algorithm": "pa2", "C": 0.3}, id="pa2-binary-named"),
    pytest.param({"n_features": 6, "algorithm": "pa2", "fit_bias": False}, id="pa2-binary-no-bias"),
    pytest.param(
        {"classes": ["a", "b", "c", "d"], "n_features": 5, "algorithm": "pa1", "C": 0.5},
        id="pa1-multiclass",
    ),
    pytest.param(
        {"classes": [0, 1, 2, 3], "n_features": 5, "multiclass": "ovr", "algorithm": "pa2"},
        id="pa2-ovr",
    ),
    pytest.param(
        {"classes": [0, 1, 2, 3], "hash_bits": 6, "multiclass": "ovo", "algorithm": "pa1"},
        id="pa1-ovo-named",
    ),
]


class Reference:
    """The core run as the protocol says: predict with current weights, learn later."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.weights = Weights.zeros(config)

    def predict(self, features: Any) -> tuple[int, np.ndarray, Any]:
        x = encode(self.config, features)
        served = predict_index(
            self.config, self.config.learner.served_scores(self.config, self.weights, x)
        )
        return served, self.config.learner.raw_scores(self.config, self.weights, x), x

    def learn(self, served: int, raw: np.ndarray, x: Any, t: int) -> tuple[bool, bool]:
        plan = self.config.learner.update_plan(self.config, raw, t, x, self.weights)
        self.weights.seen += 1
        if plan:
            self.config.learner.apply(self.config, self.weights, x, plan, self.weights.seen)
        return served != t, bool(plan)


def random_features(rng: np.random.Generator, config: ModelConfig) -> Any:
    if config.dense:
        assert config.n_features is not None
        return rng.integers(-3, 4, config.n_features).tolist()
    names = rng.choice(40, size=rng.integers(1, 6), replace=False)
    return {f"f{n}": int(rng.integers(-3, 4)) for n in names}


def weights_of(client: httpx.Client, name: str, averaged: bool = False) -> tuple[Any, Any]:
    body = client.get(f"/models/{name}/weights").json()
    rows = body["averaged"] if averaged else body["rows"]
    return [r["weights"] for r in rows], [r["bias"] for r in rows]


def expected_rows(config: ModelConfig, w: np.ndarray, b: np.ndarray) -> tuple[Any, Any]:
    if config.dense:
        return w.tolist(), b.tolist()
    return [{str(i): float(r[i]) for i in np.flatnonzero(r)} for r in w], b.tolist()


@pytest.mark.parametrize("params", CONFIGS)
def test_service_matches_core_weight_for_weight(
    make_service: MakeService, params: dict[str, Any]
) -> None:
    client = make_service(compact_every=7)  # small, so snapshots and log trims happen
    config = ModelConfig.from_dict(params)
    assert client.put("/models/m", json=params).status_code == 201
    ref = Reference(config)
    rng = np.random.default_rng(7)
    waiting: deque[tuple[str, tuple[int, np.ndarray, Any], Any]] = deque()
    mistakes = 0
    for _ in range(120):
        features = random_features(rng, config)
        label = config.classes[int(rng.integers(config.n_classes))]
        t = config.class_index(label)
        assert t is not None
        if rng.random() < 0.4:
            served, raw, x = ref.predict(features)
            r = client.post("/learn", json={"model": "m", "features": features, "label": label})
            assert r.status_code == 200, r.text
            mistake, updated = ref.learn(served, raw, x, t)
            assert r.json()["label"] == config.classes[served]
            assert (r.json()["mistake"], r.json()["updated"]) == (mistake, updated)
            mistakes += mistake
        else:
            made = ref.predict(features)
            r = client.post("/predict", json={"model": "m", "features": features})
            assert r.status_code == 200, r.text
            assert r.json()["label"] == config.classes[made[0]]
            waiting.append((r.json()["prediction_id"], made, label))
        # Labels arrive late and out of turn, as in a real stream.
        while waiting and (len(waiting) > 3 or rng.random() < 0.3):
            pid, made, label = waiting.popleft()
            t = config.class_index(label)
            assert t is not None
            f = client.post("/feedback", json={"prediction_id": pid, "label": label}).json()
            mistake, updated = ref.learn(*made, t)
            assert (f["mistake"], f["updated"], f["duplicate"]) == (mistake, updated, False)
            assert f["version"] == ref.weights.version
            mistakes += mistake
    assert weights_of(client, "m") == expected_rows(config, ref.weights.w, ref.weights.b)
    if config.averaged:
        aw, ab = ref.weights.averaged()
        got_w, got_b = weights_of(client, "m", averaged=True)
        want_w, want_b = expected_rows(config, aw, ab)
        np.testing.assert_allclose(np.array(got_w), np.array(want_w), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got_b, want_b, rtol=1e-12, atol=1e-12)
    info = client.get("/models/m").json()
    assert info["version"] == ref.weights.version
    assert info["counters"]["mistakes"] == mistakes
    assert info["counters"]["seen"] == ref.weights.seen

    # A fresh worker rebuilds the same weights from the snapshot and the log's tail.
    fresh = make_service()
    assert weights_of(fresh, "m") == expected_rows(config, ref.weights.w, ref.weights.b)


def test_log_is_folded_into_a_snapshot(make_service: MakeService, redis_client: Any) -> None:
    client = make_service(compact_every=5)
    client.put("/models/m", json={"n_features": 2})
    for i in range(40):  # one point, alternating labels: every example is an update
        client.post("/learn", json={"model": "m", "features": [1, 1], "label": 1 - 2 * (i % 2)})
    version = client.get("/models/m").json()["version"]
    assert version == 40
    # Compaction runs in the background: wait for it, then check the log holds only the tail.
    # (a request each time: in-process, the service's event loop runs only while one does)
    wait_until(
        lambda: client.get("/healthz").is_success and redis_client.llen("pcp:{m}:log") < 5,
        what="compaction",
    )
    snapv = int(redis_client.hget("pcp:{m}:meta", "snapv"))
    assert snapv + redis_client.llen("pcp:{m}:log") == version
