"""Model history: checkpoints, and rollback to any kept version or checkpoint, exact."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from service.protocol import Reason

from .conftest import MakeService

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

# Small enough that a few hundred updates make many compactions and checkpoints.
HISTORY = {"default_model": False, "compact_every": 7, "checkpoint_every": 20}
SPECS = {
    "binary": {"n_features": 4},
    "multiclass averaged, named": {"classes": ["a", "b", "c"], "averaged": True, "hash_bits": 6},
}


def examples(spec: dict[str, Any], rng: np.random.Generator, n: int) -> tuple[list[Any], list[Any]]:
    if "classes" in spec:
        xs = [
            {f"f{j}": float(rng.normal()) for j in rng.choice(12, 3, replace=False)}
            for _ in range(n)
        ]
        ys = [str(rng.choice(spec["classes"])) for _ in range(n)]
        return xs, ys
    xs = rng.normal(size=(n, 4)).round(3).tolist()
    ys = [int(rng.choice([-1, 1])) for _ in range(n)]
    return xs, ys


def learn_and_export(client: httpx.Client, spec: dict[str, Any], batches: int) -> dict[int, str]:
    """Learn in small batches; the exported weights at every version reached between two."""
    rng = np.random.default_rng(7)
    exports: dict[int, str] = {}
    for _ in range(batches):
        xs, ys = examples(spec, rng, int(rng.integers(1, 6)))
        r = client.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys})
        assert r.status_code == 200, r.text
        doc = client.get("/models/m/export").json()
        exports[doc["version"]] = doc["weights"]
    return exports


def rollback(client: httpx.Client, **body: int) -> dict[str, Any]:
    r = client.post("/models/m/rollback", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_rolling_back_restores_the_weights_an_export_had_at_that_version(
    make_service: MakeService, kind: str
) -> None:
    client = make_service(**HISTORY)
    spec = SPECS[kind]
    assert client.put("/models/m", json=spec).status_code == 201
    exports = learn_and_export(client, spec, 60)
    last = max(exports)
    listed = client.get("/models/m/checkpoints").json()
    assert listed["version"] == last
    assert listed["restorable_from"] == 0  # every version since the model was made is kept
    reasons = {c["reason"] for c in listed["checkpoints"]}
    assert reasons == {Reason.START, Reason.SCHEDULED}
    # Newest first, then older ones: the updates before a version rolled back to stay kept.
    targets = sorted(exports)
    picks = [targets[len(targets) * 3 // 4], targets[len(targets) // 2], targets[1], targets[0]]
    befores = []
    for v in picks:
        answer = rollback(client, version=v)
        assert answer["version"] == v
        befores.append(answer["before"])
        doc = client.get("/models/m/export").json()
        assert (doc["version"], doc["weights"]) == (v, exports[v])
    # The checkpoint made before the first rollback holds the model as it was.
    assert rollback(client, checkpoint=befores[0])["version"] == last
    doc = client.get("/models/m/export").json()
    assert (doc["version"], doc["weights"]) == (last, exports[last])


def test_after_a_rollback_the_model_learns_on_and_its_new_versions_can_be_restored(
    make_service: MakeService,
) -> None:
    client = make_service(**HISTORY)
    spec = SPECS["binary"]
    client.put("/models/m", json=spec)
    first = learn_and_export(client, spec, 30)
    v = sorted(first)[len(first) // 2]
    rollback(client, version=v)
    then = learn_and_export(client, spec, 30)  # other examples' updates, from version v on
    assert min(then) > v
    for w in (sorted(then)[3], v, sorted(first)[2]):
        rollback(client, version=w)
        expected = then.get(w, first.get(w))
        assert client.get("/models/m/export").json()["weights"] == expected


def test_reset_and_import_first_keep_the_model_as_a_checkpoint(make_service: MakeService) -> None:
    client = make_service(**HISTORY)
    spec = SPECS["binary"]
    client.put("/models/m", json=spec)
    exports = learn_and_export(client, spec, 10)
    before = client.get("/models/m/export").json()
    assert client.post("/models/m/reset").status_code == 200
    assert client.get("/models/m").json()["version"] == 0
    made = client.get("/models/m/checkpoints").json()["checkpoints"]
    kept = [c for c in made if c["reason"] == Reason.BEFORE_RESET]
    assert len(kept) == 1 and kept[0]["version"] == max(exports)
    assert rollback(client, checkpoint=kept[0]["id"])["version"] == max(exports)
    assert client.get("/models/m/export").json()["weights"] == before["weights"]
    assert client.post("/models/m/reset").status_code == 200
    assert client.post("/models/m/import", json=before).status_code == 200
    made = client.get("/models/m/checkpoints").json()["checkpoints"]
    assert [c["reason"] for c in made if c["reason"] == Reason.BEFORE_IMPORT] == [
        Reason.BEFORE_IMPORT
    ]


def test_what_cannot_be_rolled_back_to_is_refused_with_a_code(make_service: MakeService) -> None:
    client = make_service(**HISTORY)
    client.put("/models/m", json=SPECS["binary"])
    learn_and_export(client, SPECS["binary"], 5)
    version = client.get("/models/m").json()["version"]
    r = client.post("/models/m/rollback", json={"version": version + 1})
    assert r.status_code == 409 and r.json()["code"] == "version_not_kept"
    assert f"versions 0 to {version}" in r.json()["detail"]
    r = client.post("/models/m/rollback", json={"checkpoint": 999})
    assert r.status_code == 404 and r.json()["code"] == "checkpoint_not_found"
    for body in ({}, {"version": 1, "checkpoint": 1}, {"version": -1}, {"checkpoint": 0}):
        assert client.post("/models/m/rollback", json=body).status_code == 422, body
    assert client.post("/models/none/rollback", json={"version": 0}).status_code == 404
    assert client.get("/models/none/checkpoints").status_code == 404
    assert client.get("/models/m").json()["version"] == version  # nothing changed


def test_a_prediction_waiting_for_its_label_lapses_at_a_rollback(make_service: MakeService) -> None:
    client = make_service(**HISTORY)
    client.put("/models/m", json=SPECS["binary"])
    learn_and_export(client, SPECS["binary"], 5)
    pid = client.post("/predict", json={"model": "m", "features": [1, 2, 3, 4]}).json()
    rollback(client, version=1)
    r = client.post("/feedback", json={"prediction_id": pid["prediction_id"], "label": 1})
    assert r.status_code == 404
    assert client.get("/models/m").json()["version"] == 1
