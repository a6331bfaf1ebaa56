"""Passive-aggressive models' configuration, refused at every limit's edge and one past it;
what a perceptron's stores and exports (as before, byte for byte); export and import; undo."""

from __future__ import annotations

import base64
import math
from typing import Any

import httpx
import numpy as np
import pytest

from service.learner import ModelConfig
from service.learner.features import encode
from service.learner.passive_aggressive import learner

from .conftest import MakeService
from .inprocess import Clock

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

# ---------------------------------------------------------------------------------------------
# The configuration: what a PA model takes, at each limit's edge and one past it.
# ---------------------------------------------------------------------------------------------

ABOVE_MAX = math.nextafter(1e6, math.inf)
TAKEN: list[dict[str, Any]] = [
    {"algorithm": "pa1"},  # C defaults to 1.0
    {"algorithm": "pa2", "C": 1e6},  # the largest
    {"algorithm": "pa1", "C": 5e-324},  # the smallest positive double
    {"algorithm": "pa2", "C": 3},  # a whole number, kept as the float it is
    {"algorithm": "pa1", "learning_rate": 1.0, "margin": 0.0, "averaged": False},  # defaults
    {"algorithm": "perceptron", "C": 1.0},  # a perceptron's C left at its default
]
REFUSED: list[tuple[bytes, str, str]] = [
    (b'{"algorithm": "pa1", "C": 0}', "invalid_config", "'C' parameter must be a float in"),
    (b'{"algorithm": "pa1", "C": -0.0}', "invalid_config", "'C'"),
    (b'{"algorithm": "pa2", "C": -1}', "invalid_config", "'C'"),
    (b'{"algorithm": "pa2", "C": %r}' % ABOVE_MAX, "invalid_config", "(0, 1e6]"),
    (b'{"algorithm": "pa2", "C": 1e309}', "validation_error", "'C'"),
    (b'{"algorithm": "pa2", "C": NaN}', "validation_error", "'C'"),
    (b'{"algorithm": "pa1", "C": Infinity}', "validation_error", "'C'"),
    (b'{"algorithm": "pa1", "C": true}', "validation_error", "'C'"),
    (b'{"algorithm": "pa1", "C": "1"}', "validation_error", "'C'"),
    (b'{"algorithm": "pa1", "C": null}', "validation_error", "'C'"),
    (b'{"algorithm": "PA1"}', "validation_error", "'algorithm'"),
    (b'{"algorithm": "pa3"}', "validation_error", "'algorithm'"),
    (b'{"algorithm": "pa1", "learning_rate": 0.5}', "invalid_config", "not used by 'pa1'"),
    (b'{"algorithm": "pa2", "margin": 5e-324}', "invalid_config", "'margin' parameter is not"),
    (b'{"algorithm": "pa1", "averaged": true}', "invalid_config", "'averaged' parameter is not"),
    (b'{"C": 0.5}', "invalid_config", "not used by 'perceptron'"),
    (b'{"algorithm": "perceptron", "C": 2}', "invalid_config", "'C'"),
]


@pytest.mark.parametrize("params", TAKEN, ids=[str(p) for p in TAKEN])
def test_a_pa_configuration_at_each_limit_is_taken(
    client: httpx.Client, params: dict[str, Any]
) -> None:
    r = client.put("/models/edge", json={"n_features": 2, **params})
    assert r.status_code == 201, r.text
    config = r.json()["config"]
    assert config["algorithm"] == params["algorithm"]
    assert config.get("C", 1.0) == float(params.get("C", 1.0))  # (a perceptron's names none)
    assert client.put("/models/edge", json={"n_features": 2, **params}).status_code == 200


@pytest.mark.parametrize(("body", "code", "said"), REFUSED, ids=[b.decode() for b, *_ in REFUSED])
def test_a_pa_configuration_past_a_limit_is_refused(
    client: httpx.Client, body: bytes, code: str, said: str
) -> None:
    r = client.put("/models/edge", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["code"] == code
    assert said in r.json()["detail"]
    assert client.get("/models/edge").status_code == 404


def test_a_perceptrons_stored_configuration_and_export_name_no_rule(
    client: httpx.Client, redis_client: Any
) -> None:
    """What a perceptron model stores and exports is what it was before the rule was a
    setting, byte for byte; a PA model's names it, and an import of it is that model."""
    client.put("/models/p", json={"classes": [0, 1], "n_features": 3})
    stored = redis_client.hget("pcp:{p}:meta", "cfg")
    assert stored == (
        b'{"classes": [0, 1], "multiclass": "multiclass", "n_features": 3, "hash_bits": 18, '
        b'"fit_bias": true, "learning_rate": 1.0, "margin": 0.0, "averaged": false, '
        b'"feedback_ttl_s": 86400, "default_label": null}'
    )
    exported = client.get("/models/p/export").json()["config"]
    assert "algorithm" not in exported and "C" not in exported
    client.put("/models/q", json={"n_features": 3, "algorithm": "pa2", "C": 0.25})
    exported = client.get("/models/q/export").json()["config"]
    assert (exported["algorithm"], exported["C"]) == ("pa2", 0.25)
    doc = client.get("/models/q/export").json()
    doc["config"]["learning_rate"] = 0.5  # a PA model takes none: refused on import too
    r = client.post("/models/r/import", json=doc)
    assert r.status_code == 422 and "not used by 'pa2'" in r.text, r.text


# ---------------------------------------------------------------------------------------------
# Export and import, and undo: PA updates replayed exactly.
# ---------------------------------------------------------------------------------------------

SPEC: dict[str, Any] = {
    "classes": ["a", "b", "c"],
    "multiclass": "ovr",
    "hash_bits": 5,
    "algorithm": "pa1",
    "C": 0.4,
}


def stream(seed: int, n: int) -> list[tuple[dict[str, float], str]]:
    rng = np.random.default_rng(seed)
    return [
        (
            {f"f{j}": round(float(rng.normal()), 3) for j in rng.choice(9, 3, replace=False)},
            str(rng.choice(SPEC["classes"])),
        )
        for _ in range(n)
    ]


def packed(w: np.ndarray, b: np.ndarray) -> str:
    return base64.b64encode(w.tobytes() + b.tobytes()).decode()


def test_an_export_imported_learns_on_as_the_model_and_the_core_do(client: httpx.Client) -> None:
    config = ModelConfig.from_dict(SPEC)
    core = learner(config)
    assert client.put("/models/m", json=SPEC).status_code == 201
    first, then = stream(3, 60), stream(4, 40)
    for x, y in first:
        assert client.post("/learn", json={"model": "m", "features": x, "label": y}).is_success
        core.learn(x, y)
    doc = client.get("/models/m/export").json()
    assert doc["weights"] == packed(core.weights.w, core.weights.b)
    assert client.post("/models/n/import", json=doc).status_code == 200
    assert client.get("/models/n").json()["config"]["algorithm"] == "pa1"
    for x, y in then:
        a = client.post("/learn", json={"model": "m", "features": x, "label": y}).json()
        b = client.post("/learn", json={"model": "n", "features": x, "label": y}).json()
        outcome = core.learn(x, y)
        assert (a["mistake"], a["updated"]) == (b["mistake"], b["updated"])
        assert (a["mistake"], a["updated"]) == (outcome.mistake, outcome.updated)
    want = packed(core.weights.w, core.weights.b)
    assert client.get("/models/m/export").json()["weights"] == want
    assert client.get("/models/n/export").json()["weights"] == want


KEYS = {"alice": "a" * 24, "bob": "b" * 24}  # alice trains, bob is an admin
ADMIN = {"authorization": f"Bearer {KEYS['bob']}"}


def test_an_undo_replays_the_pa_updates_that_stay_with_their_own_steps(
    make_service: MakeService, clock: Clock
) -> None:
    """Undoing alice's updates rebuilds the model from bob's alone, each with the step it was
    decided with (from the scores it logged), as a rollback does."""
    entries = f"alice=train:{KEYS['alice']},bob=admin:{KEYS['bob']}"
    client = make_service(
        default_model=False, compact_every=7, checkpoint_every=20, auth=True, api_keys=entries
    )
    assert client.put("/models/m", json=SPEC, headers=ADMIN).status_code == 201
    config = ModelConfig.from_dict(SPEC)
    core = learner(config)
    made: list[tuple[str, Any]] = []  # who, and the update as logged: (x, raw scores, t)
    for i, (features, y) in enumerate(stream(5, 80)):
        who = ("alice", "bob")[i % 3 == 0]
        h = {"authorization": f"Bearer {KEYS[who]}"}
        body = {"model": "m", "features": features, "label": y}
        r = client.post("/learn", json=body, headers=h)
        assert r.status_code == 200, r.text
        x = encode(config, features)
        raw = core.scores(x).copy()
        t = config.class_index(y)
        assert t is not None
        if core.learn(features, y).updated:
            made.append((who, (x, raw, t)))
        clock.advance(1)
    bobs = [u for who, u in made if who == "bob"]
    assert 0 < len(bobs) < len(made)
    r = client.post("/models/m/undo", json={"source": "alice"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["removed"] == len(made) - len(bobs)
    rebuilt = learner(config).weights
    learner_of = config.learner
    for x, raw, t in bobs:
        plan = learner_of.update_plan(config, raw, t, x, rebuilt)
        if plan:
            learner_of.apply(config, rebuilt, x, plan, 0)
    got = client.get("/models/m/export", headers=ADMIN).json()["weights"]
    assert got == packed(rebuilt.w, rebuilt.b)
    # Re-learning bob's examples instead would not give these weights: the steps depend on
    # the scores, which alice's updates had moved.
    relearned = learner(config).weights
    for x, _, t in bobs:
        raw = learner_of.raw_scores(config, relearned, x)
        plan = learner_of.update_plan(config, raw, t, x, relearned)
        if plan:
            learner_of.apply(config, relearned, x, plan, 0)
    assert packed(relearned.w, relearned.b) != got


def test_a_pa_models_mistake_bound_says_the_perceptrons_does_not_apply(
    client: httpx.Client,
) -> None:
    """The dashboard's card shows the reason the metrics give: for a PA model, that R²/γ² is
    the perceptron's bound; a binary perceptron learning the same examples gets one."""
    for name, extra in (("pa", {"algorithm": "pa1"}), ("plain", {})):
        client.put(f"/models/{name}", json={"n_features": 2, **extra})
        for x, y in (([1.0, 2.0], 1), ([-1.0, -1.5], -1), ([2.0, 1.0], 1)):
            client.post("/learn", json={"model": name, "features": x, "label": y})
    bound = client.get("/models/pa/metrics").json()["mistake_bound"]
    assert bound["applies"] is False
    assert "R²/γ² is not a PA-I or PA-II model's" in bound["reason"]
    plain = client.get("/models/plain/metrics").json()["mistake_bound"]
    assert plain["applies"] is True and plain["bound"] is not None
