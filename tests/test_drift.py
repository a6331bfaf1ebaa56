"""A model's drift detector in the service: fed every labelled example's mistake once, by
whichever way it comes (a batch learned, feedback on a prediction) and whichever of two
workers takes it; its warnings and drifts at the examples the detector itself finds on the
same mistakes; counted, listed, reset with the model; and a configuration that cannot be is
refused."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from service.learner.drift_detectors import DDM, EDDM, Detector, feed, status_of

from .servers import ServiceProcess, running

N = 960  # labelled examples: 6 batches of 80, and 480 predictions with their feedback


def turned_stream(n: int, seed: int) -> tuple[list[list[float]], list[int]]:
    """Two features whose label is the sign of x0, then, from the middle on, of -x0: a
    perceptron learns the first concept and then makes mistakes until it turns."""
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, 2))
    ys = np.where(xs[:, 0] > 0, 1, -1)
    ys[n // 2 :] *= -1
    return xs.tolist(), ys.tolist()


@pytest.mark.parametrize(
    "drift", [{"detector": "ddm"}, {"detector": "eddm", "warm_start": 10}], ids=str
)
def test_the_services_detector_flags_what_the_detector_does_on_its_mistakes(
    redis_url: str, drift: dict[str, Any]
) -> None:
    with (
        running(ServiceProcess(redis_url, workers=2)) as service,
        httpx.Client(base_url=service.url, timeout=30) as c,
    ):
        assert c.put("/models/d", json={"n_features": 2, "drift": drift}).status_code == 201
        assert c.get("/models/d").json()["config"]["drift"]["detector"] == drift["detector"]
        xs, ys = turned_stream(N, 5)
        mistakes: list[int] = []
        for i in range(0, N, 80):  # batches, and then predictions and their feedback
            if i % 160 == 0:
                body = {"model": "d", "features": xs[i : i + 80], "labels": ys[i : i + 80]}
                got = c.post("/learn/batch", json=body).json()
                mistakes += [int(m) for m in got["mistakes"]]
                continue
            for at in range(i, i + 80, 8):
                with httpx.Client(base_url=service.url, timeout=30) as one:  # (either worker)
                    for x, y in zip(xs[at : at + 8], ys[at : at + 8], strict=True):
                        p = one.post("/predict", json={"model": "d", "features": x}).json()
                        label = {"prediction_id": p["prediction_id"], "label": y}
                        f = one.post("/feedback", json=label).json()
                        mistakes.append(int(f["mistake"]))
        detector: Detector = DDM(**{k: v for k, v in drift.items() if k != "detector"})
        if drift["detector"] == "eddm":
            detector = EDDM(**{k: v for k, v in drift.items() if k != "detector"})
        state, events = feed(detector, detector.start(), mistakes)
        answer = c.get("/models/d/drift").json()
        assert [(e["at_seen"], e["kind"]) for e in answer["events"]] == events
        assert any(kind == "drift" for _, kind in events)  # (the stream turns)
        assert answer["learners"] == [
            {"learner": "served", "state": status_of(detector, state), "seen": N}
        ]
        assert answer["drift"]["detector"] == drift["detector"]
        counters = c.get("/models/d").json()["counters"]
        assert counters["drifts"] == sum(kind == "drift" for _, kind in events)
        assert counters["drift_warnings"] == sum(kind == "warning" for _, kind in events)
        metrics = c.get("/metrics").text
        assert f'perceptron_model_drifts_total{{model="d"}} {counters["drifts"]}.0' in metrics
        assert c.post("/models/d/reset").status_code == 200
        answer = c.get("/models/d/drift").json()
        assert answer["events"] == [] and answer["learners"][0]["seen"] == 0


def test_a_model_without_a_detector_answers_none(redis_url: str) -> None:
    with (
        running(ServiceProcess(redis_url)) as service,
        httpx.Client(base_url=service.url, timeout=30) as c,
    ):
        assert c.put("/models/m", json={"n_features": 2}).status_code == 201
        assert c.get("/models/m").json()["config"]["drift"] is None
        c.post("/learn", json={"model": "m", "features": [1.0, 2.0], "label": 1})
        assert c.get("/models/m/drift").json() == {"drift": None, "learners": [], "events": []}
        assert c.get("/models/nope/drift").status_code == 404


@pytest.mark.in_process
def test_each_detector_answers_its_own_parameters_every_one_given(client: httpx.Client) -> None:
    """A model's configuration and its drift answer name the detector's parameters, those left
    out at River's defaults, and none of the other detector's."""
    answers = {
        "ddm": {"detector": "ddm", "on_drift": "alert", "warm_start": 30,
                "warning_threshold": 2.0, "drift_threshold": 3.0},
        "eddm": {"detector": "eddm", "on_drift": "alert", "warm_start": 30, "alpha": 0.95,
                 "beta": 0.9},
    }  # fmt: skip
    for kind, whole in answers.items():
        spec = {"n_features": 2, "drift": {"detector": kind}}
        assert client.put(f"/models/{kind}", json=spec).status_code == 201
        assert client.get(f"/models/{kind}").json()["config"]["drift"] == whole
        assert client.get(f"/models/{kind}/drift").json()["drift"] == whole
        assert client.delete(f"/models/{kind}").status_code in (200, 204)


REFUSED = [
    {"detector": "adwin"},
    {"detector": "ddm", "on_drift": "heal"},
    {"detector": "ddm", "warm_start": 0},
    {"detector": "ddm", "warm_start": 1_000_001},
    {"detector": "ddm", "warm_start": 1.5},
    {"detector": "ddm", "warning_threshold": 4.0},
    {"detector": "ddm", "drift_threshold": 0},
    {"detector": "ddm", "alpha": 0.9},
    {"detector": "eddm", "alpha": 0.5},
    {"detector": "eddm", "beta": 1.5},
    {"detector": "ddm", "window": 3},
    {"detector": "ddm", "warning_threshold": "2.5"},  # (a number of another kind, as elsewhere)
    {"detector": "ddm", "drift_threshold": True},
    {"detector": "eddm", "alpha": True},
    {"detector": "eddm", "beta": "0.5"},
    "ddm",
    [],
]


def test_a_detector_that_cannot_be_is_a_422_and_makes_no_model(redis_url: str) -> None:
    """Each limit at its edge is accepted, one past it refused."""
    with running(ServiceProcess(redis_url)) as service:
        with httpx.Client(base_url=service.url, timeout=30) as c:
            for drift in REFUSED:
                r = c.put("/models/m", json={"n_features": 2, "drift": drift})
                assert r.status_code == 422, (drift, r.text)
                assert c.get("/models/m").status_code == 404
            for drift in ({"detector": "ddm", "warm_start": 1_000_000},
                          {"detector": "ddm", "warm_start": 1, "warning_threshold": 3.0},
                          {"detector": "ddm", "warning_threshold": 2, "drift_threshold": 2},
                          {"detector": "eddm", "alpha": 1.0, "beta": 1.0},
                          {"detector": "eddm", "on_drift": "retrain"}):  # fmt: skip
                assert c.put("/models/m", json={"n_features": 2, "drift": drift}).status_code == 201
                assert c.delete("/models/m").status_code in (200, 204)


@pytest.mark.in_process  # on the service in-process (the embedded store's Lua) and a real one
def test_batches_feed_the_detector_as_the_detector_is_fed(client: httpx.Client) -> None:
    drift = {"detector": "ddm", "warm_start": 20, "warning_threshold": 1.5}
    assert client.put("/models/b", json={"n_features": 2, "drift": drift}).status_code == 201
    xs, ys = turned_stream(600, 9)
    mistakes: list[int] = []
    for i in range(0, 600, 37):
        body = {"model": "b", "features": xs[i : i + 37], "labels": ys[i : i + 37]}
        mistakes += [int(m) for m in client.post("/learn/batch", json=body).json()["mistakes"]]
    detector = DDM(20, 1.5)
    state, events = feed(detector, detector.start(), mistakes)
    answer = client.get("/models/b/drift").json()
    assert [(e["at_seen"], e["kind"]) for e in answer["events"]] == events and events
    assert answer["learners"][0]["state"] == status_of(detector, state)


@pytest.mark.in_process
def test_an_export_carries_the_detector_and_its_import_goes_on_from_there(
    client: httpx.Client,
) -> None:
    """Imported elsewhere, a model's detector is where the export left it: fed the same
    mistakes from there, both flag the same examples."""
    drift = {"detector": "ddm", "warm_start": 20, "warning_threshold": 1.5}
    assert client.put("/models/a", json={"n_features": 2, "drift": drift}).status_code == 201
    xs, ys = turned_stream(800, 4)
    body = {"model": "a", "features": xs[:450], "labels": ys[:450]}
    assert client.post("/learn/batch", json=body).status_code == 200
    doc = client.get("/models/a/export").json()
    before = client.get("/models/a/drift").json()
    assert [[e["at_seen"], e["kind"]] for e in before["events"]] == [
        [e["at_seen"], e["kind"]] for e in doc["drift"]["events"]
    ]
    assert client.post("/models/b/import", json=doc).status_code == 200
    assert client.get("/models/b/drift").json() == before
    for name in ("a", "b"):
        body = {"model": name, "features": xs[450:], "labels": ys[450:]}
        assert client.post("/learn/batch", json=body).status_code == 200
    a, b = (client.get(f"/models/{n}/drift").json() for n in ("a", "b"))
    assert [e["at_seen"] for e in a["events"]] == [e["at_seen"] for e in b["events"]]
    assert len(a["events"]) > len(before["events"]) and a["learners"] == b["learners"]


def test_a_file_whose_detector_could_not_be_is_refused_whole(client: httpx.Client) -> None:
    drift = {"detector": "ddm"}
    assert client.put("/models/f", json={"n_features": 2, "drift": drift}).status_code == 201
    client.post("/learn", json={"model": "f", "features": [1.0, 2.0], "label": 1})
    doc = client.get("/models/f/export").json()
    state = doc["drift"]["state"]
    assert state.split()[1] == "1"  # (one example seen)
    event = {"at_seen": 1, "kind": "drift", "time_ms": 0}
    for bad in (
        "x",
        {"state": state},
        {"state": state + " 0", "events": []},
        {"state": "3" + state[1:], "events": []},
        {"state": state.replace(" 1 ", " 1.5 ", 1), "events": []},
        {"state": state.replace(" 1 ", " nan ", 1), "events": []},
        {"state": state, "events": [{**event, "kind": "shift"}]},
        {"state": state, "events": [{**event, "at_seen": -1}]},
        {"state": state, "events": [event] * 101},
    ):
        r = client.post("/models/g/import", json={**doc, "drift": bad})
        assert r.status_code == 422 and r.json()["code"] == "invalid_import", (bad, r.text)
    assert (
        client.post(
            "/models/g/import", json={**doc, "drift": {"state": state, "events": [event] * 100}}
        ).status_code
        == 200
    )
    assert len(client.get("/models/g/drift").json()["events"]) == 100
    plain = client.put("/models/p", json={"n_features": 2}).status_code
    assert plain == 201
    other = {**client.get("/models/p/export").json(), "drift": doc["drift"]}
    r = client.post("/models/p/import", json=other)
    assert r.status_code == 422 and "has none" in r.json()["detail"]
    without = {k: v for k, v in doc.items() if k != "drift"}  # (a file from before: fresh)
    assert client.post("/models/h/import", json=without).status_code == 200
    assert client.get("/models/h/drift").json()["learners"][0]["state"] == "stable"


@pytest.mark.in_process
def test_each_challenger_watches_its_own_mistakes(client: httpx.Client) -> None:
    """A challenger has the model's detector on its own mistakes: one of the served learner's
    settings, added before the first label, errs where it does and flags the same examples;
    another flags its own. GET .../drift lists each learner's state and events, the
    challengers' answer and /metrics count them."""
    drift = {"detector": "ddm", "warm_start": 20, "warning_threshold": 1.5}
    assert client.put("/models/c", json={"n_features": 2, "drift": drift}).status_code == 201
    for id, settings in (("twin", {}), ("avg", {"averaged": True})):
        assert client.put(f"/models/c/challengers/{id}", json=settings).status_code == 201
    xs, ys = turned_stream(700, 6)
    for i in range(0, 700, 100):
        body = {"model": "c", "features": xs[i : i + 100], "labels": ys[i : i + 100]}
        assert client.post("/learn/batch", json=body).status_code == 200
    got = client.get("/models/c/drift").json()
    by = {id: [(e["at_seen"], e["kind"]) for e in got["events"] if e["learner"] == id]
          for id in ("served", "twin", "avg")}  # fmt: skip
    assert by["served"] and by["twin"] == by["served"] and by["avg"]
    assert all(e["time"] is None for e in got["events"] if e["learner"] != "served")
    assert [(c["learner"], c["seen"]) for c in got["learners"]] == [
        ("served", 700),
        ("avg", 700),
        ("twin", 700),
    ]
    assert got["learners"][2]["state"] == got["learners"][0]["state"]
    shown = {c["id"]: c for c in client.get("/models/c/challengers").json()["challengers"]}
    for id in ("twin", "avg"):
        assert shown[id]["drifts"] == sum(k == "drift" for _, k in by[id])
        assert shown[id]["drift_warnings"] == sum(k == "warning" for _, k in by[id])
    scraped = client.get("/metrics").text
    drifts = shown["twin"]["drifts"]
    line = f'perceptron_challenger_drifts_total{{learner="twin",model="c"}} {drifts}.0'
    assert line in scraped, [ln for ln in scraped.splitlines() if "challenger_drifts" in ln]


def test_a_detector_moves_with_its_learner_when_a_challenger_is_promoted(
    client: httpx.Client,
) -> None:
    """Each learner keeps its own detector through a promotion: the promoted challenger's
    detector watches the served learner's mistakes from where it stood (it flags what a copy
    of it, still a challenger, flags), and the learner that served takes its detector among the
    challengers (it flags what a copy of it flags). The model's drift counters only grow."""
    drift = {"detector": "ddm", "warm_start": 20, "warning_threshold": 1.5}
    assert client.put("/models/p", json={"n_features": 2, "drift": drift}).status_code == 201
    for id, settings in (("twin", {}), ("avg", {"averaged": True}), ("avg2", {"averaged": True})):
        assert client.put(f"/models/p/challengers/{id}", json=settings).status_code == 201
    xs, ys = turned_stream(700, 7)  # (it turns at 350, and turns back at 1050)
    more_xs, more_ys = turned_stream(700, 8)
    xs, ys = xs + more_xs, ys + [-y for y in more_ys]
    for i in range(0, 700, 100):
        body = {"model": "p", "features": xs[i : i + 100], "labels": ys[i : i + 100]}
        assert client.post("/learn/batch", json=body).status_code == 200
    before = client.get("/models/p").json()["counters"]
    r = client.post("/models/p/promote", json={"challenger": "avg", "demote_as": "old"})
    assert r.status_code == 200, r.text
    assert client.get("/models/p").json()["config"]["drift"]["detector"] == "ddm"
    for i in range(700, 1400, 100):
        body = {"model": "p", "features": xs[i : i + 100], "labels": ys[i : i + 100]}
        assert client.post("/learn/batch", json=body).status_code == 200
    got = client.get("/models/p/drift").json()
    by = {id: [(e["at_seen"], e["kind"]) for e in got["events"] if e["learner"] == id]
          for id in ("served", "twin", "avg2", "old")}  # fmt: skip
    assert by["served"] == by["avg2"] and any(at > 700 for at, _ in by["served"])
    assert by["old"] == by["twin"] and any(at > 700 for at, _ in by["old"])
    states = {c["learner"]: c["state"] for c in got["learners"]}
    assert states["served"] == states["avg2"] and states["old"] == states["twin"]
    after = client.get("/models/p").json()["counters"]
    assert after["drifts"] >= before["drifts"]
    assert after["drift_warnings"] >= before["drift_warnings"]


def test_a_rollback_starts_the_detector_afresh(client: httpx.Client) -> None:
    """The learner a detector watched is gone after a rollback: its detector starts afresh
    (its statistics were another learner's mistakes), and its events stay, as history."""
    drift = {"detector": "ddm", "warm_start": 1000}  # (counts every example, decides nothing)
    assert client.put("/models/r", json={"n_features": 2, "drift": drift}).status_code == 201
    xs, ys = turned_stream(400, 9)
    body = {"model": "r", "features": xs, "labels": ys}
    assert client.post("/learn/batch", json=body).status_code == 200
    assert client.get("/models/r/export").json()["drift"]["state"].split()[1] == "400"
    r = client.post("/models/r/rollback", json={"version": 1})
    assert r.status_code == 200, r.text
    body = {"model": "r", "features": xs[:50], "labels": ys[:50]}
    assert client.post("/learn/batch", json=body).status_code == 200
    assert client.get("/models/r/export").json()["drift"]["state"].split()[1] == "50"
