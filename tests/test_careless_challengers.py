"""What a careless user did to challengers, promotion, rollback and import, each of which once
broke: a single challenger's address, the settings a challenger takes from the served model,
a copy of the served weights into another layout, a promotion's refusal naming the id taken,
an averaged learner's count restored by a rollback, an import whose weights are not whole."""

from __future__ import annotations

import base64
import hashlib
import math
from typing import Any

import httpx
import pytest
import redis

from service.engine.replicas import Replicas
from service.settings import Settings
from service.store import ModelKeys
from service.store.script import raw

from .test_challengers import stream

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

THREE = {"classes": ["a", "b", "c"], "n_features": 2}


def code(r: httpx.Response, status: int, want: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.json()["code"] == want, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_challenger_has_an_address(client: httpx.Client) -> None:
    client.put("/models/m", json={"n_features": 5})
    added = client.put("/models/m/challengers/pa", json={"algorithm": "pa1"}).json()
    for x, y in stream(20, seed=3):
        client.post("/learn", json={"model": "m", "features": x, "label": y})
    listed = client.get("/models/m/challengers", params={"weights": "true"}).json()
    one = client.get("/models/m/challengers/pa", params={"weights": "true"})
    assert one.status_code == 200, one.text
    assert one.json() == listed["challengers"][0]
    assert one.json()["seen"] == 20 and one.json()["config"] == added["config"]
    assert "weights" not in client.get("/models/m/challengers/pa").json()
    code(client.get("/models/m/challengers/other"), 404, "challenger_not_found")
    code(client.get("/models/none/challengers/pa"), 404, "model_not_found")
    code(client.get("/models/m/challengers/-x"), 422, "invalid_challenger_id")


def test_a_challenger_takes_the_settings_it_leaves_out_from_the_served_model(
    client: httpx.Client,
) -> None:
    client.put("/models/o", json={**THREE, "multiclass": "ovo", "learning_rate": 0.5})
    avg = client.put("/models/o/challengers/avg", json={"averaged": True}).json()
    assert avg["config"]["multiclass"] == "ovo" and avg["config"]["learning_rate"] == 0.5
    assert avg["promotable"] is True and "not_promotable" not in avg
    # a rule that does not take the served learner's settings: theirs are left at defaults
    pa = client.put("/models/o/challengers/pa", json={"algorithm": "pa2", "C": 0.1}).json()
    assert pa["config"]["multiclass"] == "ovo" and pa["config"]["C"] == 0.1
    assert "learning_rate" not in pa["config"]  # (a PA learner's configuration names its own)
    client.put("/models/p", json={"n_features": 5, "algorithm": "pa1", "C": 0.25})
    c = client.put("/models/p/challengers/c", json={"algorithm": "pa2"}).json()
    assert (c["config"]["algorithm"], c["config"]["C"]) == ("pa2", 0.25)
    back = client.put("/models/p/challengers/perceptron", json={"algorithm": "perceptron"})
    assert back.status_code == 201, back.text
    assert "C" not in back.json()["config"]
    # one of another layout is added, and told that it can never serve
    other = client.put("/models/o/challengers/ovr", json={"multiclass": "ovr"}).json()
    assert other["promotable"] is False and "'ovr'" in other["not_promotable"]
    got = client.get("/models/o/challengers/ovr").json()
    assert (got["promotable"], got["not_promotable"]) == (False, other["not_promotable"])
    code(client.post("/models/o/promote", json={"challenger": "ovr"}), 409, "promotion_layout")
    assert client.post("/models/o/promote", json={"challenger": "avg"}).status_code == 200


@pytest.mark.parametrize("k", [3, 4, 5])
def test_a_copy_of_the_served_weights_is_made_only_into_their_layout(
    client: httpx.Client, k: int
) -> None:
    classes = [f"c{i}" for i in range(k)]
    client.put("/models/m", json={"classes": classes, "n_features": 2})
    for strategy in ("ovo", "ovr"):
        body = {"multiclass": strategy, "from": "served"}
        refused = code(client.put(f"/models/m/challengers/{strategy}", json=body), 422,
                       "invalid_challenger")  # fmt: skip
        assert "'multiclass'" in refused["detail"], refused
    r = client.put("/models/m/challengers/same", json={"averaged": True, "from": "served"})
    assert r.status_code == 201, r.text
    client.put("/models/b", json={"n_features": 5})  # two classes: one row in every layout
    r = client.put("/models/b/challengers/ovo", json={"multiclass": "ovo", "from": "served"})
    assert r.status_code == 201, r.text


def test_a_promotions_refusal_names_the_id_taken(client: httpx.Client) -> None:
    client.put("/models/m", json={"n_features": 5})
    client.put("/models/m/challengers/c", json={"learning_rate": 0.5})
    client.put("/models/m/challengers/served-1", json={"averaged": True})
    body = {"challenger": "c", "demote_as": "served-1"}  # (the default name takes a free one)
    r = code(client.post("/models/m/promote", json=body), 409, "challenger_exists")
    assert "'served-1'" in r["detail"] and "''" not in r["detail"], r


def learn(client: httpx.Client, name: str, data: list[tuple[list[float], int]]) -> None:
    for x, y in data:
        r = client.post("/learn", json={"model": name, "features": x, "label": y})
        assert r.status_code == 200, r.text


def probe(client: httpx.Client, name: str, xs: list[list[float]]) -> list[float]:
    return [
        client.post("/predict", json={"model": name, "features": x}).json()["score"] for x in xs
    ]


def test_a_rollback_restores_an_averaged_learners_count(client: httpx.Client) -> None:
    """An averaged learner's mean divides by its count: a rollback to the checkpoint made
    before a promotion, or before a reset, serves the scores served then."""
    client.put("/models/m", json={"n_features": 5, "averaged": True})
    data = stream(140, seed=11)
    xs = [x for x, _ in data[:12]]
    learn(client, "m", data[:110])
    before = probe(client, "m", xs)
    seen = client.get("/models/m").json()["counters"]["seen"]
    client.put("/models/m/challengers/c", json={"averaged": True})
    learn(client, "m", data[110:120])
    promoted = client.post("/models/m/promote", json={"challenger": "c"}).json()
    assert client.get("/models/m").json()["counters"]["seen"] == 10
    assert client.delete(f"/models/m/challengers/{promoted['demoted']}").status_code == 204
    learn(client, "m", data[120:])
    (kept,) = [
        c
        for c in client.get("/models/m/checkpoints").json()["checkpoints"]
        if c["id"] == promoted["checkpoint"]
    ]
    was = client.get("/models/m").json()["counters"]
    r = client.post("/models/m/rollback", json={"checkpoint": kept["id"]})
    assert r.status_code == 200, r.text
    # (the learner's own count, which its export says; the counters stay what was counted)
    assert client.get("/models/m/export").json()["seen"] == kept["seen"] == seen + 10
    now = client.get("/models/m").json()["counters"]
    assert {**now, "updates": 0} == {**was, "updates": 0}  # ("updates" is the version)
    assert probe(client, "m", xs) != before  # (its checkpoint came 10 labels later)
    # a reset, then a rollback to before it: the same scores as just before the reset
    now = probe(client, "m", xs)
    assert client.post("/models/m/reset").status_code == 200
    learn(client, "m", data[:5])
    checkpoints = client.get("/models/m/checkpoints").json()["checkpoints"]
    (reset,) = [c for c in checkpoints if c["reason"] == "before reset"]
    assert client.post("/models/m/rollback", json={"checkpoint": reset["id"]}).status_code == 200
    assert probe(client, "m", xs) == now
    assert client.get("/models/m/export").json()["seen"] == reset["seen"]
    exported = client.get("/models/m/export").json()  # (its counts still make an export)
    assert client.put("/models/copy", json={"n_features": 5, "averaged": True}).is_success
    assert client.post("/models/copy/import", json=exported).status_code == 200


def test_a_rollback_to_a_version_restores_the_count_of_that_version(
    make_service: Any,
) -> None:
    client = make_service(history_keep_updates=1000)
    client.put("/models/m", json={"n_features": 5, "averaged": True})
    data = stream(60, seed=4)
    xs = [x for x, _ in data[:12]]
    scores: dict[int, list[float]] = {}
    for x, y in data:
        r = client.post("/learn", json={"model": "m", "features": x, "label": y}).json()
        if r["updated"]:
            scores[r["version"]] = probe(client, "m", xs)
    version = sorted(scores)[len(scores) // 2]
    assert client.post("/models/m/rollback", json={"version": version}).status_code == 200
    assert probe(client, "m", xs) == scores[version]


def test_an_import_refuses_weights_that_are_not_whole(client: httpx.Client) -> None:
    client.put("/models/m", json={"n_features": 5})
    learn(client, "m", stream(10, seed=2))
    doc = client.get("/models/m/export").json()
    for data in (b"", base64.b64decode(doc["weights"])[:-8], base64.b64decode(doc["weights"]) * 2):
        bad = {**doc, "version": 5, "weights": base64.b64encode(data).decode(),
               "sha256": hashlib.sha256(data).hexdigest()}  # fmt: skip
        r = code(client.post("/models/m/import", json=bad), 422, "invalid_import")
        assert "holds" in r["detail"], r
    assert client.post("/models/m/import", json=doc).status_code == 200


def test_a_challengers_weights_kept_in_its_state_as_before_are_still_read(
    make_service: Any, redis_client: redis.Redis
) -> None:
    """A store written before a challenger's weights had a key of their own held them at the
    end of its state: read as they were, and written apart at the next fold."""
    client = make_service(compact_every=5)
    client.put("/models/m", json={"n_features": 5})
    learn(client, "m", stream(10, seed=6))
    assert client.put("/models/m/challengers/c", json={"from": "served"}).status_code == 201
    before = client.get("/models/m/challengers", params={"weights": "true"}).json()
    keys = ModelKeys("m")
    key = raw(redis_client.hget(keys.cweights, "c") or b"")
    assert redis_client.type(key) == b"list"
    weights = b"".join(raw(c) for c in redis_client.lrange(key, 0, -1))
    head = raw(redis_client.hget(keys.cstate, "c") or b"")
    redis_client.hset(keys.cstate, "c", head + weights)
    redis_client.hdel(keys.cweights, "c")
    redis_client.delete(key)
    assert client.get("/models/m/challengers", params={"weights": "true"}).json() == before
    learn(client, "m", stream(40, seed=7))
    after = client.get("/models/m/challengers/c", params={"weights": "true"}).json()
    assert after["seen"] == 40
    assert redis_client.hget(keys.cweights, "c") is not None  # (folded: written apart again)
    assert client.delete("/models/m").status_code == 204
    assert [k for k in redis_client.keys("pcp:{m}:*") if redis_client.pttl(k) < 0] == []


def test_a_learner_demoted_after_a_rollback_keeps_its_drift_events(client: httpx.Client) -> None:
    """A rollback starts the detector afresh and keeps its events; a promotion then demotes the
    learner with them (a fresh detector's events were packed as none: all lost)."""
    drift = {"detector": "ddm", "warm_start": 2, "warning_threshold": 0.3, "drift_threshold": 1.5}
    assert client.put("/models/m", json={"n_features": 2, "drift": drift}).is_success
    assert client.post("/models/m/reset").is_success
    body = {"model": "m", "features": [[-0.001, -1.0]] * 24, "labels": [-1] * 12 + [1] * 12}
    assert client.post("/learn/batch", json=body).is_success
    events = [(e["kind"], e["at_seen"]) for e in client.get("/models/m/drift").json()["events"]]
    assert events
    (kept,) = client.get("/models/m/checkpoints").json()["checkpoints"]
    assert client.post("/models/m/rollback", json={"checkpoint": kept["id"]}).is_success
    assert client.put("/models/m/challengers/c1", json={"averaged": True}).is_success
    body = {"challenger": "c1", "demote_as": "was"}
    assert client.post("/models/m/promote", json=body).is_success
    report = client.get("/models/m/drift").json()
    assert [(e["kind"], e["at_seen"]) for e in report["events"] if e["learner"] == "was"] == events


@pytest.mark.parametrize(
    "drift",
    [
        None,
        {
            "detector": "ddm",
            "on_drift": "retrain",
            "warm_start": 2,
            "warning_threshold": 0.3,
            "drift_threshold": 1.5,
        },
    ],
    ids=["rolled back", "retrained"],
)
def test_a_learner_whose_count_is_its_own_is_demoted_and_promoted_back_with_its_counts(
    client: httpx.Client, drift: dict[str, Any] | None
) -> None:
    """An averaged learner's count apart from the model's (a rollback to an earlier version,
    or a retrain), demoted then promoted back: its counted labels, mistakes and last outcomes
    come back with it, and its own count (its mean's) too (promoting it back answered 500)."""
    body = {"n_features": 2, "averaged": True, "drift": drift}
    assert client.put("/models/m", json=body).is_success
    xs = [[math.cos(i), math.sin(i)] for i in range(60)]
    ys = [1 if x[0] > 0 else -1 for x in xs[:30]] + [1 if x[0] < 0 else -1 for x in xs[30:]]
    assert client.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys}).is_success
    if drift is None:
        assert client.post("/models/m/rollback", json={"version": 2}).is_success
    else:
        assert client.get("/models/m").json()["counters"]["retrains"] > 0
    model = client.get("/models/m").json()
    before = (model["counters"]["seen"], model["counters"]["mistakes"])
    own = client.get("/models/m/export").json()["seen"]
    assert own < before[0]  # (its own count apart)
    predicted = client.post("/predict/batch", json={"model": "m", "features": xs}).json()
    assert client.put("/models/m/challengers/c", json={}).is_success
    assert client.post("/models/m/promote", json={"challenger": "c", "demote_as": "was"}).is_success
    was = client.get("/models/m/challengers/was").json()
    assert was["seen"] == before[0]
    got = client.post("/models/m/promote", json={"challenger": "was", "demote_as": "c"})
    assert got.status_code == 200, got.text
    model = client.get("/models/m").json()
    assert (model["counters"]["seen"], model["counters"]["mistakes"]) == before
    assert client.get("/models/m/export").json()["seen"] == own
    again = client.post("/predict/batch", json={"model": "m", "features": xs}).json()
    assert [p["label"] for p in again["predictions"]] == [
        p["label"] for p in predicted["predictions"]
    ]


def test_a_request_tries_again_while_promotions_keep_replacing_the_model() -> None:
    """Each promotion replaces the model (a new epoch): a request that found it replaced three
    times in a row answered 503 model_busy, though promotions one after another each hold the
    model only a few ms. It tries again while the model was replaced for less than 10 s."""
    now = [0.0]
    replicas = Replicas(None, Settings(auth=False), clock=lambda: now[0])  # type: ignore[arg-type]
    tried = 0
    for _ in replicas.attempts("m"):  # (each found the model replaced, a second later)
        tried += 1
        now[0] += 1.0
    assert tried == 11
    now[0], tried = 0.0, 0
    for _ in replicas.attempts("m"):  # (each a minute: three at least)
        tried += 1
        now[0] += 60.0
    assert tried == 3
    assert "10 s" in str(replicas.busy("m"))


def test_the_demoted_learner_takes_a_free_name_when_a_challenger_has_its_default(
    client: httpx.Client,
) -> None:
    """A challenger named as the demoted learner's default (served-<checkpoint>) made every
    promotion without demote_as a 409 challenger_exists: the demoted learner takes the next
    free name instead."""
    assert client.put("/models/m", json={"n_features": 2}).is_success
    assert client.put("/models/m/challengers/served-1", json={"algorithm": "pa1"}).is_success
    assert client.put("/models/m/challengers/served-1-2", json={}).is_success
    assert client.put("/models/m/challengers/p", json={"margin": 0.5}).is_success
    got = client.post("/models/m/promote", json={"challenger": "p"})
    assert got.status_code == 200, got.text
    assert (got.json()["demoted"], got.json()["checkpoint"]) == ("served-1-3", 1)
    ids = {c["id"] for c in client.get("/models/m/challengers").json()["challengers"]}
    assert ids == {"served-1", "served-1-2", "served-1-3"}
    taken = client.post(
        "/models/m/promote", json={"challenger": "served-1", "demote_as": "served-1-2"}
    )
    assert taken.status_code == 409 and taken.json()["code"] == "challenger_exists"


def test_an_arow_challenger_from_the_served_learner_starts_with_its_variances(
    client: httpx.Client,
) -> None:
    """ "from": "served" copies the whole learner where the challenger keeps the same arrays:
    AROW's variances with its weights (they started at 1 again); promoted at once, it is the
    learner that served, bit for bit."""
    assert client.put("/models/m", json={"n_features": 2, "algorithm": "arow"}).is_success
    xs = [[math.cos(i), math.sin(i)] for i in range(50)]
    ys = [1 if x[0] + x[1] > 0 else -1 for x in xs]
    assert client.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys}).is_success
    before = client.get("/models/m/export").json()["weights"]
    assert client.put("/models/m/challengers/c", json={"from": "served"}).is_success
    assert client.post("/models/m/promote", json={"challenger": "c"}).is_success
    assert client.get("/models/m/export").json()["weights"] == before


def test_a_challenger_refused_for_the_models_multiclass_is_told_it_took_it(
    client: httpx.Client,
) -> None:
    assert client.put("/models/m", json={"n_features": 2, "classes": [0, 1, 2]}).is_success
    got = client.put("/models/m/challengers/c", json={"algorithm": "logistic"})
    assert got.status_code == 422 and "the model's 'multiclass'" in got.json()["detail"], got.text
    ovr = {"algorithm": "logistic", "multiclass": "ovr"}
    assert client.put("/models/m/challengers/c", json=ovr).status_code == 201
