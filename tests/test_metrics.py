"""Per-model metrics: counters, windows, time series, confusion matrix, mistake bound."""

from __future__ import annotations

import asyncio
import math

import httpx
import numpy as np
import pytest
import redis.asyncio

from service.contract.store_values import Bucket, LearnBatch, Made
from service.learner import ModelConfig, encode
from service.learner.codec import pack_payload, pack_record
from service.store import Store
from service.store.keys import ModelKeys

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one


@pytest.mark.servers  # 1,733 requests; in the fast layer, test_inprocess_api.py checks the
# metrics through test_prometheus_figures_are_the_apis and the series through the injected clock
def test_metrics_agree_with_the_answers(client: httpx.Client) -> None:
    client.put("/models/m", json={"classes": ["a", "b", "c"], "n_features": 3})
    rng = np.random.default_rng(5)
    outcomes: list[tuple[str, str, bool]] = []
    for i in range(1300):
        x = rng.integers(-2, 3, 3).tolist()
        y = "abc"[int(np.argmax([x[0], x[1], x[2]]))]  # a learnable rule
        if i % 3:
            r = client.post("/learn", json={"model": "m", "features": x, "label": y}).json()
            outcomes.append((r["label"], y, r["mistake"]))
        else:
            p = client.post("/predict", json={"model": "m", "features": x}).json()
            f = client.post("/feedback", json={"prediction_id": p["prediction_id"], "label": y})
            outcomes.append((p["label"], y, f.json()["mistake"]))
    m = client.get("/models/m/metrics").json()
    mistakes = [o[2] for o in outcomes]
    assert m["counters"]["mistakes"] == sum(mistakes)
    assert m["counters"]["seen"] == len(outcomes)
    assert m["mistake_rate"]["cumulative"] == sum(mistakes) / len(outcomes)
    assert m["mistake_rate"]["last_100"] == sum(mistakes[-100:]) / 100
    assert m["mistake_rate"]["last_1000"] == sum(mistakes[-1000:]) / 1000
    labels = ["a", "b", "c"]
    matrix = [[0] * 3 for _ in labels]
    for served, true, _ in outcomes:
        matrix[labels.index(true)][labels.index(served)] += 1
    assert m["confusion"] == {"labels": labels, "matrix": matrix}
    points = m["series"]["points"]
    assert sum(p["examples"] for p in points) == len(outcomes)
    assert sum(p["mistakes"] for p in points) == sum(mistakes)
    assert points[-1]["examples_total"] == len(outcomes)
    assert m["max_feature_norm"] == math.sqrt(12)
    assert m["mistake_bound"]["applies"] is False  # multiclass


def test_mistake_bound_is_measured_on_recent_examples(client: httpx.Client) -> None:
    client.put("/models/b", json={"n_features": 2})
    rng = np.random.default_rng(1)
    sent = []
    for _ in range(400):
        x = rng.uniform(-1, 1, 2)
        if abs(x[0] + x[1]) < 0.2:
            continue  # keep a margin around the separator x0 + x1 = 0
        y = 1 if x[0] + x[1] > 0 else -1
        client.post("/learn", json={"model": "b", "features": x.tolist(), "label": y})
        sent.append((x, y))
    m = client.get("/models/b/metrics").json()
    w = client.get("/models/b/weights").json()["rows"][0]
    weights, bias = np.array(w["weights"]), w["bias"]
    norm = math.sqrt(weights @ weights + bias**2)
    margins = [y * (weights @ x + bias) / norm for x, y in sent[-100:]]
    bound = m["mistake_bound"]
    assert bound["applies"] and bound["estimate"] and bound["window"] == 100
    assert math.isclose(bound["gamma"], min(margins), rel_tol=1e-9)
    radius2 = max(float(x @ x) for x, _ in sent) + 1.0
    assert math.isclose(bound["R"] ** 2, radius2, rel_tol=1e-9)
    if bound["gamma"] > 0:
        assert math.isclose(bound["bound"], radius2 / bound["gamma"] ** 2, rel_tol=1e-9)
        assert bound["separable"] is True
    assert bound["mistakes"] == m["counters"]["mistakes"]


def test_time_series_keeps_a_bounded_window(redis_url: str) -> None:
    async def run() -> tuple[list[str], int]:
        client = redis.asyncio.Redis.from_url(redis_url)
        store = Store(client)
        config = ModelConfig(n_features=1)
        await store.create_model("s", '{"n_features": 1}', "0123456789abcdef")
        x = encode(config, [1.0])
        record = pack_record("0123456789abcdef", 0, [True, True], pack_payload(np.zeros(1), x))
        entry = b"0|1|" + record
        version = 0
        for bucket in range(1000, 1100):  # 100 buckets, keep 10
            r = await store.commit_learn(
                "s",
                epoch="0123456789abcdef",
                made=Made(version, ""),
                when=Bucket(bucket, 10),
                batch=LearnBatch(1, 1, b"1", {"cm:0:1": 1}, [entry], [entry]),
            )
            version += 1
            assert not hasattr(r, "entries")
        fields = []
        for f in await client.hkeys(ModelKeys("s").series):
            assert isinstance(f, bytes)  # the client does not decode answers
            fields.append(f.decode())
        await client.aclose()
        return fields, version

    fields, _ = asyncio.run(run())
    buckets = sorted({int(f.split(":")[0]) for f in fields if f != "last"})
    assert buckets == list(range(1090, 1100))
