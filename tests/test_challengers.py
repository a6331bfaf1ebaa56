"""Challengers on ``perceptron serve --workers 2`` and a redis-server: each learns every label
of its model (predict then feedback, /learn, JSON batches), exactly once and in order, counted
by progressive validation; the figures and weights every worker answers are those of an
independent reference (pure Python, below) fed the same labels; the limits of ids, settings
and counts at their edges; what a model with challengers refuses."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from .servers import RedisServer, ServiceProcess

pytestmark = pytest.mark.servers

COMPACT_EVERY = 40  # small: the labels' log is folded into the states many times


class Reference:
    """A binary learner, progressive validation: predict with the weights as they are, count,
    then learn. Perceptron (averaged or not) or PA-I, pure Python floats, terms summed in
    feature order."""

    def __init__(self, dim: int, algorithm: str = "perceptron", c: float = 1.0,
                 averaged: bool = False) -> None:  # fmt: skip
        self.algorithm, self.c, self.averaged = algorithm, c, averaged
        self.w, self.b = [0.0] * dim, 0.0
        self.wsum, self.bsum = [0.0] * dim, 0.0
        self.seen = self.mistakes = self.updates = 0
        self.marks: list[int] = []

    def _score(self, w: list[float], b: float, x: list[float]) -> float:
        s = 0.0
        for wi, xi in zip(w, x, strict=True):
            s += wi * xi
        return s + b

    def learn(self, x: list[float], y: int) -> None:
        raw = self._score(self.w, self.b, x)
        shown = raw
        if self.averaged and self.seen:
            n = self.seen
            mean = [wi - si / n for wi, si in zip(self.w, self.wsum, strict=True)]
            shown = self._score(mean, self.b - self.bsum / n, x)
        wrong = (1 if shown > 0 else -1) != y
        self.mistakes += wrong
        self.marks.append(int(wrong))
        self.seen += 1
        coef = 0.0
        if self.algorithm == "perceptron":
            coef = float(y) if y * raw <= 0 else 0.0
        else:
            loss = 1.0 - y * raw
            sq = 0.0
            for xi in x:
                sq += xi * xi
            if loss > 0 and sq > 0:
                coef = min(self.c, loss / sq) * y
        if coef == 0.0:
            return
        self.updates += 1
        age = float(self.seen - 1)
        for i, xi in enumerate(x):
            delta = coef * xi
            self.w[i] += delta
            if self.averaged:
                self.wsum[i] += age * delta
        self.b += coef
        if self.averaged:
            self.bsum += age * coef

    def figures(self) -> dict[str, Any]:
        def rate(m: list[int]) -> float | None:
            return sum(m) / len(m) if m else None

        return {
            "seen": self.seen,
            "mistakes": self.mistakes,
            "updates": self.updates,
            "mistake_rate": {
                "all": rate(self.marks),
                "last_100": rate(self.marks[-100:]),
                "last_1000": rate(self.marks[-1000:]),
            },
            "weights": {"w": [self.w], "b": [self.b]},
        }


def stream(n: int, seed: int) -> list[tuple[list[float], int]]:
    """Small integer features, a noisy linear label: every perceptron sum is exact."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = [float(rng.randint(-3, 3)) for _ in range(5)]
        y = 1 if 2 * x[0] - x[1] + x[3] + rng.choice([-2, 0, 0, 2]) > 0 else -1
        out.append((x, y))
    return out


@pytest.fixture(scope="module")
def service(redis_server: RedisServer) -> Iterator[ServiceProcess]:
    s = ServiceProcess(
        redis_server.url,
        workers=2,
        PERCEPTRON_DEFAULT_MODEL="false",
        PERCEPTRON_COMPACT_EVERY=str(COMPACT_EVERY),
    ).start()
    yield s
    s.stop()


def call(url: str, method: str, path: str, **kw: Any) -> httpx.Response:
    """One request on a connection of its own: either worker may answer it."""
    with httpx.Client(base_url=url, timeout=30) as c:
        return c.request(method, path, **kw)


def standing(url: str, name: str) -> dict[str, Any]:
    """GET .../challengers four times, each on a new connection: every answer the same."""
    answers = [
        call(url, "GET", f"/models/{name}/challengers", params={"weights": "true"})
        for _ in range(4)
    ]
    assert all(a.status_code == 200 for a in answers), answers[0].text
    first: dict[str, Any] = answers[0].json()
    assert all(a.json() == first for a in answers[1:])
    return first


def check(url: str, name: str, refs: dict[str, Reference]) -> dict[str, Any]:
    got = standing(url, name)
    assert [c["id"] for c in got["challengers"]] == sorted(refs)
    for c in got["challengers"]:
        want = refs[c["id"]].figures()
        assert {k: c[k] for k in want} == want, c["id"]
    return got


def test_challengers_learn_every_label_as_the_reference_does(service: ServiceProcess) -> None:
    url, name = service.url, "ch-pv"
    assert call(url, "PUT", f"/models/{name}", json={"n_features": 5}).status_code == 201
    data = stream(360, seed=7)
    for x, y in data[:20]:  # both workers load the model before it has challengers
        assert call(url, "POST", "/learn", json={"model": name, "features": x, "label": y})
    refs = {"avg": Reference(5, averaged=True), "pa": Reference(5, "pa1", c=0.1)}
    for id, body in (("avg", {"averaged": True}), ("pa", {"algorithm": "pa1", "C": 0.1})):
        r = call(url, "PUT", f"/models/{name}/challengers/{id}", json=body)
        assert r.status_code == 201, r.text
        assert r.json()["since"] == 20 and r.json()["seen"] == 0
    served_mistakes = 0
    for x, y in data[20:220]:  # predict, then feedback, each on either worker
        p = call(url, "POST", "/predict", json={"model": name, "features": x}).json()
        served_mistakes += p["label"] != y
        f = call(url, "POST", "/feedback", json={"prediction_id": p["prediction_id"], "label": y})
        assert f.status_code == 200, f.text
        for ref in refs.values():
            ref.learn(x, y)
    got = check(url, name, refs)
    assert got["labels"] == 220
    assert got["served"]["seen"] == 220
    # a challenger from the served weights as they are now, then /learn and batches teach all
    served = call(url, "GET", f"/models/{name}/weights").json()
    late = Reference(5)
    late.w, late.b = list(served["rows"][0]["weights"]), served["rows"][0]["bias"]
    refs["late"] = late
    r = call(url, "PUT", f"/models/{name}/challengers/late", json={"from": "served"})
    assert r.status_code == 201 and r.json()["since"] == 220
    for x, y in data[220:260]:
        assert call(url, "POST", "/learn", json={"model": name, "features": x, "label": y})
        for ref in refs.values():
            ref.learn(x, y)
    for at in range(260, 360, 25):
        chunk = data[at : at + 25]
        batch = {"model": name, "features": [x for x, _ in chunk], "labels": [y for _, y in chunk]}
        assert call(url, "POST", "/learn/batch", json=batch).status_code == 200
        for x, y in chunk:
            for ref in refs.values():
                ref.learn(x, y)
    got = check(url, name, refs)
    assert got["labels"] == 360 and got["served"]["seen"] == 360
    assert served_mistakes <= got["served"]["mistakes"]
    # /metrics: each challenger's figures, labelled with its id
    text = call(url, "GET", "/metrics").text
    for id, ref in refs.items():
        where = f'learner="{id}",model="{name}"'
        assert f"perceptron_challenger_mistakes_total{{{where}}} {float(ref.mistakes)}" in text
        assert f"perceptron_challenger_seen_total{{{where}}} {float(ref.seen)}" in text
        assert f"perceptron_challenger_updates_total{{{where}}} {float(ref.updates)}" in text
        rate = ref.figures()["mistake_rate"]["last_100"]
        assert f'perceptron_challenger_mistake_rate{{{where},window="100"}} {rate}' in text
    # the log was folded into the states on the way (it never holds COMPACT_EVERY long)
    db = redis.Redis.from_url(service_redis(service))
    assert db.llen(f"pcp:{{{name}}}:clog") < COMPACT_EVERY + 25
    assert int(db.hget(f"pcp:{{{name}}}:meta", "cbase") or 0) > 20


def service_redis(service: ServiceProcess) -> str:
    url = service.env.get("PERCEPTRON_REDIS_URL")
    assert url
    return url


def test_a_model_without_challengers_logs_no_labels(service: ServiceProcess) -> None:
    url, name = service.url, "ch-none"
    call(url, "PUT", f"/models/{name}", json={"n_features": 2})
    assert call(url, "PUT", f"/models/{name}/challengers/a", json={}).status_code == 201
    assert call(url, "DELETE", f"/models/{name}/challengers/a").status_code == 204
    for i in range(5):
        p = call(url, "POST", "/predict", json={"model": name, "features": [i, 1]}).json()
        call(url, "POST", "/feedback", json={"prediction_id": p["prediction_id"], "label": 1})
        call(url, "POST", "/learn", json={"model": name, "features": [1, i], "label": -1})
    r = redis.Redis.from_url(service_redis(service))
    assert not r.exists(f"pcp:{{{name}}}:clog", f"pcp:{{{name}}}:chal", f"pcp:{{{name}}}:cstate")
    got = standing(url, name)
    assert got["challengers"] == [] and got["served"]["seen"] == 10


def error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["code"] == code, r.text


def test_limits_at_their_edges(service: ServiceProcess) -> None:
    url, name = service.url, "ch-limits"
    call(url, "PUT", f"/models/{name}", json={"classes": ["a", "b", "c", "d"], "n_features": 2})
    put = f"/models/{name}/challengers/"
    assert call(url, "PUT", put + "a" * 64, json={}).status_code == 201
    error(call(url, "PUT", put + "b" * 65, json={}), 422, "invalid_challenger_id")
    error(call(url, "PUT", put + "served", json={}), 422, "invalid_challenger_id")
    error(call(url, "PUT", put + "-x", json={}), 422, "invalid_challenger_id")
    error(call(url, "PUT", put + "a" * 64, json={}), 409, "challenger_exists")
    error(call(url, "PUT", put + "x", json={"classes": [1, 2]}), 422, "invalid_challenger")
    error(call(url, "PUT", put + "x", json={"from": "other"}), 422, "invalid_challenger")
    error(call(url, "PUT", put + "x", json=[1]), 422, "validation_error")
    error(call(url, "PUT", put + "x", json={"algorithm": "pa1", "C": 0}), 422, "invalid_config")
    error(call(url, "PUT", put + "x", json={"algorithm": "pa1", "averaged": True}), 422,
          "invalid_config")  # fmt: skip
    error(call(url, "PUT", put + "x", json={"C": 2.0}), 422, "invalid_config")
    ovo = {"multiclass": "ovo", "from": "served"}  # 6 rows; the served model has 4
    error(call(url, "PUT", put + "x", json=ovo), 422, "invalid_challenger")
    for i in range(7):  # 8 in all: as many as a model may have
        assert call(url, "PUT", put + f"c{i}", json={"multiclass": "ovr"}).status_code == 201
    error(call(url, "PUT", put + "c8", json={}), 409, "too_many_challengers")
    assert len(standing(url, name)["challengers"]) == 8
    error(call(url, "DELETE", put + "nope"), 404, "challenger_not_found")
    error(call(url, "GET", "/models/ch-missing/challengers"), 404, "model_not_found")
    error(call(url, "PUT", "/models/ch-missing/challengers/a", json={}), 404, "model_not_found")


def test_what_a_model_with_challengers_refuses(service: ServiceProcess) -> None:
    url, name = service.url, "ch-refuse"
    call(url, "PUT", f"/models/{name}", json={"n_features": 2})
    for i in range(3):
        call(url, "POST", "/learn", json={"model": name, "features": [1, i], "label": -1})
    exported = call(url, "GET", f"/models/{name}/export").json()
    call(url, "PUT", f"/models/{name}/challengers/a", json={})
    error(call(url, "POST", f"/models/{name}/reset"), 409, "model_has_challengers")
    error(call(url, "POST", f"/models/{name}/import", json=exported), 409, "model_has_challengers")
    error(call(url, "POST", f"/models/{name}/rollback", json={"version": 0}), 409,
          "model_has_challengers")  # fmt: skip
    assert call(url, "GET", f"/models/{name}").json()["version"] > 0  # nothing was done
    r = redis.Redis.from_url(service_redis(service))
    assert r.exists(f"pcp:{{{name}}}:chal")
    assert call(url, "DELETE", f"/models/{name}").status_code == 204
    gone = ("meta", "chal", "cstate", "clog", "log", "snap")
    assert not r.exists(*(f"pcp:{{{name}}}:{k}" for k in gone))
