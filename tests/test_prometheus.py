"""GET /metrics: the Prometheus text format, the same from every worker."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .servers import ServiceProcess

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def two_workers(redis_url: str) -> Iterator[str]:
    server = ServiceProcess(redis_url, workers=2).start()
    yield server.url
    server.stop()


def test_model_figures_are_the_same_from_every_worker(two_workers: str) -> None:
    answers = []
    with httpx.Client(base_url=two_workers) as c:
        c.put("/models/m", json={"classes": ["x", "y"], "n_features": 2})
        for i in range(60):
            x = [i % 3 - 1, (i // 3) % 3 - 1]
            label = "y" if x[0] + x[1] > 0 else "x"
            answers.append(c.post("/learn", json={"model": "m", "features": x, "label": label}))
    mistakes = sum(a.json()["mistake"] for a in answers)
    texts = []
    for _ in range(8):  # new connections: both workers answer some of these
        with httpx.Client(base_url=two_workers) as c:
            texts.append(samples(c.get("/metrics").text))
    for s in texts:
        assert s[("perceptron_model_mistakes_total", (("model", "m"),))] == mistakes
        assert s[("perceptron_model_seen_total", (("model", "m"),))] == 60
        assert s[("perceptron_model_mistake_rate", (("model", "m"), ("window", "all")))] == (
            mistakes / 60
        )
    # Request counts are summed over both workers: the 60 learns are all there.
    learn = (
        "perceptron_http_requests_total",
        (("method", "POST"), ("route", "/learn"), ("status", "200")),
    )
    assert texts[-1][learn] == 60
    histogram = (
        "perceptron_http_request_duration_seconds_count",
        (("method", "POST"), ("route", "/learn")),
    )
    assert texts[-1][histogram] == 60


def test_confusion_matrix_and_rates_by_window(client: httpx.Client) -> None:
    client.put("/models/c", json={"classes": ["a", "b", "c"], "n_features": 1})
    for label in ["a", "b", "c", "a"]:
        client.post("/learn", json={"model": "c", "features": [1], "label": label})
    s = samples(client.get("/metrics").text)
    cm = {k: v for k, v in s.items() if k[0] == "perceptron_model_confusion_total"}
    assert sum(cm.values()) == 4
    assert (
        s[("perceptron_model_mistake_rate", (("model", "c"), ("window", "100")))]
        == s[("perceptron_model_mistakes_total", (("model", "c"),))] / 4
    )
