"""Promotion on the service in-process and on the real one: the promoted learner serves
exactly the reference's weights, with its own counts; what a promotion refuses; a hold left by
a promotion whose worker died holds labels back no longer than PROMOTE_HOLD_MS (the others,
on two workers and under load, are ``test_promotion.py``)."""

from __future__ import annotations

import time

import httpx
import pytest
import redis

from service.contract.store_protocol import PROMOTE_HOLD_MS, PROMOTING, PROMOTIONS_KEPT
from service.store.keys import keys_of

from .conftest import MakeService
from .inprocess import WaitingClock
from .test_challengers import Reference, stream

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one


def code(r: httpx.Response, status: int, want: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["code"] == want, r.text


def test_the_promoted_learner_is_the_reference(client: httpx.Client) -> None:
    assert client.put("/models/p", json={"n_features": 5}).status_code == 201
    refs = {"avg": Reference(5, averaged=True), "pa": Reference(5, "pa1", c=0.1)}
    for id, body in (("avg", {"averaged": True}), ("pa", {"algorithm": "pa1", "C": 0.1})):
        assert client.put(f"/models/p/challengers/{id}", json=body).status_code == 201
    served = Reference(5)
    data = stream(120, seed=5)
    for x, y in data[:80]:
        assert client.post("/learn", json={"model": "p", "features": x, "label": y}).is_success
        for ref in (served, *refs.values()):
            ref.learn(x, y)
    r = client.post("/models/p/promote", json={"challenger": "pa", "demote_as": "perceptron"})
    assert r.status_code == 200, r.text
    assert r.json()["config"]["algorithm"] == "pa1" and r.json()["demoted"] == "perceptron"
    model = client.get("/models/p").json()
    pa = refs["pa"]
    assert model["version"] == pa.updates
    assert (model["counters"]["seen"], model["counters"]["mistakes"]) == (pa.seen, pa.mistakes)
    assert model["counters"]["learned"] == 80  # (the stream's count stays)
    row = client.get("/models/p/weights").json()["rows"][0]
    assert (row["weights"], row["bias"]) == (pa.w, pa.b)
    for x, y in data[80:]:  # the promoted learner goes on learning as the reference does
        got = client.post("/learn", json={"model": "p", "features": x, "label": y}).json()
        assert got["label"] == (1 if pa._score(pa.w, pa.b, x) > 0 else -1)
        for ref in (served, pa, refs["avg"]):
            ref.learn(x, y)
    row = client.get("/models/p/weights").json()["rows"][0]
    assert (row["weights"], row["bias"]) == (pa.w, pa.b)
    now = client.get("/models/p/challengers", params={"weights": "true"}).json()
    by_id = {c["id"]: c for c in now["challengers"]}
    assert by_id["perceptron"]["weights"] == {"w": [served.w], "b": [served.b]}
    assert by_id["perceptron"]["seen"] == served.seen == 120
    # its learning curve as a challenger starts where it was demoted, at its own count
    points = by_id["perceptron"]["curve"]["points"]
    assert (points[0]["examples"], points[-1]["examples"]) == (81, 120)
    assert points[-1]["mistakes"] == served.mistakes
    assert by_id["avg"]["curve"]["points"][-1] == {
        "examples": 120, "mistakes": refs["avg"].mistakes, "rate": refs["avg"].mistakes / 120
    }  # fmt: skip
    assert by_id["avg"]["weights"] == {"w": [refs["avg"].w], "b": [refs["avg"].b]}
    assert now["served"]["seen"] == 120 and now["labels"] == 120
    history = client.get("/models/p/checkpoints").json()["checkpoints"]
    assert [c["reason"] for c in history] == ["before promotion"]


def test_what_a_promotion_refuses(client: httpx.Client, redis_client: redis.Redis) -> None:
    client.put("/models/q", json={"classes": ["a", "b", "c"], "n_features": 2})
    code(client.post("/models/q/promote", json={"challenger": "x"}), 404, "challenger_not_found")
    client.put("/models/q/challengers/ovr", json={"multiclass": "ovr"})
    client.put("/models/q/challengers/two", json={"learning_rate": 0.5})
    code(client.post("/models/q/promote", json={"challenger": "ovr"}), 409, "promotion_layout")
    body = {"challenger": "two", "demote_as": "ovr"}
    code(client.post("/models/q/promote", json=body), 409, "challenger_exists")
    code(client.post("/models/q/promote", json={"challenger": "-x"}), 422, "invalid_challenger_id")
    code(client.post("/models/q/promote", json={}), 422, "invalid_promotion")
    code(client.post("/models/q/promote", json={"challenger": ["two"]}), 422, "invalid_promotion")
    code(client.post("/models/none/promote", json={"challenger": "two"}), 404, "model_not_found")
    too_long = {"challenger": "two", "demote_as": "d" * 65}  # (an id: 64 characters at most)
    code(client.post("/models/q/promote", json=too_long), 422, "invalid_challenger_id")
    empty = {"challenger": "two", "demote_as": ""}  # (it took the default id)
    code(client.post("/models/q/promote", json=empty), 422, "invalid_challenger_id")
    code(client.post("/models/q/promote", json={**empty, "demote_as": 5}), 422, "invalid_promotion")
    assert not redis_client.exists("pcp:{q}:hold")  # let go after every refusal
    r = client.post("/models/q/promote", json={"challenger": "two", "demote_as": "d" * 64})
    assert r.status_code == 200 and r.json()["demoted"] == "d" * 64, r.text
    assert client.get("/models/q").json()["config"]["learning_rate"] == 0.5


def test_a_dead_promotions_hold_lapses(client: httpx.Client, redis_client: redis.Redis) -> None:
    client.put("/models/h", json={"n_features": 2})
    client.put("/models/h/challengers/a", json={})
    redis_client.set("pcp:{h}:hold", PROMOTING, px=PROMOTE_HOLD_MS)
    start = time.monotonic()
    r = client.post("/learn", json={"model": "h", "features": [1, 2], "label": 1})
    assert r.status_code == 200, r.text
    assert time.monotonic() - start > PROMOTE_HOLD_MS / 1000 / 2
    assert client.get("/models/h/challengers").json()["challengers"][0]["seen"] == 1


def test_a_deleted_model_takes_the_predictions_made_before_its_promotion(
    client: httpx.Client, redis_client: redis.Redis
) -> None:
    client.put("/models/d", json={"n_features": 2})
    client.put("/models/d/challengers/a", json={"algorithm": "pa2"})
    for i in range(3):
        assert client.post("/predict", json={"model": "d", "features": [i, 1]}).is_success
    assert client.post("/models/d/promote", json={"challenger": "a"}).status_code == 200
    assert client.post("/predict", json={"model": "d", "features": [1, 1]}).is_success
    pending = keys_of("d").pending_match
    assert len(list(redis_client.scan_iter(match=pending))) == 4
    assert client.delete("/models/d").status_code == 204
    assert list(redis_client.scan_iter(match=pending)) == []


def test_promotions_within_their_predictions_life_are_bounded(
    make_service: MakeService, clock: WaitingClock
) -> None:
    """Each promotion keeps the predictions made before it labelable while they live: 64 such
    promotions at once, and a 65th is refused until the oldest have lapsed."""
    client = make_service()
    client.put("/models/n", json={"n_features": 2, "feedback_ttl_s": 5})
    client.put("/models/n/challengers/a", json={"learning_rate": 0.5})
    for i in range(PROMOTIONS_KEPT):
        r = client.post("/models/n/promote", json={"challenger": "a", "demote_as": "a"})
        assert r.status_code == 200, (i, r.text)
    r = client.post("/models/n/promote", json={"challenger": "a", "demote_as": "a"})
    code(r, 409, "too_many_promotions")
    clock.advance(6)  # (the model's predictions live 5 s: the oldest promotions' are gone)
    r = client.post("/models/n/promote", json={"challenger": "a", "demote_as": "a"})
    assert r.status_code == 200, r.text


def test_a_prediction_from_before_a_reset_is_not_its_own(client: httpx.Client) -> None:
    """(Without a promotion, a record of another epoch, kept, is unknown: 404, not an error.)"""
    client.put("/models/r", json={"n_features": 2})
    pid = client.post("/predict", json={"model": "r", "features": [1, 2]}).json()["prediction_id"]
    assert client.post("/models/r/reset").status_code == 200
    code(client.post("/feedback", json={"prediction_id": pid, "label": 1}), 404,
         "prediction_not_found")  # fmt: skip
