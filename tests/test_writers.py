"""One model, many writers: real worker processes learn one model, none fails, none is lost.

With PERCEPTRON_ONE_WRITER=true every /learn is learned by the model's writer
(service/writer.py); the other workers hand their examples to it. With integer features and a
binary model (learning rate 1, margin 0), the weights must be exactly the sum of ``y * x`` over
the examples the answers said updated.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from .servers import ServiceProcess, running, wait_until

D = 4


def test_eight_workers_and_eight_writers_on_one_model_all_succeed_exactly(
    redis_url: str,
) -> None:
    # No contention to retry against: one spare attempt for the writer's first commit after
    # it took the lease over (its copy may be behind the previous writer's last commit).
    service = ServiceProcess(
        redis_url,
        workers=8,
        PERCEPTRON_ONE_WRITER="true",
        PERCEPTRON_COMPACT_EVERY="200",
        PERCEPTRON_LEARN_ATTEMPTS="2",
    )
    with running(service), httpx.Client(base_url=service.url, timeout=60) as c:
        assert c.put("/models/m", json={"n_features": D}).status_code == 201
        answers: list[tuple[list[list[int]], list[int], dict[str, Any]]] = []
        failures: list[str] = []
        lock = threading.Lock()

        def writer(seed: int) -> None:
            rng = random.Random(seed)
            with httpx.Client(base_url=service.url, timeout=60) as w:
                for i in range(24):
                    n = 1 if i % 2 else rng.randint(2, 40)
                    xs = [[rng.randint(-3, 3) for _ in range(D)] for _ in range(n)]
                    ys = [rng.choice([-1, 1]) for _ in range(n)]
                    if n == 1:
                        r = w.post("/learn", json={"model": "m", "features": xs[0], "label": ys[0]})
                    else:
                        r = w.post(
                            "/learn/batch", json={"model": "m", "features": xs, "labels": ys}
                        )
                    with lock:
                        if r.status_code != 200:
                            failures.append(f"{r.status_code} {r.text}")
                        else:
                            answers.append((xs, ys, r.json()))

        threads = [threading.Thread(target=writer, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == []
        assert len(answers) == 8 * 24

        w, b, updates, examples, versions = np.zeros(D), 0.0, 0, 0, []
        for xs, ys, a in answers:
            updated = a["updated"] if isinstance(a["updated"], list) else [a["updated"]]
            examples += len(xs)
            versions.append(a["version"])
            for x, y, u in zip(xs, ys, updated, strict=True):
                if u:
                    w += y * np.array(x, dtype=float)
                    b += y
                    updates += 1
        info = c.get("/models/m").json()
        assert info["version"] == updates == max(versions)
        assert info["counters"]["learned"] == examples
        weights = c.get("/models/m/weights").json()
        assert weights["rows"][0]["weights"] == w.tolist()
        assert weights["rows"][0]["bias"] == b
        # Requests were handed over: the model had one writer, and its queue is empty.
        with redis.Redis.from_url(redis_url) as r:
            assert r.llen("pcp:{m}:learns") == 0


def test_a_learn_on_an_idle_model_needs_no_writer_to_be_running(redis_url: str) -> None:
    """Each worker can become the writer; the lease is given up when the model goes idle."""
    service = ServiceProcess(redis_url, workers=2, PERCEPTRON_ONE_WRITER="true")
    with running(service), httpx.Client(base_url=service.url, timeout=30) as c:
        c.put("/models/m", json={"n_features": 2})
        for _ in range(2):
            r = c.post("/learn", json={"model": "m", "features": [1, 0], "label": 1})
            assert r.status_code == 200
        with redis.Redis.from_url(redis_url) as r:
            wait_until(lambda: not r.exists("pcp:{m}:writer"), what="the lease to be given up")


@pytest.mark.parametrize("kind", ["dense", "named", "multiclass-averaged"])
def test_learns_handed_to_the_writer_answer_as_learned_there(redis_url: str, kind: str) -> None:
    """A hand-off carries every kind of example and answers labels, mistakes and versions
    exactly as a sequential perceptron would: compare with one worker learning alone."""
    spec: dict[str, Any] = {
        "dense": {"n_features": 3},
        "named": {"hash_bits": 10},
        "multiclass-averaged": {"classes": ["a", "b", "c"], "n_features": 3, "averaged": True},
    }[kind]
    classes = spec.get("classes", [-1, 1])
    rng = random.Random(3)
    batches = []
    for _ in range(12):
        n = rng.randint(1, 15)
        if kind == "named":
            xs: list[Any] = [{f"f{rng.randint(0, 30)}": rng.randint(-2, 2) or 1} for _ in range(n)]
        else:
            xs = [[rng.randint(-3, 3) for _ in range(3)] for _ in range(n)]
        batches.append((xs, [rng.choice(classes) for _ in range(n)]))

    def run(workers: int) -> list[Any]:
        with redis.Redis.from_url(redis_url) as r:
            r.flushall()
        service = ServiceProcess(redis_url, workers=workers, PERCEPTRON_ONE_WRITER="true")
        out = []
        with running(service), httpx.Client(base_url=service.url, timeout=30) as c:
            c.put("/models/m", json=spec)
            if workers > 1:  # a lease held by another process: every request is handed off
                with redis.Redis.from_url(redis_url) as r:
                    r.set("pcp:{m}:writer", "elsewhere", px=1000)  # lapses: a worker takes over
            for xs, ys in batches:
                resp = c.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys})
                assert resp.status_code == 200, resp.text
                out.append(resp.json())
            out.append(c.get("/models/m/weights").json())
        return out

    assert run(2) == run(1)


def test_by_default_each_worker_commits_its_own(redis_url: str) -> None:
    service = ServiceProcess(redis_url, workers=2)
    with running(service), httpx.Client(base_url=service.url, timeout=30) as c:
        c.put("/models/m", json={"n_features": 2})
        with redis.Redis.from_url(redis_url) as r:
            for _ in range(20):
                resp = c.post("/learn", json={"model": "m", "features": [1, 0], "label": -1})
                assert resp.status_code == 200
                assert not r.exists("pcp:{m}:writer")
        assert c.get("/models/m").json()["counters"]["learned"] == 20
