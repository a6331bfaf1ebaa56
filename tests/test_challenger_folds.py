"""The writer folds a model's challengers forward from the labels it commits, without reading
them back from the store: what it reads of the labels' log while learning batch after batch is
at most the log of its first fold; and what it answers is what a worker that replays the whole
log answers."""

from __future__ import annotations

import random
from typing import Any

import fakeredis
import numpy as np
import pytest

from service.contract.store_values import LearnResult
from service.engine.standings import Standings
from service.learner import Example, ModelConfig
from service.learner.challenger import start_state
from service.store import Store
from service.store.ops import challenger_states

from .conftest import MakeService

pytestmark = pytest.mark.in_process

COMPACT_EVERY = 100
BATCHES, SIZE, DIM = 30, 100, 5


def _batch(rng: random.Random) -> dict[str, Any]:
    xs = [[rng.uniform(-1, 1) for _ in range(DIM)] for _ in range(SIZE)]
    ys = [1 if x[0] + 0.3 * x[1] > 0 else -1 for x in xs]
    return {"model": "m", "features": xs, "labels": ys}


def test_the_writer_folds_without_reading_its_labels_back(
    make_service: MakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[int] = []  # the entries of the labels' log each read returned

    def counting(op: Any) -> Any:
        async def counted(*args: Any) -> Any:
            data = await op(*args)
            read.append(0 if data is None else len(data.entries))
            return data

        return counted

    for op in ("read_challengers", "read_challengers_since"):
        monkeypatch.setattr(Store, op, counting(getattr(challenger_states, op)))
    writer = make_service(compact_every=COMPACT_EVERY, default_model=False)
    assert writer.put("/models/m", json={"n_features": DIM}).status_code == 201
    for id, body in (("pa", {"algorithm": "pa1", "C": 0.1}), ("avg", {"averaged": True})):
        assert writer.put(f"/models/m/challengers/{id}", json=body).status_code == 201
    rng = random.Random(7)
    for _ in range(BATCHES):
        assert writer.post("/learn/batch", json=_batch(rng)).status_code == 200
    assert read  # (folds read the standing first)
    assert sum(read) <= 2 * COMPACT_EVERY + SIZE, read  # (each fold read all: about 15,000)

    kept = writer.get("/models/m/challengers", params={"weights": "true"})
    fresh = make_service(compact_every=COMPACT_EVERY, default_model=False)
    replayed = fresh.get("/models/m/challengers", params={"weights": "true"})
    assert kept.status_code == replayed.status_code == 200
    assert kept.json() == replayed.json()
    assert kept.json()["labels"] == BATCHES * SIZE
    assert [c["seen"] for c in kept.json()["challengers"]] == [BATCHES * SIZE] * 2


def test_states_refused_after_labels_logged_elsewhere_then_labels_sent(
    make_service: MakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer commits its challengers' states while it knows where their labels' log ends;
    predictions labelled through another worker log labels meanwhile: its next states are
    refused and it sends the labels. Every challenger learns every label once, in order: its
    weights are a reference learner's, fed the same stream one example at a time."""
    refused: list[Any] = []
    written: list[Any] = []
    monkeypatch.setattr(Standings, "missed", counting(Standings.missed, refused))
    monkeypatch.setattr(Standings, "folded", counting(Standings.folded, written))
    writer = make_service(compact_every=COMPACT_EVERY, default_model=False)
    other = make_service(compact_every=COMPACT_EVERY, default_model=False)
    assert writer.put("/models/m", json={"n_features": DIM}).status_code == 201
    body: dict[str, Any] = {"algorithm": "pa1", "C": 0.1}
    assert writer.put("/models/m/challengers/pa", json=body).status_code == 201
    ref = start_state(ModelConfig(n_features=DIM, **body), None)
    rng = random.Random(11)
    batch = _batch(rng)
    for round in range(6):  # (labels through the other worker every second round)
        assert writer.get("/models/m/challengers").status_code == 200
        for x, y in list(zip(batch["features"], batch["labels"], strict=True))[: round % 2 * 3]:
            made = other.post("/predict", json={"model": "m", "features": x}).json()
            labelled = {"prediction_id": made["prediction_id"], "label": -y}
            assert other.post("/feedback", json=labelled).status_code == 200
            ref.learn(Example(np.array(x)), (-y + 1) // 2)
        batch = _batch(rng)
        learned = writer.post("/learn/batch", json=batch)
        assert learned.status_code == 200, learned.text
        for x, y in zip(batch["features"], batch["labels"], strict=True):
            ref.learn(Example(np.array(x)), (y + 1) // 2)
    for service in (writer, other, make_service(default_model=False)):
        got = service.get("/models/m/challengers", params={"weights": "true"}).json()
        (pa,) = got["challengers"]
        assert got["labels"] == pa["seen"] == ref.seen == 6 * SIZE + 9
        assert pa["mistakes"] == ref.mistakes
        assert pa["weights"]["w"] == ref.weights.w.tolist()
        assert pa["weights"]["b"] == ref.weights.b.tolist()
    assert refused and written


def counting(method: Any, calls: list[Any]) -> Any:
    def counted(*args: Any) -> Any:
        calls.append(args)
        return method(*args)

    return counted


def test_a_commits_labels_are_not_kept_for_challengers_nobody_keeps() -> None:
    """A worker keeps a commit's labels only for challengers it keeps, or is reading: a model
    whose challengers it never showed nor folded holds no example of it in memory."""
    standings = Standings(Store(fakeredis.FakeAsyncRedis(), embedded=True))
    xs = [Example(np.ones(DIM))] * SIZE
    done = LearnResult(1, SIZE, 0, label_log=SIZE, label_base=0, label_gen="1")
    standings.learned("e" * 16, done, ("m", (xs, [1] * SIZE, [0] * SIZE)))
    assert standings._waiting == {}
