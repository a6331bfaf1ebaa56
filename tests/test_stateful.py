"""A stateful, model-based test: random sequences of what users do, against the real service
(two worker processes, a real redis-server), compared after every step with a pure reference.

Hypothesis' ``RuleBasedStateMachine`` creates, deletes and makes anew models of other
configurations; predicts and sends feedback (one and batched, right, wrong, repeated,
conflicting, of an unknown label, for predictions that a delete, a reset or an import made
unknown); learns (one, a batch, a packed batch); exports, imports (an export as it is, into
its own or another name, and one tampered at and past every limit), resets; and runs two
operations at once. The reference is the learner core itself (``service/learner``), with no
store behind it: after every step the service's weights equal the reference's bit for bit,
and its counters, versions and list of models equal the reference's; every answer is a 2xx
or the documented 4xx with its code, never a 500, never a Redis left busy.

CI runs a bounded number of examples; for a soak, more (the seed makes a run repeatable):

    .venv/bin/pytest tests/test_stateful.py --hypothesis-seed=1 \\
        -o "addopts=" -p no:cacheprovider  # with STATEFUL_EXAMPLES=500 STATEFUL_STEPS=60

A failure it finds shrinks to a short sequence; keep it as a plain regression test
(``tests/test_fail_safe_round2.py`` holds the first ones).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from service import protocol
from service.learner import ModelConfig, Perceptron
from service.learner.codec import pack_weights
from service.learner.features import encode
from service.learner.perceptron import (
    apply,
    predict_index,
    raw_scores,
    served_scores,
    update_plan,
)

from .servers import ServiceProcess

pytestmark = pytest.mark.servers  # two worker processes and a redis-server

EXAMPLES = int(os.environ.get("STATEFUL_EXAMPLES", "100"))
STEPS = int(os.environ.get("STATEFUL_STEPS", "25"))

NAMES = ("a", "b")
# The configurations a name may be made with: dense and named features, two and three
# classes (one-vs-rest, one-vs-one, multiclass), a bias or none, averaged, a margin.
CONFIGS: list[dict[str, Any]] = [
    {"n_features": 2},
    {"n_features": 2, "classes": ["x", "y", "z"], "multiclass": "ovr", "averaged": True},
    {"n_features": 2, "classes": [0, 1, 2], "multiclass": "ovo", "fit_bias": False},
    {"classes": ["no", "yes"], "hash_bits": 3, "margin": 0.5},
    {"n_features": 2, "classes": ["x", "y", "z"], "learning_rate": 0.25},
]
COUNTERS = [c.name for c in protocol.COUNTERS]
# Every answer a step may get, by status: the documented codes, and never a 500
ALLOWED = {200, 201, 204, 404, 409, 422}

values = st.integers(-3, 3).map(float) | st.sampled_from([0.5, -1e-3, 1e3])


@dataclass
class Ref:
    """The reference of one model: the learner core and the service's counters."""

    config: ModelConfig
    learner: Perceptron
    generation: int
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    @classmethod
    def made(cls, params: dict[str, Any], generation: int) -> Ref:
        config = ModelConfig.from_dict(params)
        return cls(config, Perceptron(config), generation)

    def features(self, raw: list[float]) -> Any:
        if self.config.dense:
            return raw
        return {f"f{i}": v for i, v in enumerate(raw)}

    def learn(self, features: Any, t: int) -> tuple[bool, bool]:
        cfg, w = self.config, self.learner.weights
        x = encode(cfg, features)
        served = predict_index(cfg, served_scores(cfg, w, x))
        plan = update_plan(cfg, raw_scores(w, x), t)
        self.count(served != t, bool(plan))
        apply(cfg, w, x, plan, w.seen)
        return served != t, bool(plan)

    def count(self, mistake: bool, updated: bool) -> None:
        self.learner.weights.seen += 1
        self.counters["seen"] += 1
        self.counters["mistakes"] += mistake
        self.counters["updates"] += updated


@dataclass
class Pending:
    name: str
    generation: int
    features: Any
    raw: np.ndarray  # the scores the prediction was served with: its update is theirs
    served: int
    answer: tuple[int, dict[str, Any]] | None = None  # (class index, the answer) once labelled


class Service(RuleBasedStateMachine):
    predictions = Bundle("predictions")

    def __init__(self, http: httpx.Client) -> None:
        super().__init__()
        self.http = http
        self.models: dict[str, Ref] = {}
        self.pending: dict[str, Pending] = {}
        self.generations = itertools.count(1)
        for name in [m["name"] for m in self.call("GET", "/models").json()["models"]]:
            self.call("DELETE", f"/models/{name}")

    # -- talking to the service ------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        r = self.http.request(method, path, json=body, **kw)
        assert r.status_code in ALLOWED, (method, path, body, r.status_code, r.text)
        if r.status_code >= 400:
            assert r.json()["code"], r.text
        return r

    def expect(self, r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
        assert r.status_code == status, (status, code, r.status_code, r.text)
        body: dict[str, Any] = r.json() if status != 204 else {}
        if code is not None:
            assert body["code"] == code, body
        return body

    # -- models --------------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES), config=st.sampled_from(range(len(CONFIGS))))
    def create(self, name: str, config: int) -> None:
        params = CONFIGS[config]
        r = self.call("PUT", f"/models/{name}", params)
        ref = self.models.get(name)
        if ref is None:
            self.expect(r, 201)
            self.models[name] = Ref.made(params, next(self.generations))
        elif ref.config == ModelConfig.from_dict(params):
            self.expect(r, 200)
        else:
            self.expect(r, 409, "model_exists")

    @rule(name=st.sampled_from(NAMES))
    def delete(self, name: str) -> None:
        r = self.call("DELETE", f"/models/{name}")
        if self.models.pop(name, None) is None:
            self.expect(r, 404, "model_not_found")
        else:
            self.expect(r, 204)

    @rule(name=st.sampled_from(NAMES))
    def reset(self, name: str) -> None:
        r = self.call("POST", f"/models/{name}/reset")
        ref = self.models.get(name)
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return
        self.expect(r, 200)
        self.models[name] = Ref(ref.config, Perceptron(ref.config), next(self.generations))

    @rule(source=st.sampled_from(NAMES), into=st.sampled_from(NAMES))
    def export_then_import(self, source: str, into: str) -> None:
        """An export imported as it is, into its own name or another: an exact copy, and the
        target's pending predictions lapse; over a model of another configuration, 409."""
        r = self.call("GET", f"/models/{source}/export")
        ref = self.models.get(source)
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return
        doc = self.expect(r, 200)
        imported = self.call("POST", f"/models/{into}/import", doc)
        there = self.models.get(into)
        if there is not None and there.config != ref.config:
            self.expect(imported, 409, "model_exists")  # delete it first
            return
        self.expect(imported, 200)
        copy = Ref(ref.config, Perceptron(ref.config), next(self.generations))
        copy.learner.weights = ref.learner.weights.copy()
        copy.counters = dict(ref.counters)
        self.models[into] = copy

    @rule(
        name=st.sampled_from(NAMES),
        edit=st.sampled_from(
            [
                ("version", protocol.MAX_COUNT + 1),
                ("seen", protocol.MAX_COUNT + 1),
                ("seen", 2**53 - 1),
                ("weights", 1e251),
                ("weights", float("nan")),
                ("counters", -1),
                ("counters", protocol.MAX_COUNT + 1),
                ("mistakes", None),
            ]
        ),
    )
    def tampered_import(self, name: str, edit: tuple[str, float | None]) -> None:
        """An export edited past a limit is refused whole: nothing changes."""
        r = self.call("GET", f"/models/{name}/export")
        if name not in self.models:
            self.expect(r, 404, "model_not_found")
            return
        doc = self.expect(r, 200)
        what, value = edit
        if what in ("version", "seen"):
            doc[what] = value
        elif what == "weights":
            data = np.full(len(base64.b64decode(doc["weights"])) // 8, value).tobytes()
            doc["weights"] = base64.b64encode(data).decode()
            doc["sha256"] = hashlib.sha256(data).hexdigest()
        elif what == "counters":
            doc["counters"] = {**doc["counters"], "predictions": value}
        else:  # more mistakes than labelled examples
            doc["counters"] = {**doc["counters"], "mistakes": doc["seen"] + 1}
        self.expect(self.call("POST", f"/models/{name}/import", doc), 422, "invalid_import")

    # -- predict and feedback ------------------------------------------------------------------

    @rule(
        target=predictions, name=st.sampled_from(NAMES), x=st.lists(values, min_size=2, max_size=2)
    )
    def predict(self, name: str, x: list[float]) -> str:
        ref = self.models.get(name)
        features = ref.features(x) if ref else x
        r = self.call("POST", "/predict", {"model": name, "features": features})
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return f"{name}:{'0' * 22}"  # an id of no prediction
        answer = self.expect(r, 200)
        cfg, w = ref.config, ref.learner.weights
        encoded = encode(cfg, features)
        served = predict_index(cfg, served_scores(cfg, w, encoded))
        assert answer["label"] == cfg.classes[served], (answer, served)
        assert answer["version"] == ref.counters["updates"]
        ref.counters["predictions"] += 1
        pid: str = answer["prediction_id"]
        raw = raw_scores(w, encoded).copy()
        self.pending[pid] = Pending(name, ref.generation, features, raw, served)
        return pid

    def expected_feedback(self, pid: str, label: Any) -> tuple[int, str | None, dict[str, Any]]:
        """What the service must answer to a label for ``pid``, and the reference's change."""
        p = self.pending.get(pid)
        name = pid.split(":")[0]
        ref = self.models.get(name)
        if ref is None:
            return 404, "prediction_not_found", {}
        if p is None or p.generation != ref.generation:
            ref.counters["unknown_feedback"] += 1
            return 404, "prediction_not_found", {}
        t = ref.config.class_index(label)
        if t is None:
            return 422, "unknown_label", {}
        if p.answer is not None:
            given, first = p.answer
            if given != t:
                ref.counters["conflicts"] += 1
                return 409, "feedback_conflict", {}
            ref.counters["duplicates"] += 1
            return 200, None, {**first, "duplicate": True}
        cfg, w = ref.config, ref.learner.weights
        plan = update_plan(cfg, p.raw, t)
        ref.count(p.served != t, bool(plan))
        apply(cfg, w, encode(cfg, p.features), plan, w.seen)
        ref.counters["feedback"] += 1
        answer = {
            "mistake": p.served != t,
            "updated": bool(plan),
            "version": ref.counters["updates"],
            "duplicate": False,
        }
        p.answer = (t, answer)
        return 200, None, answer

    def a_label(self, pid: str, choice: int) -> Any:
        """A label for the prediction: one of its model's classes, or none of them."""
        ref = self.models.get(pid.split(":")[0])
        classes = list(ref.config.classes) if ref else [-1, 1]
        return [*classes, "not-a-class"][choice % (len(classes) + 1)]

    @rule(pid=predictions, choice=st.integers(0, 3))
    def feedback(self, pid: str, choice: int) -> None:
        label = self.a_label(pid, choice)
        r = self.call("POST", "/feedback", {"prediction_id": pid, "label": label})
        status, code, answer = self.expected_feedback(pid, label)
        got = self.expect(r, status, code)
        if status == 200:
            assert got == answer, (got, answer)

    @rule(pids=st.lists(predictions, min_size=1, max_size=4), choice=st.integers(0, 3))
    def feedback_batch(self, pids: list[str], choice: int) -> None:
        items = [
            {"prediction_id": p, "label": self.a_label(p, choice + i)} for i, p in enumerate(pids)
        ]
        r = self.call("POST", "/feedback/batch", {"feedback": items})
        results = self.expect(r, 200)["results"]
        for item, result in zip(items, results, strict=True):
            status, code, answer = self.expected_feedback(item["prediction_id"], item["label"])
            if status == 200:
                assert result["error"] is None and {k: result[k] for k in answer} == answer
            else:
                assert result["error"]["code"] == code, (item, result)

    # -- learn -------------------------------------------------------------------------------

    def learned(self, name: str, xs: list[list[float]], choices: list[int], packed: bool) -> None:
        ref = self.models.get(name)
        if ref is None:
            gone = {"model": name, "features": xs, "labels": [1] * len(xs)}
            self.expect(self.call("POST", "/learn/batch", gone), 404, "model_not_found")
            return
        classes = ref.config.classes
        labels = [classes[c % len(classes)] for c in choices]
        body: dict[str, Any] = {"model": name, "labels": labels}
        if packed and ref.config.dense:
            body["packed_features"] = base64.b64encode(np.array(xs, "<f8").tobytes()).decode()
        else:
            body["features"] = [ref.features(x) for x in xs]
        got = self.expect(self.call("POST", "/learn/batch", body), 200)
        outcomes = [
            ref.learn(ref.features(x), c % len(classes)) for x, c in zip(xs, choices, strict=True)
        ]
        ref.counters["learned"] += len(xs)
        assert got["mistakes"] == [m for m, _ in outcomes]
        assert got["updated"] == [u for _, u in outcomes]
        assert got["version"] == ref.counters["updates"]

    @rule(
        name=st.sampled_from(NAMES),
        xs=st.lists(st.lists(values, min_size=2, max_size=2), min_size=1, max_size=6),
        choices=st.lists(st.integers(0, 2), min_size=6, max_size=6),
        packed=st.booleans(),
    )
    def learn(self, name: str, xs: list[list[float]], choices: list[int], packed: bool) -> None:
        self.learned(name, xs, choices[: len(xs)], packed)

    @rule(
        x=st.lists(values, min_size=2, max_size=2),
        y=st.lists(values, min_size=2, max_size=2),
        choice=st.integers(0, 2),
    )
    def learn_on_both_at_once(self, x: list[float], y: list[float], choice: int) -> None:
        """Two operations at once, on two workers: each model's own learn, independent."""
        with ThreadPoolExecutor(2) as pool:
            jobs = [
                pool.submit(self.learned, n, [v], [choice], False)
                for n, v in zip(NAMES, (x, y), strict=True)
            ]
            for job in jobs:
                job.result()

    # -- after every step ------------------------------------------------------------------

    @invariant()
    def the_service_holds_what_the_reference_holds(self) -> None:
        listed = sorted(m["name"] for m in self.call("GET", "/models").json()["models"])
        assert listed == sorted(self.models)
        for name, ref in self.models.items():
            doc = self.expect(self.call("GET", f"/models/{name}/export"), 200)
            assert base64.b64decode(doc["weights"]) == pack_weights(ref.learner.weights), name
            assert (doc["version"], doc["seen"]) == (ref.counters["updates"], ref.counters["seen"])
            counters = self.expect(self.call("GET", f"/models/{name}"), 200)["counters"]
            assert counters == ref.counters, (name, counters, ref.counters)
            metrics = self.call("GET", f"/models/{name}/metrics")
            assert metrics.status_code == 200, metrics.text


@pytest.fixture(scope="module")
def service_url(redis_server: Any) -> Iterator[str]:
    service = ServiceProcess(redis_server.url, workers=2, PERCEPTRON_DEFAULT_MODEL="false").start()
    try:
        yield service.url
    finally:
        service.stop()


def test_random_sequences_of_what_users_do_match_the_reference(service_url: str) -> None:
    with httpx.Client(base_url=service_url, timeout=30) as http:

        class OnTheService(Service):
            def __init__(self) -> None:
                super().__init__(http)

        run_state_machine_as_test(
            OnTheService,
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
