"""Retraining (``"on_drift": "retrain"``) in the service: every prediction of a stream whose
concept turns equal to the reference's (``learner/retraining.py``, itself River's
``DriftRetrainingClassifier``), whichever way its labels come."""

from __future__ import annotations

import base64
import math
import os
import random
import signal
import struct
import threading
import time
from typing import Any

import httpx
import numpy as np
import pytest
from river import drift

from service.contract.store_protocol import BACKGROUND_BYTES
from service.learner.config import ModelConfig
from service.learner.drift_detectors import DDM
from service.learner.retraining import Retraining

from .conftest import MakeService
from .servers import RedisServer, ServiceProcess, running, worker_pids
from .test_drift_detectors import river_of
from .test_history import HISTORY
from .test_retraining import RiverLearner, stream

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
    assert client.get("/models/r").json()["counters"]["retrains"] == retrains
    assert (
        f'perceptron_model_retrains_total{{model="r"}} {retrains}.0' in client.get("/metrics").text
    )


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


def learn_all(client: httpx.Client, model: str, xs: Any, ys: Any, size: int = 50) -> list[Any]:
    predicted = []
    for i in range(0, len(xs), size):
        body = {"model": model, "features": xs[i : i + size], "labels": ys[i : i + size]}
        got = client.post("/learn/batch", json=body)
        assert got.status_code == 200, got.text
        predicted += got.json()["labels"]
    return predicted


@pytest.mark.in_process
def test_an_export_carries_the_background_learner_and_its_import_retrains_alike(
    client: httpx.Client,
) -> None:
    body = {"n_features": 2, "drift": DRIFT, "averaged": True}
    assert client.put("/models/r", json=body).status_code == 201
    ours = Retraining(ModelConfig(n_features=2, averaged=True), DDM(10, 2.0, 2.5))
    xs, ys = stream("abrupt", 1200, 2, seed=12)
    learn_all(client, "r", xs[:300], ys[:300])
    for x, y in zip(xs[:300], ys[:300], strict=True):
        ours.learn(x, y)
    assert ours.background.weights.seen > 0  # (it learned in a warning, and serves not yet)
    doc = client.get("/models/r/export").json()
    assert len(doc["drift"]["background"]) == ours.background.weights.seen
    assert client.post("/models/copy/import", json=doc).status_code == 200
    expected = []
    for x, y in zip(xs[300:], ys[300:], strict=True):
        expected.append(ours.predict(x))
        ours.learn(x, y)
    assert learn_all(client, "copy", xs[300:], ys[300:]) == expected
    assert learn_all(client, "r", xs[300:], ys[300:]) == expected
    assert (
        client.get("/models/copy/export").json()["weights"]
        == (client.get("/models/r/export").json()["weights"])
    )
    assert client.post("/models/r/reset").status_code == 200
    assert client.get("/models/r/export").json()["drift"]["background"] == []


@pytest.mark.in_process
@pytest.mark.parametrize(
    "change",
    ["not base64!", "AAAA", 7, "nan", "class", "short"],
)
def test_an_import_whose_background_example_could_not_be_is_refused_whole(
    client: httpx.Client, change: Any
) -> None:
    body = {"n_features": 2, "drift": DRIFT, "averaged": True}
    assert client.put("/models/r", json=body).status_code == 201
    xs, ys = stream("abrupt", 300, 2, seed=12)
    learn_all(client, "r", xs, ys)
    doc = client.get("/models/r/export").json()
    good = base64.b64decode(doc["drift"]["background"][0])
    payload = good[-16:]  # (the example's two values, float64)
    if change == "nan":
        bad = base64.b64encode(good[:-16] + struct.pack("<dd", math.nan, 1.0)).decode()
    elif change == "class":
        bad = base64.b64encode(b"7" + good[1:]).decode()
    elif change == "short":
        bad = base64.b64encode(good[:-8]).decode()
    else:
        bad = change
    assert payload  # (the file is one the service wrote: its examples carry their values)
    doc["drift"]["background"][0] = bad
    got = client.post("/models/copy/import", json=doc)
    assert got.status_code == 422 and got.json()["code"] == "invalid_import", got.text
    assert "background" in got.json()["detail"]
    assert client.get("/models/copy").status_code == 404
    no_retrain = {**doc, "config": {**doc["config"], "drift": {**DRIFT, "on_drift": "alert"}}}
    no_retrain["drift"]["background"][0] = base64.b64encode(good).decode()
    got = client.post("/models/copy/import", json=no_retrain)
    assert got.status_code == 422 and "does not retrain" in got.json()["detail"]


def rivers_stream() -> tuple[Any, Any, list[Any]]:
    """A stream whose concept turns, and every prediction River's DriftRetrainingClassifier
    (DDM) makes of it around an averaged perceptron of the service's rule."""
    config = ModelConfig(n_features=2, averaged=True)
    river = drift.DriftRetrainingClassifier(RiverLearner(config), river_of(DDM(10, 2.0, 2.5)))
    xs, ys = stream("abrupt", 900, 2, seed=21)
    expected = []
    for x, y in zip(xs, ys, strict=True):
        one: dict[Any, Any] = dict(enumerate(x))
        expected.append(river.predict_one(one))
        river.learn_one(one, y)
    return xs, ys, expected


@pytest.mark.parametrize("how", ["one a request", "batches", "feedback"])
def test_two_workers_predict_as_rivers_drift_retraining_classifier(
    redis_url: str, how: str
) -> None:
    """River's own wrapper around the service's rule, fed the stream; the service on two
    workers, its requests spread over both (a new connection each few)."""
    xs, ys, expected = rivers_stream()
    body = {"n_features": 2, "drift": DRIFT, "averaged": True}
    got: list[Any] = []
    with running(ServiceProcess(redis_url, workers=2)) as service:
        with httpx.Client(base_url=service.url, timeout=30) as c:
            assert c.put("/models/r", json=body).status_code == 201
        size = 45 if how == "batches" else 9
        for i in range(0, len(xs), size):
            with httpx.Client(base_url=service.url, timeout=30) as c:  # (either worker)
                got += _learned(c, how, xs[i : i + size], ys[i : i + size])
        with httpx.Client(base_url=service.url, timeout=30) as c:
            events = c.get("/models/r/drift").json()["events"]
    assert got == expected
    assert any(e["action"] == "retrained" for e in events)


def test_learns_and_feedback_at_once_on_a_model_retraining_all_the_time_all_succeed(
    redis_url: str,
) -> None:
    """Two threads learning batches and three predicting then labelling, on two workers, a
    detector that drifts every few examples: every request answers 200 and every label is
    counted once. (A worker's count of the served learner's examples, once ahead of the
    store's, stayed so; every commit was then refused: 503 model_busy, about one learn in
    three, and model_state_lost now and then.)"""
    spec = {"detector": "ddm", "on_drift": "retrain", "warm_start": 3,
            "warning_threshold": 0.8, "drift_threshold": 1.0}  # fmt: skip
    xs, ys = stream("abrupt", 4000, 2, seed=4)
    failed: list[str] = []
    sent = {"learned": 0, "feedback": 0}
    until = math.inf  # (set once the service is up)

    def learner(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=service.url, timeout=30) as c:
            while time.monotonic() < until:
                i, k = rng.randrange(3900), rng.randint(1, 50)
                body = {"model": "r", "features": xs[i : i + k], "labels": ys[i : i + k]}
                r = c.post("/learn/batch", json=body)
                if r.status_code != 200:
                    failed.append(r.text)
                sent["learned"] += k if r.status_code == 200 else 0

    def labeller(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=service.url, timeout=30) as c:
            while time.monotonic() < until:
                i = rng.randrange(3900)
                p = c.post("/predict", json={"model": "r", "features": xs[i]})
                body = {"prediction_id": p.json().get("prediction_id"), "label": ys[i]}
                f = c.post("/feedback", json=body)
                if f.status_code != 200:
                    failed.append(f.text)
                sent["feedback"] += f.status_code == 200

    with running(ServiceProcess(redis_url, workers=2)) as service:
        with httpx.Client(base_url=service.url, timeout=30) as c:
            assert c.put("/models/r", json={"n_features": 2, "drift": spec}).status_code == 201
        threads = [threading.Thread(target=learner, args=(i,)) for i in range(2)]
        threads += [threading.Thread(target=labeller, args=(10 + i,)) for i in range(3)]
        until = time.monotonic() + 8
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with httpx.Client(base_url=service.url, timeout=30) as c:
            counters = c.get("/models/r").json()["counters"]
    assert failed == []
    assert counters["retrains"] > 100, counters
    assert (counters["learned"], counters["feedback"]) == (sent["learned"], sent["feedback"])


def _learned(c: httpx.Client, how: str, xs: Any, ys: Any) -> list[Any]:
    """The predictions served before learning each example, learned as ``how`` says."""
    if how == "batches":
        body = {"model": "r", "features": xs, "labels": ys}
        return list(c.post("/learn/batch", json=body).json()["labels"])
    out = []
    for x, y in zip(xs, ys, strict=True):
        if how == "one a request":
            out.append(
                c.post("/learn", json={"model": "r", "features": x, "label": y}).json()["label"]
            )
            continue
        p = c.post("/predict", json={"model": "r", "features": x}).json()
        out.append(p["label"])
        f = c.post("/feedback", json={"prediction_id": p["prediction_id"], "label": y})
        assert f.status_code == 200, f.text
    return out


@pytest.mark.in_process
def test_no_retrain_on_a_stable_stream_of_12000_examples(client: httpx.Client) -> None:
    body = {"n_features": 2, "drift": {"detector": "ddm", "on_drift": "retrain"}, "averaged": True}
    assert client.put("/models/r", json=body).status_code == 201
    xs, ys = stream("stable", 12_000, 2, seed=1)
    learn_all(client, "r", xs, ys, size=500)
    events = client.get("/models/r/drift").json()["events"]
    assert not any(e["action"] == "retrained" for e in events)
    assert client.get("/models/r").json()["counters"]["seen"] == 12_000


@pytest.mark.in_process
def test_a_retrained_model_rolls_back_to_before_and_after_the_retrain_exactly(
    make_service: MakeService,
) -> None:
    client = make_service(**HISTORY)
    body = {"n_features": 2, "drift": DRIFT, "averaged": True}
    assert client.put("/models/r", json=body).status_code == 201
    xs, ys = stream("abrupt", 900, 2, seed=7)  # (retrains at its 92nd example, and later)
    exports, swapped = {}, None
    starts = [*range(0, 60, 30), *range(60, 130), *range(130, len(xs), 30)]  # (one at a time
    for i, j in zip(starts, [*starts[1:], len(xs)], strict=True):  # around the first retrain)
        learn_all(client, "r", xs[i:j], ys[i:j])
        doc = client.get("/models/r/export").json()
        exports[doc["version"]] = (doc["weights"], doc["seen"])
        if swapped is None and int(doc["counters"].get("retrains", 0)) > 0:
            swapped = doc["version"]
    assert swapped is not None
    before = max(v for v in exports if v < swapped)
    # The retrain's event says the version just before it (learned one example a request there)
    events = client.get("/models/r/drift").json()["events"]
    assert [e["version"] for e in events if e["action"] == "retrained"][0] == before
    assert all(e["version"] is None for e in events if e["action"] is None)
    for v in (max(exports), swapped, before, min(exports)):
        got = client.post("/models/r/rollback", json={"version": v})
        assert got.status_code == 200, got.text
        doc = client.get("/models/r/export").json()
        assert (doc["version"], doc["weights"]) == (v, exports[v][0])
        # (an averaged learner's count: that of the last update restored, as for any model)
        assert 0 < doc["seen"] <= exports[v][1]


def test_a_retraining_holds_through_kill_9_of_every_worker_and_a_redis_restart(
    store: RedisServer,
) -> None:
    """The detector's state and the background learner live with the model in Redis: every
    worker killed (SIGKILL) while the background learner holds examples, Redis restarted from
    its append-only file, the service started again goes on as River's wrapper would."""
    xs, ys, expected = rivers_stream()
    body = {"n_features": 2, "drift": DRIFT, "averaged": True}
    service = ServiceProcess(store.url, workers=2).start()
    try:
        with httpx.Client(base_url=service.url, timeout=30) as c:
            assert c.put("/models/r", json=body).status_code == 201
            got = learn_all(c, "r", xs[:480], ys[:480], size=40)
            kept = c.get("/models/r/export").json()["drift"]
            assert kept["background"]  # (it holds some, after a retrain at example 455)
        assert service.proc is not None
        for pid in [*worker_pids(service.proc.pid), service.proc.pid]:
            os.kill(pid, signal.SIGKILL)
        service.proc.wait(10)
        service.proc = None
    finally:
        service.stop()
    store.stop()  # (append-only file on: the model, its detector and its background learner)
    store.start()
    with (
        running(ServiceProcess(store.url, workers=2)) as again,
        httpx.Client(base_url=again.url, timeout=30) as c,
    ):
        assert c.get("/models/r/export").json()["drift"] == kept
        got += learn_all(c, "r", xs[480:], ys[480:], size=40)
    assert got == expected


@pytest.mark.in_process
def test_an_undo_leaves_a_retrains_entries_and_its_learner_whole(
    make_service: MakeService,
) -> None:
    """An undo of every key's updates takes out the served learners' own updates, never the
    examples a retrain learned afresh: the model is the last retrain's learner as it came."""
    client = make_service(**HISTORY)
    assert client.put("/models/r", json={"n_features": 2, "drift": DRIFT}).status_code == 201
    ours = Retraining(ModelConfig(n_features=2), DDM(10, 2.0, 2.5))
    xs, ys = stream("abrupt", 600, 2, seed=12)
    came = None
    for x, y in zip(xs, ys, strict=True):
        if ours.learn(x, y).retrained:
            came = ours.served.weights.copy()
    assert came is not None
    learn_all(client, "r", xs, ys, size=1)
    got = client.post("/models/r/undo", json={"from_time": 0})
    assert got.status_code == 200 and got.json()["removed"] > 0, got.text
    rows = client.get("/models/r/weights").json()["rows"]
    assert rows[0]["weights"] == came.w[0].tolist() and rows[0]["bias"] == float(came.b[0])


@pytest.mark.in_process
def test_the_background_learner_keeps_its_examples_within_its_bytes(client: httpx.Client) -> None:
    """A warning held for long on a wide model: the background learner keeps examples while
    they hold BACKGROUND_BYTES at most (the edge: as many as fit, none past), and the drift that
    ends the warning goes through at once, the background learner then empty."""
    dim, spec = 20_000, {"detector": "ddm", "on_drift": "retrain", "warm_start": 1}
    assert client.put("/models/w", json={"n_features": dim, "drift": spec}).status_code == 201
    ours = Retraining(ModelConfig(n_features=dim), DDM(warm_start=1))
    rng = np.random.default_rng(5)

    def learn(mistake: bool) -> None:
        _learn_one(client, "w", ours, rng.normal(size=dim).round(2).tolist(), mistake)

    for i in range(60):  # (a mistake in five: the detector's best rate and its deviation)
        learn(i % 5 == 0)
    fits, warned = None, 0
    for _ in range(2000):
        learn(ours.status == "stable" or _warns_on(ours, 1))  # (held in its warning)
        assert ours.status != "drift"
        warned += ours.status == "warning"
        if fits is None and warned:
            item = client.get("/models/w/export").json()["drift"]["background"][0]
            fits = BACKGROUND_BYTES // len(base64.b64decode(item))
        if fits is not None and warned > fits + 3:
            break
    assert fits is not None and warned > fits
    assert len(client.get("/models/w/export").json()["drift"]["background"]) == fits
    while ours.status != "drift":  # (mistakes until it drifts: the retrain goes through)
        learn(True)
    assert client.get("/models/w").json()["counters"]["retrains"] == 1
    assert client.get("/models/w/export").json()["drift"]["background"] == []


@pytest.mark.in_process
def test_the_background_learner_holds_its_bytes_all_together_with_ever_shorter_examples(
    client: httpx.Client,
) -> None:
    """Named examples, each shorter than the one before, through a long warning: the
    background learner keeps them while all of them together hold BACKGROUND_BYTES at most.
    (Kept while as many as it held, each as long as the newest, fitted, they held 5 MiB here,
    and up to 4 MiB x (1 + ln n) for n of them.)"""
    spec = {"detector": "ddm", "on_drift": "retrain", "warm_start": 1}
    assert client.put("/models/s", json={"hash_bits": 20, "drift": spec}).status_code == 201
    ours = Retraining(ModelConfig(hash_bits=20), DDM(warm_start=1))

    def learn(x: dict[str, float], mistake: bool) -> None:
        _learn_one(client, "s", ours, x, mistake)

    for i in range(60):  # (a mistake in five: the detector's best rate and its deviation)
        learn({"a": 1.0, f"b{i}": 1.0}, i % 5 == 0)
    while ours.status == "stable":
        learn({"a": 1.0}, True)
    for i in range(1, 40):  # (in its warning, each kept while they fit)
        learn({f"f{j}": 1.0 for j in range(100_000 // i)}, _warns_on(ours, 1))
        assert ours.status == "warning"
    background = client.get("/models/s/export").json()["drift"]["background"]
    kept = [len(base64.b64decode(b)) for b in background]
    assert len(kept) > 2
    assert BACKGROUND_BYTES / 2 < sum(kept) <= BACKGROUND_BYTES


def _learn_one(client: httpx.Client, model: str, ours: Retraining, x: Any, mistake: bool) -> None:
    """``x`` learned by the model and by the reference, labelled so that the reference's
    prediction is a mistake or not, as ``mistake`` says."""
    p = int(ours.predict(x))
    y = -p if mistake else p
    got = client.post("/learn/batch", json={"model": model, "features": [x], "labels": [y]})
    assert got.status_code == 200, got.text
    ours.learn(x, y)


def _warns_on(ours: Retraining, mistake: int) -> bool:
    """Whether the detector still warns, without a drift, after one more such outcome."""
    warning, drift = ours.detector.flags(ours.detector.update(list(ours.state), mistake))
    return warning and not drift


@pytest.mark.in_process
@pytest.mark.parametrize(
    "settings",
    [{"classes": [0, 1, 2]}, {"classes": [0, 1, 2], "multiclass": "ovr", "algorithm": "arow"}],
    ids=["multiclass", "arow ovr"],
)
def test_a_batch_of_a_thousand_with_many_drifts_retrains_as_one_by_one(
    client: httpx.Client, settings: dict[str, Any]
) -> None:
    """A detector so touchy that one batch of 1,000 drifts over a hundred times: learned a
    window at a time (not again to the batch's end after each drift), exactly the reference."""
    spec = {"detector": "ddm", "on_drift": "retrain", "warm_start": 5,
            "warning_threshold": 0.01, "drift_threshold": 0.02}  # fmt: skip
    assert client.put("/models/t", json={"n_features": 2, "drift": spec, **settings}).is_success
    ours = Retraining(ModelConfig(n_features=2, **settings), DDM(5, 0.01, 0.02))
    xs, ys = stream("slow", 1000, 3, seed=4)
    expected, retrains = [], 0
    for x, y in zip(xs, ys, strict=True):
        expected.append(ours.predict(x))
        retrains += ours.learn(x, y).retrained
    assert retrains > 100
    assert learn_all(client, "t", xs, ys, size=1000) == expected
    assert client.get("/models/t").json()["counters"]["retrains"] == retrains
