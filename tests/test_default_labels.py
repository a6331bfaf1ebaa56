"""A model's default label: a prediction whose wait runs out with no label is learned with it,
exactly once, whichever worker notices (and its drift detector fed once); labels that come
after are told for what they are.
On real worker processes and a real redis-server."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import httpx
import redis

from service.cli.loopback import wait_until
from service.store.keys import ModelKeys

from .servers import RedisServer, ServiceProcess, running, worker_pids

MakeService = Callable[..., httpx.Client]


def _counters(c: httpx.Client, name: str) -> dict[str, int]:
    r = c.get(f"/models/{name}")
    assert r.status_code == 200, r.text
    counters: dict[str, int] = r.json()["counters"]
    return counters


def _create(c: httpx.Client, name: str, **config: Any) -> None:
    spec = {"classes": [0, 1], "n_features": 2, "feedback_ttl_s": 1, "default_label": 0}
    r = c.put(f"/models/{name}", json={**spec, **config})
    assert r.status_code == 201, r.text


def _predict(c: httpx.Client, name: str, n: int) -> list[dict[str, Any]]:
    examples = [[(i % 7) - 3, (i % 5) - 2] for i in range(n)]
    answers: list[dict[str, Any]] = []
    for at in range(0, n, 500):
        r = c.post("/predict/batch", json={"model": name, "features": examples[at : at + 500]})
        assert r.status_code == 200, r.text
        answers += r.json()["predictions"]
    return answers


# A DDM that never flags (thresholds past reach): its count of examples fed is the model's
# labels since it started, each fed once.
COUNTING = {"detector": "ddm", "warning_threshold": 1000.0, "drift_threshold": 1000.0}


def _fed(c: httpx.Client, name: str) -> int:
    """How many labelled examples the model's drift detector was fed (its state's count,
    as an export carries it)."""
    state = c.get(f"/models/{name}/export").json()["drift"]["state"].split()
    assert state[0] == "0"  # (stable: never reset)
    return int(float(state[1]))


def _wait_defaulted(c: httpx.Client, name: str, n: int, timeout: float = 20) -> float:
    start = time.monotonic()
    wait_until(lambda: _counters(c, name)["defaulted"] >= n, timeout=timeout, what="defaults")
    return time.monotonic() - start


def test_forty_predictions_fifteen_labelled_give_twenty_five_defaulted(redis_url: str) -> None:
    with running(ServiceProcess(redis_url, workers=2)) as service:
        c = httpx.Client(base_url=service.url, timeout=30)
        _create(c, "forty")
        preds = _predict(c, "forty", 40)
        sent = time.monotonic()
        labelled, left = preds[:15], preds[15:]
        r = c.post(
            "/feedback/batch",
            json={
                "feedback": [{"prediction_id": p["prediction_id"], "label": 1} for p in labelled]
            },
        )
        assert r.status_code == 200 and all(x["error"] is None for x in r.json()["results"])
        _wait_defaulted(c, "forty", 25)
        assert time.monotonic() - sent < 1 + 4  # within a few seconds of the deadline
        time.sleep(1.5)  # every worker swept since: none applied twice
        counters = _counters(c, "forty")
        assert counters["defaulted"] == 25
        assert counters["seen"] == 40 and counters["feedback"] == 15
        wrong = sum(p["label"] != 0 for p in left) + sum(p["label"] != 1 for p in labelled)
        assert counters["mistakes"] == wrong
        assert counters["defaulted_mistakes"] == sum(p["label"] != 0 for p in left)
        # late labels: a second label, told that the first was the default
        same = c.post("/feedback", json={"prediction_id": left[0]["prediction_id"], "label": 0})
        assert same.status_code == 200, same.text
        assert same.json()["duplicate"] is True and same.json()["labelled_by"] == "default"
        other = c.post("/feedback", json={"prediction_id": left[1]["prediction_id"], "label": 1})
        assert other.status_code == 409, other.text
        assert other.json()["code"] == "feedback_conflict"
        assert other.json()["labelled_by"] == "default"
        given = c.post(
            "/feedback", json={"prediction_id": labelled[0]["prediction_id"], "label": 0}
        )
        assert given.status_code == 409 and "labelled_by" not in given.json()
        batch = c.post(
            "/feedback/batch",
            json={"feedback": [{"prediction_id": left[2]["prediction_id"], "label": 1}]},
        )
        (item,) = batch.json()["results"]
        assert item["error"]["code"] == "feedback_conflict"
        assert item["error"]["labelled_by"] == "default"
        after = _counters(c, "forty")
        assert after["defaulted"] == 25 and after["seen"] == 40
        assert after["duplicates"] == 1 and after["conflicts"] == 3
        with redis.Redis.from_url(redis_url) as r2:  # the index holds none any more
            assert r2.zcard(ModelKeys("forty").deadlines) == 0
        c.close()


def test_a_label_after_the_deadline_meets_the_default_first(make_service: MakeService) -> None:
    """A label that comes after the wait, before any sweep got to it: the default is applied
    then, in the same script, and the label answered as a second one."""
    c = make_service()
    _create(c, "late", feedback_ttl_s=1)
    (p,) = _predict(c, "late", 1)
    time.sleep(1.2)
    r = c.post("/feedback", json={"prediction_id": p["prediction_id"], "label": 0})
    assert r.status_code == 200 and r.json()["labelled_by"] == "default", r.text
    counters = _counters(c, "late")
    assert counters["defaulted"] == 1 and counters["feedback"] == 0 and counters["seen"] == 1


def test_killing_a_worker_mid_sweep_loses_none_and_doubles_none(redis_url: str) -> None:
    n = 3000
    a = ServiceProcess(redis_url, workers=2).start()
    try:
        with running(ServiceProcess(redis_url, workers=1)) as b:
            c = httpx.Client(base_url=a.url, timeout=30)
            _create(c, "many", feedback_ttl_s=2, drift=COUNTING)
            _predict(c, "many", n)
            cb = httpx.Client(base_url=b.url, timeout=30)
            assert a.proc is not None
            victims = [*worker_pids(a.proc.pid), a.proc.pid]
            # the sweeps start at the deadline: kill every process of one service in them
            wait_until(lambda: _counters(cb, "many")["defaulted"] > 0, timeout=20, what="sweep")
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
            a.proc.wait(10)
            a.proc = None
            _wait_defaulted(cb, "many", n, timeout=60)
            time.sleep(1.5)
            counters = _counters(cb, "many")
            assert counters["defaulted"] == n and counters["seen"] == n
            assert _fed(cb, "many") == n  # (its drift detector: each fed once too)
            # the weights the log gives are served: a replica built from it predicts
            assert (
                cb.post("/predict", json={"model": "many", "features": [1, 1]}).status_code == 200
            )
            c.close()
            cb.close()
    finally:
        a.stop()


def test_defaults_survive_a_restart_of_every_worker_and_of_redis(store: RedisServer) -> None:
    with running(ServiceProcess(store.url, workers=1)) as service:
        c = httpx.Client(base_url=service.url, timeout=30)
        _create(c, "restart", feedback_ttl_s=2, drift=COUNTING)
        _predict(c, "restart", 30)
        c.close()
    store.stop()  # (append-only file on: the pending predictions and their index stay)
    store.start()
    time.sleep(2.2)
    with running(ServiceProcess(store.url, workers=2)) as service:
        c = httpx.Client(base_url=service.url, timeout=30)
        _wait_defaulted(c, "restart", 30)
        time.sleep(1.2)
        assert _counters(c, "restart")["defaulted"] == 30
        assert _fed(c, "restart") == 30
        c.close()


def test_a_default_label_not_among_the_classes_is_refused(make_service: MakeService) -> None:
    c = make_service()
    for bad in (2, "0", True, [0]):
        r = c.put("/models/bad", json={"classes": [0, 1], "n_features": 2, "default_label": bad})
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["code"] in ("invalid_config", "validation_error"), r.text
    r = c.put("/models/bad", json={"classes": [0, 1], "n_features": 2, "default_label": 2})
    assert r.json()["code"] == "invalid_config" and "default_label" in r.json()["detail"]
    ok = c.put("/models/ok", json={"classes": ["a", "b"], "n_features": 2, "default_label": "b"})
    assert ok.status_code == 201 and ok.json()["config"]["default_label"] == "b"


def test_the_pending_cap_frees_as_defaults_are_applied(
    make_service: MakeService, redis_url: str
) -> None:
    """Defaults hold pending bytes past the wait until applied, within the cap, and only so
    long: the deadline index never outgrows the predictions the cap lets in."""
    c = make_service(max_pending_bytes=4000)
    _create(c, "capped", feedback_ttl_s=3)  # (none due before the index is read)
    one = {"model": "capped", "features": [1, 2]}
    answers = [c.post("/predict", json=one).status_code for _ in range(40)]
    assert set(answers) == {200, 429} and answers[answers.index(429) :] == [429] * (
        len(answers) - answers.index(429)
    ), answers
    stored = answers.index(429)
    with redis.Redis.from_url(redis_url) as r:
        assert r.zcard(ModelKeys("capped").deadlines) == stored
    _wait_defaulted(c, "capped", stored)
    assert c.post("/predict", json=one).status_code == 200  # room again
    with redis.Redis.from_url(redis_url) as r:
        assert r.zcard(ModelKeys("capped").deadlines) == 1


def test_reset_and_delete_drop_pending_defaults(make_service: MakeService, redis_url: str) -> None:
    c = make_service()
    _create(c, "gone", feedback_ttl_s=1)
    _predict(c, "gone", 5)
    assert c.post("/models/gone/reset").status_code in (200, 204)
    with redis.Redis.from_url(redis_url) as r:
        assert r.zcard(ModelKeys("gone").deadlines) == 0
    time.sleep(1.7)
    assert _counters(c, "gone")["defaulted"] == 0
    _predict(c, "gone", 5)
    assert c.delete("/models/gone").status_code in (200, 204)
    with redis.Redis.from_url(redis_url) as r:
        assert not r.exists(ModelKeys("gone").deadlines)


def test_the_delay_from_prediction_to_label_is_measured(make_service: MakeService) -> None:
    c = make_service()
    _create(c, "delays", feedback_ttl_s=30)
    preds = _predict(c, "delays", 4)
    time.sleep(1.2)  # each label comes past a second: in the bucket (1, 2]
    for p in preds[:3]:
        assert c.post(
            "/feedback", json={"prediction_id": p["prediction_id"], "label": 0}
        ).is_success
    labels = c.get("/models/delays/metrics").json()["labels"]
    assert labels["counted"] == 3 and labels["awaiting_default"] == 1
    assert 1 < labels["median_s"] <= 2 and 1 < labels["p95_s"] <= 2
    assert labels["defaulted_share"] == 0
    text = c.get("/metrics").text
    assert 'perceptron_model_label_delay_seconds_bucket{le="1.0",model="delays"} 0.0' in text
    assert 'perceptron_model_label_delay_seconds_bucket{le="2.0",model="delays"} 3.0' in text
    assert 'perceptron_model_label_delay_seconds_count{model="delays"} 3.0' in text
    assert 'perceptron_model_awaiting_default{model="delays"} 1.0' in text
    assert 'perceptron_model_defaulted_total{model="delays"} 0.0' in text


def test_a_rollback_or_an_undo_drops_the_defaults_still_to_come(make_service: MakeService) -> None:
    """A rollback or an undo makes the model's pending predictions unknown: none awaits its
    default any more (the deadline index goes, as with a reset)."""
    c = make_service()
    _create(c, "back", feedback_ttl_s=3600)
    for step in ("rollback", "undo"):
        _predict(c, "back", 3)
        assert c.get("/models/back/metrics").json()["labels"]["awaiting_default"] == 3
        body = {"version": 0} if step == "rollback" else {"from_time": 0}
        if step == "undo":  # (an update to leave out: an undo of none changes nothing)
            learned = {"model": "back", "features": [1.0, 1.0], "label": 1}
            assert c.post("/learn", json=learned).json()["updated"] is True
        r = c.post(f"/models/back/{step}", json=body)
        assert r.status_code == 200 and r.json().get("removed", 1) == 1, r.text
        assert c.get("/models/back/metrics").json()["labels"]["awaiting_default"] == 0, step
