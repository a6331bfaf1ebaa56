"""The learning curve: mistakes up to every few labelled examples, exact and bounded."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import redis
import redis.asyncio

from service.contract.store_protocol import RING_SIZE
from service.contract.store_values import Bucket, LearnBatch, Made
from service.learner.challenger import CURVE_POINTS
from service.store import Store
from service.store.keys import ModelKeys

from .conftest import MakeService

EPOCH = "0123456789abcdef"


def expected_points(marks: list[int], every: int) -> list[dict[str, Any]]:
    """The curve of these outcomes (1: a mistake) at this stride, as the API reports it."""
    prefix = np.cumsum(marks)
    return [
        {"examples": k, "mistakes": int(prefix[k - 1]), "rate": int(prefix[k - 1]) / k}
        for k in range(every, len(marks) + 1, every)
    ]


def stride(n: int) -> int:
    """The smallest power of two that keeps n examples within CURVE_POINTS points."""
    every = 1
    while n // every > CURVE_POINTS:
        every *= 2
    return every


def test_the_curve_is_the_running_count_of_the_answers(
    client: httpx.Client, redis_client: redis.Redis
) -> None:
    client.put("/models/m", json={"classes": ["a", "b", "c"], "n_features": 3})
    rng = np.random.default_rng(3)
    marks: list[int] = []
    for i in range(700):
        x = rng.integers(-2, 3, 3).tolist()
        y = "abc"[int(np.argmax(x))]
        if i % 2:
            r = client.post("/learn", json={"model": "m", "features": x, "label": y}).json()
        else:
            p = client.post("/predict", json={"model": "m", "features": x}).json()
            r = client.post("/feedback", json={"prediction_id": p["prediction_id"], "label": y})
            r = r.json()
            # a duplicate changes nothing, on the curve either
            client.post("/feedback", json={"prediction_id": p["prediction_id"], "label": y})
        marks.append(int(r["mistake"]))
        if i == 49:  # 50 examples: a point for each
            curve = client.get("/models/m/metrics").json()["curve"]
            assert curve == {"every": 1, "points": expected_points(marks, 1)}
    m = client.get("/models/m/metrics").json()
    assert m["curve"]["every"] == stride(700) == 8
    assert m["curve"]["points"] == expected_points(marks, 8)
    assert len(m["curve"]["points"]) == 87

    # Reset, import and delete start the curve afresh.
    export = client.get("/models/m/export").json()
    assert client.post("/models/m/reset").status_code == 200
    assert client.get("/models/m/metrics").json()["curve"] == {"every": 1, "points": []}
    assert client.post("/models/m/import", json=export).status_code == 200
    assert client.get("/models/m/metrics").json()["curve"]["points"] == []
    r = client.post("/learn", json={"model": "m", "features": [3, 0, 0], "label": "a"}).json()
    (point,) = client.get("/models/m/metrics").json()["curve"]["points"]
    assert point["examples"] == 701 and point["mistakes"] == sum(marks) + r["mistake"]
    assert redis_client.exists(ModelKeys("m").curve)
    assert client.delete("/models/m").status_code == 204
    assert not redis_client.exists(ModelKeys("m").curve)


def test_the_curve_stays_bounded_and_exact_through_any_batches(redis_url: str) -> None:
    rng = np.random.default_rng(11)
    sizes = [1, 1, 3, 60, 37, 5000, 2, 999, 1, 70_000, 13]
    outcomes = [(rng.random(n) < 0.3).astype(int).tolist() for n in sizes]

    async def run() -> list[tuple[int, list[dict[str, Any]], int]]:
        client = redis.asyncio.Redis.from_url(redis_url)
        store = Store(client)
        await store.create_model("s", '{"n_features": 1}', EPOCH)
        seen, states = 0, []
        for marks in outcomes:
            batch = LearnBatch(
                n=len(marks),
                mistakes=sum(marks),
                marks=bytes(ord("0") + m for m in marks),
                cells={"cm:0:1": sum(marks)},
                entries=[],
                recent=[],
            )
            r = await store.commit_learn(
                "s", epoch=EPOCH, made=Made(0, ""), when=Bucket(1000, 10), batch=batch
            )
            seen += len(marks)
            assert getattr(r, "seen", None) == seen
            raw = await client.hgetall(ModelKeys("s").curve)
            curve = {k.decode() if isinstance(k, bytes) else k: int(v) for k, v in raw.items()}
            every = curve.pop("every")
            points = [{"examples": int(k), "mistakes": v} for k, v in curve.items()]
            meta = await client.hget(ModelKeys("s").meta, "mistakes")
            states.append((every, sorted(points, key=lambda p: p["examples"]), int(meta or 0)))
        await client.aclose()
        return states

    states = asyncio.run(run())
    everything: list[int] = []
    for marks, (every, points, mistakes) in zip(outcomes, states, strict=True):
        everything += marks
        assert mistakes == sum(everything)
        assert every == stride(len(everything))
        want = expected_points(everything, every)
        assert points == [{"examples": p["examples"], "mistakes": p["mistakes"]} for p in want]
        assert len(points) <= CURVE_POINTS
        if len(everything) >= CURVE_POINTS:
            assert len(points) > CURVE_POINTS // 2
    assert states[-1][0] == 1024 and len(states[-1][1]) == 74


def test_the_curve_moves_with_the_counters_under_concurrent_writers(
    make_service: MakeService, redis_url: str
) -> None:
    """Concurrent feedback and learns (group commits): each point is the number of mistakes
    the outcome ring records up to that example, and the last one meets the counter."""
    client = make_service()
    client.put("/models/c", json={"n_features": 4})
    rng = np.random.default_rng(5)
    xs = rng.normal(size=(720, 4)).round(4)  # 960 labelled examples: all in the ring
    ys = np.where(xs @ [1.0, -2.0, 0.5, 1.0] > 0, 1, -1)

    def one(i: int) -> None:
        x, y = xs[i].tolist(), int(ys[i])
        if i % 3:
            p = client.post("/predict", json={"model": "c", "features": x}).json()
            client.post("/feedback", json={"prediction_id": p["prediction_id"], "label": y})
        else:
            client.post("/learn/batch", json={"model": "c", "features": [x] * 2, "labels": [y] * 2})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(len(xs))))
    m = client.get("/models/c/metrics").json()
    seen = m["counters"]["seen"]
    assert seen == len(xs) + (len(xs) + 2) // 3 <= RING_SIZE
    with redis.Redis.from_url(redis_url) as r:
        ring = r.get(ModelKeys("c").ring) or b""
    marks = [int(c == ord("1")) for c in ring[:seen]]
    assert sum(marks) == m["counters"]["mistakes"]
    every = m["curve"]["every"]
    assert every == stride(seen)
    assert m["curve"]["points"] == expected_points(marks, every)
