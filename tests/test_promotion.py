"""Promotion on ``perceptron serve --workers 2`` and a redis-server: the promoted challenger
serves on every worker its weights exactly as the progressive-validation reference has them;
the learner that served stays as a challenger; labels that come during the switch, on both
workers, are each learned once; a promotion whose worker died holds the model no longer than
PROMOTE_HOLD_MS; what a promotion refuses, and the rollback that undoes it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from service.contract.store_protocol import PROMOTE_HOLD_MS, PROMOTING

from .servers import RedisServer, ServiceProcess
from .test_challengers import Reference, call, error, service_redis, standing, stream

pytestmark = pytest.mark.servers


@pytest.fixture(scope="module")
def service(redis_server: RedisServer) -> Iterator[ServiceProcess]:
    s = ServiceProcess(
        redis_server.url, workers=2, PERCEPTRON_DEFAULT_MODEL="false", PERCEPTRON_COMPACT_EVERY="40"
    ).start()
    yield s
    s.stop()


def feed(url: str, name: str, x: list[float], y: int) -> int:
    """Predict then feedback (each on either worker); the served label."""
    p = call(url, "POST", "/predict", json={"model": name, "features": x})
    assert p.status_code == 200, p.text
    f = call(
        url, "POST", "/feedback", json={"prediction_id": p.json()["prediction_id"], "label": y}
    )
    assert f.status_code == 200, f.text
    label: int = p.json()["label"]
    return label


def served_label(ref: Reference, x: list[float]) -> int:
    """The label ``ref`` predicts for ``x``, as the service serves it (averaged when it is)."""
    w, b = ref.w, ref.b
    if ref.averaged and ref.seen:
        n = ref.seen
        w = [wi - si / n for wi, si in zip(ref.w, ref.wsum, strict=True)]
        b = ref.b - ref.bsum / n
    return 1 if ref._score(w, b, x) > 0 else -1


def test_the_promoted_learner_serves_exactly_as_the_reference(service: ServiceProcess) -> None:
    url, name = service.url, "pr-exact"
    assert call(url, "PUT", f"/models/{name}", json={"n_features": 5}).status_code == 201
    data = stream(400, seed=11)
    served = Reference(5)
    for x, y in data[:30]:
        feed(url, name, x, y)
        served.learn(x, y)
    refs = {"avg": Reference(5, averaged=True), "pa": Reference(5, "pa1", c=0.1)}
    for id, body in (("avg", {"averaged": True}), ("pa", {"algorithm": "pa1", "C": 0.1})):
        assert call(url, "PUT", f"/models/{name}/challengers/{id}", json=body).status_code == 201
    for x, y in data[30:230]:
        assert feed(url, name, x, y) == served_label(served, x)
        for ref in (served, *refs.values()):
            ref.learn(x, y)
    straddling = call(url, "POST", "/predict", json={"model": name, "features": data[230][0]})
    r = call(url, "POST", f"/models/{name}/promote", json={"challenger": "avg"})
    assert r.status_code == 200, r.text
    done = r.json()
    assert done["promoted"] == "avg" and done["demoted"] == f"served-{done['checkpoint']}"
    assert done["config"]["averaged"] is True
    # the promoted learner serves, on both workers, its weights exactly as the reference's
    for x, _ in data[231:260]:
        for _ in range(2):
            p = call(url, "POST", "/predict", json={"model": name, "features": x}).json()
            assert p["label"] == served_label(refs["avg"], x)
    now = standing(url, name)
    assert now["served"]["config"]["averaged"] is True
    assert now["served"]["seen"] == refs["avg"].seen == 200
    assert now["served"]["mistakes"] == refs["avg"].mistakes
    assert now["served"]["updates"] == refs["avg"].updates
    weights = call(url, "GET", f"/models/{name}/weights").json()["rows"][0]
    assert weights["weights"] == refs["avg"].w and weights["bias"] == refs["avg"].b
    demoted = next(c for c in now["challengers"] if c["id"] == done["demoted"])
    assert demoted["seen"] == 230 and demoted["config"].get("averaged", False) is False
    assert demoted["weights"] == {"w": [served.w], "b": [served.b]}
    assert [c["id"] for c in now["challengers"]] == sorted([done["demoted"], "pa"])
    # the prediction made before the switch is labelled after it: counted once by every learner
    y = data[230][1]
    f = call(url, "POST", "/feedback", json={"prediction_id": straddling.json()["prediction_id"],
                                             "label": y})  # fmt: skip
    assert f.status_code == 200 and f.json()["duplicate"] is False, f.text
    for ref in (served, refs["pa"]):
        ref.learn(data[230][0], y)
    now = standing(url, name)
    assert now["labels"] == 231 and now["served"]["seen"] == 201
    by_id = {c["id"]: c for c in now["challengers"]}
    assert by_id["pa"]["seen"] == 201 and by_id["pa"]["mistakes"] == refs["pa"].mistakes
    assert by_id[done["demoted"]]["seen"] == 231
    assert by_id[done["demoted"]]["weights"] == {"w": [served.w], "b": [served.b]}


def test_labels_during_a_promotion_are_learned_once(service: ServiceProcess) -> None:
    url, name = service.url, "pr-busy"
    call(url, "PUT", f"/models/{name}", json={"n_features": 5})
    call(url, "PUT", f"/models/{name}/challengers/pa", json={"algorithm": "pa1"})
    call(url, "PUT", f"/models/{name}/challengers/p2", json={"algorithm": "pa2"})
    data = stream(600, seed=3)
    sent, failures = [0], []
    stop = threading.Event()

    def labels(part: list[tuple[list[float], int]], learn: bool) -> None:
        for x, y in part:
            if stop.is_set():
                return
            if learn:
                r = call(url, "POST", "/learn", json={"model": name, "features": x, "label": y})
                if r.status_code != 200:
                    failures.append(r.text)
            else:
                feed(url, name, x, y)
            sent[0] += 1

    threads = [threading.Thread(target=labels, args=(data[i::3], i == 0)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    for id, demote_as in (("pa", "was"), ("p2", "pa"), ("pa", "p2")):  # while labels come
        r = call(url, "POST", f"/models/{name}/promote", json={"challenger": id,
                                                              "demote_as": demote_as})  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["demoted"] == demote_as
        time.sleep(0.2)
    for t in threads:
        t.join()
    assert not failures
    now = standing(url, name)
    total = sent[0]
    assert total == len(data)
    # every label reached the challengers' log once, and each learner learned each once
    assert now["labels"] == total
    assert now["served"]["seen"] == total and now["served"]["config"]["algorithm"] == "pa1"
    assert {c["id"]: c["seen"] for c in now["challengers"]} == {"p2": total, "was": total}


def test_a_promotion_whose_worker_died_holds_the_model_no_longer(service: ServiceProcess) -> None:
    url, name = service.url, "pr-dead"
    call(url, "PUT", f"/models/{name}", json={"n_features": 2})
    call(url, "PUT", f"/models/{name}/challengers/a", json={})
    db = redis.Redis.from_url(service_redis(service))
    db.set(f"pcp:{{{name}}}:hold", PROMOTING, px=PROMOTE_HOLD_MS)  # as a promotion leaves it
    start = time.monotonic()
    r = call(url, "POST", "/learn", json={"model": name, "features": [1, 2], "label": 1})
    assert r.status_code == 200, r.text
    waited = time.monotonic() - start
    assert PROMOTE_HOLD_MS / 1000 * 0.5 < waited < PROMOTE_HOLD_MS / 1000 + 5
    db.set(f"pcp:{{{name}}}:hold", PROMOTING, px=PROMOTE_HOLD_MS)
    p = call(url, "POST", "/predict", json={"model": name, "features": [1, 2]}).json()
    f = call(url, "POST", "/feedback", json={"prediction_id": p["prediction_id"], "label": -1})
    assert f.status_code == 200, f.text
    assert standing(url, name)["challengers"][0]["seen"] == 2


def test_what_a_promotion_refuses_and_the_rollback_that_undoes_it(
    service: ServiceProcess,
) -> None:
    url, name = service.url, "pr-refuse"
    call(url, "PUT", f"/models/{name}", json={"classes": ["a", "b", "c"], "n_features": 2})
    promote = f"/models/{name}/promote"
    error(call(url, "POST", promote, json={"challenger": "x"}), 404, "challenger_not_found")
    call(url, "PUT", f"/models/{name}/challengers/ovr", json={"multiclass": "ovr"})
    call(url, "PUT", f"/models/{name}/challengers/pa", json={"algorithm": "pa2", "C": 0.5})
    call(url, "PUT", f"/models/{name}/challengers/taken", json={})
    for i in range(30):
        x, y = [float(i % 5), float(i % 3)], "abc"[i % 3]
        call(url, "POST", "/learn", json={"model": name, "features": x, "label": y})
    before = call(url, "GET", f"/models/{name}/weights").json()
    error(call(url, "POST", promote, json={"challenger": "ovr"}), 409, "promotion_layout")
    error(call(url, "POST", promote, json={"challenger": "pa", "demote_as": "taken"}), 409,
          "challenger_exists")  # fmt: skip
    error(call(url, "POST", promote, json={"challenger": "served"}), 422, "invalid_challenger_id")
    error(call(url, "POST", promote, json={"challenger": 1}), 422, "invalid_promotion")
    error(call(url, "POST", promote, json={"challenger": "pa", "x": 1}), 422, "invalid_promotion")
    error(call(url, "POST", promote, json=[]), 422, "validation_error")
    error(call(url, "POST", "/models/pr-none/promote", json={"challenger": "pa"}), 404,
          "model_not_found")  # fmt: skip
    assert call(url, "GET", f"/models/{name}/weights").json() == before  # nothing was done
    db = redis.Redis.from_url(service_redis(service))
    assert not db.exists(f"pcp:{{{name}}}:hold")  # (let go after each refusal)
    r = call(url, "POST", promote, json={"challenger": "pa"})
    assert r.status_code == 200, r.text
    assert call(url, "GET", f"/models/{name}").json()["config"]["algorithm"] == "pa2"
    # the checkpoint made first undoes it, once the challengers are gone
    undo = {"checkpoint": r.json()["checkpoint"]}
    error(call(url, "POST", f"/models/{name}/rollback", json=undo), 409, "model_has_challengers")
    for c in standing(url, name)["challengers"]:
        assert call(url, "DELETE", f"/models/{name}/challengers/{c['id']}").status_code == 204
    back = call(
        url, "POST", f"/models/{name}/rollback", json={"checkpoint": r.json()["checkpoint"]}
    )
    assert back.status_code == 200, back.text
    assert call(url, "GET", f"/models/{name}/weights").json()["rows"] == before["rows"]
    assert call(url, "GET", f"/models/{name}").json()["config"].get("algorithm", "perceptron") == (
        "perceptron"
    )
