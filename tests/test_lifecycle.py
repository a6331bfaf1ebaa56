"""Export a model, import it into another service, reset it; bad files change nothing."""

from __future__ import annotations

import base64
import copy
from typing import Any

import httpx
import pytest

from service.contract.export_format import MAX_SOURCE_COUNTERS

from .conftest import MakeService
from .servers import RedisServer, ServiceThread

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

SPEC = {"classes": ["a", "b", "c"], "n_features": 3, "averaged": True}


def train(client: httpx.Client, name: str = "m") -> None:
    client.put(f"/models/{name}", json=SPEC)
    xs = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]] * 10
    ys = ["a", "b", "c", "a"] * 10
    client.post("/learn/batch", json={"model": name, "features": xs, "labels": ys})


@pytest.mark.servers  # a second redis-server
def test_export_then_import_into_another_service(client: httpx.Client) -> None:
    train(client)
    doc = client.get("/models/m/export").json()
    assert doc["format"] == "perceptron-model" and doc["format_version"] == 1
    other_redis = RedisServer().start()
    try:
        from service.settings import Settings

        other = ServiceThread(Settings(redis_url=other_redis.url, auth=False)).start()
        try:
            with httpx.Client(base_url=other.url) as c:
                r = c.post("/models/copy/import", json=doc)
                assert r.status_code == 200, r.text
                assert (
                    c.get("/models/copy/weights").json()["rows"]
                    == client.get("/models/m/weights").json()["rows"]
                )
                assert (
                    c.get("/models/copy/weights").json()["averaged"]
                    == client.get("/models/m/weights").json()["averaged"]
                )
                got, want = c.get("/models/copy").json(), client.get("/models/m").json()
                assert got["version"] == want["version"]
                assert got["counters"] == want["counters"]
                x = {"model": "copy", "features": [1, 1, 0]}
                assert (
                    c.post("/predict", json=x).json()["scores"]
                    == client.post("/predict", json={**x, "model": "m"}).json()["scores"]
                )
        finally:
            other.stop()
    finally:
        other_redis.stop()


def corrupt(doc: dict[str, Any], how: str) -> Any:
    bad = copy.deepcopy(doc)
    if how == "checksum":
        flipped = bytearray(base64.b64decode(bad["weights"]))
        flipped[0] ^= 1
        bad["weights"] = base64.b64encode(bytes(flipped)).decode()
    elif how == "truncated":
        raw = base64.b64decode(bad["weights"])[:-8]
        bad["weights"] = base64.b64encode(raw).decode()
        import hashlib

        bad["sha256"] = hashlib.sha256(raw).hexdigest()
    elif how == "format":
        bad["format"] = "something-else"
    elif how == "version":
        bad["format_version"] = 99
    elif how == "version-true":  # (Python's True == 1)
        bad["format_version"] = True
    elif how == "r2-underscored":  # (Python's float() reads "5_0" as 50)
        bad["counters"]["r2"] = "5_0"
    elif how == "r2-spaced":
        bad["counters"]["r2"] = " 5 "
    elif how == "config":
        bad["config"]["margin"] = -1
    elif how == "missing":
        del bad["weights"]
    elif how == "counter":
        bad["counters"]["evil"] = "1"
    elif how == "not-base64":
        bad["weights"] = "###"
    elif how == "source-name":
        bad["counters"]["src:a b:n"] = "1"  # no key's name has a space
    elif how == "source-kind":
        bad["counters"]["src:alice:x"] = "1"
    elif how == "mistakes-count":  # (per key, the stream's counts may pass it: a promotion)
        bad["counters"]["mistakes"] = str(bad["seen"] + 1)
    elif how == "sources":
        bad["counters"] |= {f"src:k{i}:n": "0" for i in range(MAX_SOURCE_COUNTERS + 1)}
    return bad


@pytest.mark.parametrize(
    "how",
    [
        *("checksum", "truncated", "format", "version", "config", "missing", "counter"),
        *("not-base64", "source-name", "source-kind", "mistakes-count", "sources"),
        *("version-true", "r2-underscored", "r2-spaced"),
    ],
)
def test_corrupt_import_is_refused_and_changes_nothing(client: httpx.Client, how: str) -> None:
    train(client)
    doc = client.get("/models/m/export").json()
    before = (client.get("/models/m").json(), client.get("/models/m/weights").json())
    r = client.post("/models/m/import", json=corrupt(doc, how))
    assert r.status_code == 422 and r.json()["code"] == "invalid_import", r.text
    assert (client.get("/models/m").json(), client.get("/models/m/weights").json()) == before


def test_an_import_carries_per_key_counts_up_to_their_limit(client: httpx.Client) -> None:
    """At the limit of per-key counters an import is taken whole; one past it, refused
    (``corrupt(doc, "sources")``)."""
    train(client)
    doc = client.get("/models/m/export").json()
    keys = MAX_SOURCE_COUNTERS // 3
    doc["counters"] = {k: v for k, v in doc["counters"].items() if not k.startswith("src:")}
    doc["counters"] |= {f"src:k{i}:{kind}": "1" for i in range(keys) for kind in "nmu"}
    r = client.post("/models/m/import", json=doc)
    assert r.status_code == 200, r.text
    sources = client.get("/models/m/metrics").json()["sources"]
    assert len(sources) == keys and sources[0] == {
        "source": "k0",
        "labelled": 1,
        "mistakes": 1,
        "updates": 1,
    }


def test_import_with_another_config_is_409(client: httpx.Client) -> None:
    train(client)
    doc = client.get("/models/m/export").json()
    client.put("/models/n", json={"n_features": 3})
    before = client.get("/models/n/weights").json()
    r = client.post("/models/n/import", json=doc)
    assert r.status_code == 409 and r.json()["code"] == "model_exists"
    assert client.get("/models/n/weights").json() == before


def test_import_over_the_same_model_restores_it(client: httpx.Client) -> None:
    train(client)
    doc = client.get("/models/m/export").json()
    weights = client.get("/models/m/weights").json()
    client.post("/learn", json={"model": "m", "features": [5, -5, 5], "label": "b"})
    assert client.post("/models/m/import", json=doc).status_code == 200
    assert client.get("/models/m/weights").json() == weights


def test_reset_zeroes_weights_and_counters_and_lapses_predictions(client: httpx.Client) -> None:
    train(client)
    pid = client.post("/predict", json={"model": "m", "features": [1, 0, 0]}).json()
    r = client.post("/models/m/reset")
    assert r.status_code == 200
    info = r.json()
    assert info["version"] == 0 and info["counters"]["seen"] == 0
    assert info["counters"]["mistakes"] == 0 and info["counters"]["predictions"] == 0
    w = client.get("/models/m/weights").json()
    assert all(v == 0 for row in w["rows"] for v in row["weights"])
    fb = client.post("/feedback", json={"prediction_id": pid["prediction_id"], "label": "a"})
    assert fb.status_code == 404
    m = client.get("/models/m/metrics").json()
    assert m["series"]["points"] == [] and m["mistake_rate"]["last_100"] is None


def test_lifecycle_needs_admin(make_service: MakeService) -> None:
    admin, train_key = "admin-key-0123456789", "train-key-0123456789"
    client = make_service(auth=True, api_keys=f"admin:{admin},train:{train_key}")
    h = {"Authorization": f"Bearer {train_key}"}
    client.put("/models/m", json=SPEC, headers={"Authorization": f"Bearer {admin}"})
    assert client.get("/models/m/export", headers=h).status_code == 403
    assert client.post("/models/m/reset", headers=h).status_code == 403
    assert client.post("/models/m/import", json={}, headers=h).status_code == 403


def test_an_import_knows_no_outcome_of_the_examples_it_counts(client: httpx.Client) -> None:
    """The file carries the counters, not the last outcomes: the recent mistake rates of an
    imported model count only what it learned since (none: null); they counted the examples
    before it as right."""
    client.put("/models/r", json={"n_features": 1, "fit_bias": False})
    ys = [1 if i % 2 == 0 else -1 for i in range(100)]  # each a mistake: w turns each time
    client.post("/learn/batch", json={"model": "r", "features": [[1.0]] * 100, "labels": ys})
    assert client.get("/models/r/metrics").json()["mistake_rate"]["last_100"] == 1.0
    assert client.post("/models/r2/import", json=client.get("/models/r/export").json()).is_success
    rates = client.get("/models/r2/metrics").json()["mistake_rate"]
    assert (rates["cumulative"], rates["last_100"], rates["last_1000"]) == (1.0, None, None)
    assert rates["last_100_examples"] == rates["last_1000_examples"] == 0
    assert 'model="r2",window="100"' not in client.get("/metrics").text
    wrong = [client.post("/learn", json={"model": "r2", "features": [1.0], "label": y}).json()
             for y in (1, -1, -1, -1)]  # fmt: skip
    mistakes = sum(w["label"] != y for w, y in zip(wrong, (1, -1, -1, -1), strict=True))
    rates = client.get("/models/r2/metrics").json()["mistake_rate"]
    assert rates["last_100"] == rates["last_1000"] == mistakes / 4
    assert rates["last_100_examples"] == rates["last_1000_examples"] == 4
    # a checkpoint made now (the import over it) counts those 4 alone in its window
    assert client.post("/models/r2/import", json=client.get("/models/r/export").json()).is_success
    made = client.get("/models/r2/checkpoints").json()["checkpoints"][-1]
    assert (made["mistake_rate"], made["window"]) == (mistakes / 4, 4)


def test_an_averaged_rollback_keeps_the_learners_count_apart_from_what_was_counted(
    client: httpx.Client,
) -> None:
    """An averaged learner's rollback restores its own count of examples, which its mean
    divides by (its export's ``seen``); the counters, the mistake rates and the learning curve
    stay what was counted (they clamped the mistakes to the restored count: 100 % wrong)."""
    client.put("/models/a", json={"n_features": 1, "fit_bias": False, "averaged": True})
    ys = [1 if i % 2 == 0 else -1 for i in range(100)]
    client.post("/learn/batch", json={"model": "a", "features": [[1.0]] * 100, "labels": ys})
    counted = client.get("/models/a/metrics").json()
    assert 0 < counted["counters"]["mistakes"] < 100
    undo = client.post("/models/a/rollback", json={"version": 1}).json()["undo_checkpoint"]
    assert client.get("/models/a/export").json()["seen"] == 1  # (its one update's example)
    for _ in range(2):
        metrics = client.get("/models/a/metrics").json()
        for figure in ("mistake_rate", "curve", "confusion"):
            assert metrics[figure] == counted[figure], figure
        assert {**metrics["counters"], "updates": 0} == {**counted["counters"], "updates": 0}
        assert client.post("/models/a/rollback", json={"checkpoint": undo}).is_success
        # (an export carries both: its import is the same model)
        doc = client.get("/models/a/export").json()
        assert client.post("/models/b/import", json=doc).is_success
        assert client.get("/models/b/export").json()["seen"] == doc["seen"]
        copied = client.get("/models/b").json()["counters"]
        assert {**copied, "updates": 0} == {**counted["counters"], "updates": 0}
    assert client.get("/models/a/export").json()["seen"] == 100
