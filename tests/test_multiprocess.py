"""Real server processes sharing one Redis: no update is lost, every mistake is counted."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from .servers import ServiceProcess

D = 5
CLASSES: dict[str, list[int | str]] = {"binary": [-1, 1], "multiclass": ["a", "b", "c"]}


@pytest.fixture
def two_servers(redis_url: str) -> Iterator[tuple[str, str]]:
    a = ServiceProcess(redis_url, workers=2, PERCEPTRON_COMPACT_EVERY="50")
    b = ServiceProcess(redis_url, workers=2, PERCEPTRON_COMPACT_EVERY="50")
    a.start()
    try:
        b.start()
        try:
            yield a.url, b.url
        finally:
            b.stop()
    finally:
        a.stop()


@pytest.mark.parametrize("kind", ["binary", "multiclass"])
def test_concurrent_clients_on_two_servers_lose_no_update(
    two_servers: tuple[str, str], kind: str
) -> None:
    url_a, url_b = two_servers
    classes = CLASSES[kind]
    with httpx.Client(base_url=url_a) as c:
        assert c.put("/models/m", json={"classes": classes, "n_features": D}).status_code == 201

    answers: list[tuple[list[int], Any, Any, dict[str, Any]]] = []
    failures: list[str] = []
    lock = threading.Lock()

    def client_loop(seed: int) -> None:
        rng = random.Random(seed)
        with (
            httpx.Client(base_url=url_a, timeout=30) as a,
            httpx.Client(base_url=url_b, timeout=30) as b,
        ):
            for _ in range(60):
                x = [rng.randint(-3, 3) for _ in range(D)]
                label = rng.choice(classes)
                first, second = (a, b) if rng.random() < 0.5 else (b, a)
                if rng.random() < 0.3:
                    r = first.post("/learn", json={"model": "m", "features": x, "label": label})
                    served = r.json().get("label")
                else:
                    p = first.post("/predict", json={"model": "m", "features": x})
                    if p.status_code != 200:
                        failures.append(p.text)
                        continue
                    served = p.json()["label"]
                    pid = p.json()["prediction_id"]
                    r = second.post("/feedback", json={"prediction_id": pid, "label": label})
                if r.status_code != 200:
                    failures.append(r.text)
                    continue
                with lock:
                    answers.append((x, label, served, r.json()))

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(answers) == 16 * 60

    # The weights are exactly the sum of the updates the service answered.
    rows = 1 if kind == "binary" else len(classes)
    w, b = np.zeros((rows, D)), np.zeros(rows)
    for x, label, served, answer in answers:
        if not answer["updated"]:
            continue
        if kind == "binary":
            y = 1 if label == 1 else -1
            w[0] += y * np.array(x)
            b[0] += y
        else:
            # margin 0, no averaging: an update rewards the true class, punishes the served one
            t, s = classes.index(label), classes.index(served)
            w[t] += x
            w[s] -= x
            b[t] += 1
            b[s] -= 1
    with httpx.Client(base_url=url_b) as c:
        body = c.get("/models/m/weights").json()
        info = c.get("/models/m").json()
    assert [r["weights"] for r in body["rows"]] == w.tolist()
    assert [r["bias"] for r in body["rows"]] == b.tolist()
    assert info["version"] == sum(a[3]["updated"] for a in answers)
    assert info["counters"]["mistakes"] == sum(a[3]["mistake"] for a in answers)
    assert info["counters"]["seen"] == len(answers)
    # Every answered version is distinct for updates: no two updates claimed the same slot.
    versions = [a[3]["version"] for a in answers if a[3]["updated"]]
    assert sorted(versions) == list(range(1, len(versions) + 1))
