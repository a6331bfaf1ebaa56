"""Every learner stays finite at the edges of what the API accepts: zeros, the smallest and
largest magnitudes, one non-zero among thousands. Every weight and bias stays within
MAX_WEIGHT and every score is a number, on the learner core, on the path that replays logged
updates, and through the service (a PA-II model fed examples of zero norm once learned NaN)."""

from __future__ import annotations

import math
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.learner import ModelConfig
from service.learner.features import MAX_ABS_VALUE, Example
from service.learner.interface import MAX_WEIGHT
from service.learner.passive_aggressive import MAX_C, learner

# every learner and layout (and any added later joins here)
LEARNERS: list[dict[str, Any]] = [
    {},
    {"averaged": True},
    {"margin": 1e12, "learning_rate": 1e6},
    {"algorithm": "pa1", "C": MAX_C},
    {"algorithm": "pa2", "C": MAX_C},
    {"algorithm": "pa2", "C": 1e-6},
    {"algorithm": "pa2", "C": MAX_C, "fit_bias": False},
]
LAYOUTS: list[dict[str, Any]] = [
    {},
    {"classes": [0, 1, 2], "multiclass": "multiclass"},
    {"classes": [0, 1, 2], "multiclass": "ovr"},
    {"classes": [0, 1, 2, 3], "multiclass": "ovo"},
]
DIM = 2000
# The edges of a feature value: zero, the smallest subnormal, tiny, one, the largest accepted
EDGES = [0.0, 5e-324, 1e-300, 1e-160, 1e-8, 1.0, 1e8, MAX_ABS_VALUE]
value = st.sampled_from(EDGES).flatmap(lambda v: st.sampled_from([v, -v]))


@st.composite
def examples(draw: st.DrawFn) -> Example:
    """A dense example of DIM values: all zero, one non-zero among them, or a few edges."""
    kind = draw(st.sampled_from(["zeros", "one", "few"]))
    values = np.zeros(DIM)
    if kind == "one":
        values[draw(st.integers(0, DIM - 1))] = draw(value)
    elif kind == "few":
        for i in draw(st.lists(st.integers(0, DIM - 1), min_size=1, max_size=8)):
            values[i] = draw(value)
    return Example(values)


def finite(config: ModelConfig, weights: Any, x: Example) -> None:
    for a in (weights.w, weights.b, weights.wsum, weights.bsum):
        if a is not None:
            assert np.isfinite(a).all() and np.abs(a).max() <= MAX_WEIGHT
    assert np.isfinite(config.learner.served_scores(config, weights, x)).all()
    assert np.isfinite(config.learner.raw_scores(config, weights, x)).all()


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda d: d.get("multiclass", "binary"))
@pytest.mark.parametrize(
    "rule", LEARNERS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()) or "perceptron"
)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_update_of_every_learner_stays_finite(
    rule: dict[str, Any], layout: dict[str, Any], data: st.DataObject
) -> None:
    config = ModelConfig.from_dict({"n_features": DIM, **layout, **rule})
    online = learner(config)
    replayed = learner(config).weights
    stream = data.draw(
        st.lists(
            st.tuples(examples(), st.integers(0, config.n_classes - 1)), min_size=1, max_size=60
        )
    )
    for x, t in stream:
        raw = config.learner.raw_scores(config, online.weights, x).copy()
        online.learn(x.values.tolist(), config.classes[t])
        finite(config, online.weights, x)
        replayed.seen += 1
        config.learner.apply_logged(
            config, replayed, x, raw=raw, t=t, k=replayed.seen
        )  # (as every replica applies it)
        finite(config, replayed, x)


def test_pa2_on_examples_of_zero_norm_holds_its_bias_within_bound() -> None:
    """Alternating labels on zero vectors multiply a PA-II bias by 2C each time: the update that
    would pass MAX_WEIGHT is not made, and every later score is still a number."""
    config = ModelConfig(n_features=3, algorithm="pa2", C=MAX_C)
    online = learner(config)
    updated = []
    for i in range(200):
        updated.append(online.learn([0.0, 0.0, 0.0], config.classes[i % 2]).updated)
        assert math.isfinite(float(online.weights.b[0]))
    assert abs(online.weights.b[0]) <= MAX_WEIGHT and not all(updated[-10:])


@pytest.mark.in_process
def test_the_service_refuses_no_example_and_keeps_every_score_a_number(
    client: httpx.Client,
) -> None:
    spec = {"n_features": 3, "algorithm": "pa2", "C": MAX_C}
    assert client.put("/models/m", json=spec).status_code == 201
    client.put("/models/m/challengers/pa2", json={"C": MAX_C})
    zeros, tiny = [0.0, 0.0, 0.0], [5e-324, 0.0, -1e-300]
    for i in range(120):
        body = {"model": "m", "features": zeros if i % 3 else tiny, "label": [-1, 1][i % 2]}
        assert client.post("/learn", json=body).status_code == 200
        answer = client.post("/predict", json={"model": "m", "features": zeros}).json()
        fed = client.post(
            "/feedback", json={"prediction_id": answer["prediction_id"], "label": [1, -1][i % 2]}
        )
        assert fed.status_code == 200, fed.text
    for x in (zeros, tiny, [MAX_ABS_VALUE] * 3):
        score = client.post("/predict", json={"model": "m", "features": x}).json()["score"]
        assert isinstance(score, float) and math.isfinite(score)
    challenger = client.get("/models/m/challengers/pa2", params={"weights": "true"}).json()
    assert all(math.isfinite(b) and abs(b) <= MAX_WEIGHT for b in challenger["weights"]["b"])
    promoted = client.post("/models/m/promote", json={"challenger": "pa2"})
    assert promoted.status_code == 200, promoted.text
    client.delete(f"/models/m/challengers/{promoted.json()['demoted']}")
    exported = client.get("/models/m/export").json()
    assert client.post("/models/m/import", json=exported).status_code == 200
