"""Model history: checkpoints, and rollback to any kept version or checkpoint, exact."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perceptron_client import CheckpointInfo, Client, ConflictError
from service.admin.retention import rebuild
from service.cli.loopback import wait_until
from service.contract.names import KEY_NAME_RE
from service.contract.store_protocol import MAX_COUNT, RING_SIZE, Meta, Reason
from service.learner.codec import pack_weights
from service.settings import Settings
from service.store import ModelKeys
from service.store.ops.history import Restorable

from .conftest import MakeService
from .inprocess import Clock, InProcessService, reach
from .servers import ServiceProcess, running

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

# Small enough that a few hundred updates make many compactions and checkpoints.
HISTORY: dict[str, Any] = {"default_model": False, "compact_every": 7, "checkpoint_every": 20}
SPECS: dict[str, dict[str, Any]] = {
    "binary": {"n_features": 4},
    "multiclass averaged, named": {"classes": ["a", "b", "c"], "averaged": True, "hash_bits": 6},
    # PA: each update's step decided from the scores it logged, replayed so on a rollback
    "pa1 binary": {"n_features": 4, "algorithm": "pa1", "C": 0.3},
    "pa2 ovr, named": {
        "classes": ["a", "b", "c"],
        "multiclass": "ovr",
        "algorithm": "pa2",
        "hash_bits": 6,
    },
}


def examples(spec: dict[str, Any], rng: np.random.Generator, n: int) -> tuple[list[Any], list[Any]]:
    if "classes" in spec:
        xs = [
            {f"f{j}": float(rng.normal()) for j in rng.choice(12, 3, replace=False)}
            for _ in range(n)
        ]
        return xs, [str(rng.choice(spec["classes"])) for _ in range(n)]
    return rng.normal(size=(n, 4)).round(3).tolist(), [int(rng.choice([-1, 1])) for _ in range(n)]


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
        assert answer["version"] == v and answer["restored_checkpoint"] is None
        assert (answer["checkpoint"], answer["before"]) == (None, answer["undo_checkpoint"])
        befores.append(answer["undo_checkpoint"])
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


@pytest.mark.parametrize(
    "spec",
    [SPECS["multiclass averaged, named"], {"n_features": 4, "averaged": True}, SPECS["binary"]],
)
def test_a_checkpoint_of_an_earlier_version_holds_the_count_the_model_had_then(
    make_service: MakeService, spec: dict[str, Any]
) -> None:
    """The checkpoints a compaction makes (the retained log's "start", and the scheduled ones)
    may be of a version before the model's own: each says the labelled examples an averaged
    model had at it (and their mistakes only where it knows them), and the model rolled back
    to one, then given the examples that came after it, learns exactly as it did (its mean
    divides by that count). They said the model's count when they were made."""
    client = make_service(**HISTORY)
    assert client.put("/models/m", json=spec).status_code == 201
    xs, ys = examples(spec, np.random.default_rng(3), 160)
    at_seen: list[tuple[int, str]] = [(0, client.get("/models/m/export").json()["weights"])]
    mistakes = []
    for x, y in zip(xs, ys, strict=True):
        r = client.post("/learn", json={"model": "m", "features": x, "label": y})
        mistakes.append(r.json()["mistake"])
        doc = client.get("/models/m/export").json()
        at_seen.append((doc["version"], doc["weights"]))
    assert rollback(client, version=at_seen[-40][0])["version"] == at_seen[-40][0]
    listed = client.get("/models/m/checkpoints").json()["checkpoints"]
    earlier = [c for c in listed if c["reason"] in (Reason.START, Reason.SCHEDULED)]
    assert {c["reason"] for c in earlier} == {Reason.START, Reason.SCHEDULED}
    assert any(c["window"] == 0 for c in earlier)  # (one of a version before the model's)
    if not spec.get("averaged"):  # (no count kept of an earlier version: no mistakes known)
        assert all(c["mistake_rate"] is None for c in earlier if c["reason"] == Reason.START)
        return
    for c in earlier:
        assert at_seen[c["seen"]][0] == c["version"], c  # the model was at it then
        if c["window"]:  # (made at the model's own version: its last outcomes then)
            n = c["seen"]
            assert c["window"] == n and c["mistake_rate"] == np.mean(mistakes[:n]), c
        else:
            assert c["mistake_rate"] is None, c
    for c in sorted(earlier, key=lambda c: c["seen"])[-2:]:
        rollback(client, checkpoint=c["id"])
        n = c["seen"]
        for x, y in zip(xs[n : n + 12], ys[n : n + 12], strict=True):
            assert client.post("/learn", json={"model": "m", "features": x, "label": y}).is_success
        assert client.get("/models/m/export").json()["weights"] == at_seen[n + 12][1], c


def test_after_two_rollbacks_every_version_kept_restores_its_own_weights(
    make_service: MakeService,
) -> None:
    """The checkpoint the second of two rollbacks makes first is of the line it leaves (at a
    version the new line reaches again, with other weights): the retained log never starts
    from it. It did, once the policy moved its start up, and every version after restored the
    new line's updates on the old line's weights; or the oldest version kept passed the
    model's own."""
    client = make_service(
        **{**HISTORY, "compact_every": 5, "checkpoint_every": 10, "history_keep_updates": 10}
    )
    assert client.put("/models/m", json={"n_features": 4}).status_code == 201
    rng = np.random.default_rng(11)

    def learn(n: int) -> dict[int, str]:
        at: dict[int, str] = {}
        for _ in range(n):
            x, y = rng.normal(size=4).round(3).tolist(), int(rng.choice([-1, 1]))
            assert client.post("/learn", json={"model": "m", "features": x, "label": y}).is_success
            doc = client.get("/models/m/export").json()
            at.setdefault(doc["version"], doc["weights"])
        return at

    first = learn(40)
    v = max(first)
    for back in (v - 1, v - 2):
        rollback(client, version=back)
    listed = client.get("/models/m/checkpoints").json()
    assert listed["restorable_from"] <= listed["version"] == back
    weights = {**{k: w for k, w in first.items() if k <= back}, **learn(40)}
    listed = client.get("/models/m/checkpoints").json()
    while listed["version"] > listed["restorable_from"]:  # each version back, while kept
        version = listed["version"] - 1
        assert rollback(client, version=version)["version"] == version
        assert client.get("/models/m/export").json()["weights"] == weights[version], version
        listed = client.get("/models/m/checkpoints").json()
        assert listed["restorable_from"] <= listed["version"] == version


def test_no_weights_the_store_keeps_ever_expire(
    make_service: MakeService, redis_client: redis.Redis
) -> None:
    """Weights are staged in a key that expires (should the writer die before its script
    runs), then renamed into place: the snapshot and every checkpoint's weights are kept for
    good, after a compaction, an import, a rollback, an undo, a reset and a promotion. (A
    rename keeps the time to live: every model lost its weights ten minutes after each.)"""
    client = make_service(**HISTORY)
    spec = {"n_features": 4, "averaged": True}
    assert client.put("/models/m", json=spec).status_code == 201
    learn_and_export(client, spec, 20)  # (compactions and their checkpoints)
    doc = client.get("/models/m/export").json()
    assert client.post("/models/copy/import", json=doc).status_code == 200
    rollback(client, version=doc["version"] // 2)
    learn_and_export(client, spec, 10)
    assert client.post("/models/m/undo", json={"from_time": 0}).status_code == 200
    assert client.put("/models/m/challengers/c", json={"from": "served"}).status_code == 201
    learn_and_export(client, spec, 5)
    assert client.post("/models/m/promote", json={"challenger": "c"}).status_code == 200
    assert client.post("/models/copy/reset").status_code == 200

    def weights_keys() -> list[bytes]:
        return [k for k in redis_client.scan_iter("pcp:*") if b":snap" in k or b":ck" in k]

    kept = weights_keys()
    assert any(k.endswith(b":snap") for k in kept) and len(kept) > 4, kept
    assert [k for k in kept if redis_client.pttl(k) != -1] == []


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


def test_a_model_rolled_back_past_a_reset_exports_a_file_its_import_takes(
    make_service: MakeService,
) -> None:
    """A rollback keeps the counters: restoring weights from before a reset makes a model of
    more updates (its version) than labelled examples since (seen). Its export, and one with
    its checkpoints, import as they are."""
    client = make_service(**HISTORY)
    client.put("/models/m", json=SPECS["binary"])
    learn_and_export(client, SPECS["binary"], 3)
    assert client.post("/models/m/reset").status_code == 200
    (kept,) = client.get("/models/m/checkpoints").json()["checkpoints"]
    assert rollback(client, checkpoint=kept["id"])["version"] == kept["version"] > 0
    assert rollback(client, version=kept["version"])["version"] == kept["version"]  # (a start)
    for carry in (False, True):
        doc = client.get(f"/models/m/export?checkpoints={str(carry).lower()}").json()
        assert doc["version"] > doc["seen"] == 0
        r = client.post("/models/copy/import", json=doc)
        assert r.status_code == 200, r.text
        assert client.get("/models/copy/export").json()["weights"] == doc["weights"]


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_an_export_carries_the_checkpoints_and_an_import_restores_each_exactly(
    make_service: MakeService, kind: str
) -> None:
    client = make_service(**HISTORY)
    spec = SPECS[kind]
    client.put("/models/m", json=spec)
    zeros = client.get("/models/m/export").json()["weights"]
    exports = {0: zeros, **learn_and_export(client, spec, 40)}
    rollback(client, version=sorted(exports)[len(exports) // 2])  # checkpoints of every reason
    listed = client.get("/models/m/checkpoints").json()["checkpoints"]
    assert client.get("/models/m/export").json().get("checkpoints") is None  # asked for only
    document = client.get("/models/m/export?checkpoints=true").json()
    carried = document["checkpoints"]
    assert [(c["version"], c["reason"], c["time_ms"]) for c in carried] == [
        (c["version"], c["reason"], round(c["time"] * 1000)) for c in listed
    ]
    assert {c["reason"] for c in carried} >= {Reason.START, Reason.SCHEDULED, Reason.LEFT}

    assert client.put("/models/copy", json=spec).status_code == 201
    assert client.post("/models/copy/import", json=document).status_code == 200
    imported = client.get("/models/copy/checkpoints").json()["checkpoints"]
    assert [c["reason"] for c in imported] == [
        Reason.BEFORE_IMPORT,
        *(c["reason"] for c in carried),
    ]
    for was, now in zip(listed, imported[1:], strict=True):
        same = ("version", "seen", "time", "reason", "mistake_rate", "window")
        assert {k: now[k] for k in same} == {k: was[k] for k in same}
        # Each restores, in the copy, the weights the model had at that version, bit for bit.
        r = client.post("/models/copy/rollback", json={"checkpoint": now["id"]})
        assert r.status_code == 200, r.text
        doc = client.get("/models/copy/export").json()
        assert (doc["version"], doc["weights"]) == (was["version"], exports[was["version"]])


def test_an_export_files_checkpoints_are_checked_like_its_weights(
    make_service: MakeService,
) -> None:
    client = make_service(**HISTORY)
    spec = SPECS["binary"]
    client.put("/models/m", json=spec)
    learn_and_export(client, spec, 20)
    document = client.get("/models/m/export?checkpoints=true").json()
    assert document["checkpoints"]
    before = client.get("/models/m/checkpoints").json()
    good = document["checkpoints"][-1]
    for bad in (
        {**good, "sha256": "0" * 64},
        {**good, "reason": "because"},
        {**good, "mistakes": good["window"] + 1},
        {**good, "window": RING_SIZE + 1, "mistakes": 0},
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "time_ms"},
        "not an object",
    ):
        r = client.post("/models/m/import", json={**document, "checkpoints": [bad]})
        assert r.status_code == 422 and r.json()["code"] == "invalid_import", (bad, r.text)
    r = client.post("/models/m/import", json={**document, "checkpoints": {}})
    assert r.status_code == 422
    assert client.get("/models/m/checkpoints").json() == before  # nothing changed


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
    for body in ({"version": 0}, {"checkpoint": 1}):  # no such model, whatever it names
        r = client.post("/models/none/rollback", json=body)
        assert r.status_code == 404 and r.json()["code"] == "model_not_found", (body, r.text)
    assert client.get("/models/none/checkpoints").status_code == 404
    assert client.get("/models/m").json()["version"] == version  # nothing changed


# Each history route's numbers are numbers: never booleans, strings or non-finite; times are
# in order. Raw bodies, so that NaN, Infinity and -1e400 reach the service as literals.
NOT_NUMBERS = [
    ("/models/m/rollback", b'{"version": true}', "'version' is a boolean (true)"),
    ("/models/m/rollback", b'{"version": false}', "'version' is a boolean (false)"),
    ("/models/m/rollback", b'{"checkpoint": true}', "'checkpoint' is a boolean (true)"),
    ("/models/m/rollback", b'{"version": "3"}', "'version' is a string"),
    ("/models/m/rollback", b'{"version": 3.0}', "'version' is the number 3.0"),
    ("/models/m/rollback", b'{"version": 2251799813685248}', "more than 1125899906842624"),
    ("/models/m/undo", b'{"from_time": true}', "'from_time' is a boolean (true)"),
    ("/models/m/undo", b'{"to_time": false}', "'to_time' is a boolean (false)"),
    ("/models/m/undo", b'{"from_time": NaN}', "'from_time' is not a finite number"),
    ("/models/m/undo", b'{"from_time": Infinity}', "'from_time' is not a finite number"),
    ("/models/m/undo", b'{"to_time": -1e400}', "'to_time' is not a finite number"),
    ("/models/m/undo", b'{"from_time": -1}', "'from_time' is the number -1, less than 0"),
    ("/models/m/undo", b'{"from_time": 20, "to_time": 10}', "Give a from_time before to_time"),
    ("/models/m/undo", b'{"from_time": 10, "to_time": 10}', "Give a from_time before to_time"),
]


@pytest.mark.parametrize(("path", "body", "words"), NOT_NUMBERS)
def test_history_routes_take_numbers_never_booleans_and_times_finite_in_order(
    make_service: MakeService, path: str, body: bytes, words: str
) -> None:
    client = make_service(**HISTORY)
    client.put("/models/m", json=SPECS["binary"])
    learn_and_export(client, SPECS["binary"], 5)
    before = client.get("/models/m/export").json()
    r = client.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "validation_error" and words in r.json()["detail"], r.text
    after = client.get("/models/m/export").json()
    assert (after["version"], after["weights"]) == (before["version"], before["weights"])


BAD_QUERIES = [
    ("/models/m/updates?limit=0", "'limit' (limit=0) is less than 1", "an integer from 1 to"),
    ("/models/m/updates?limit=10001", "(limit=10001) is more than 10000", "1 to 10000"),
    ("/models/m/updates?limit=true", "'limit' (limit=true) is not accepted", "1 to 10000"),
    ("/models/m/updates?from_version=-5", "'from_version' (from_version=-5) is less", "from 1"),
    ("/models/m/updates?from_version=x&limit=0", "2 problems", "'from_version' (from_version=x)"),
    ("/models/m/export?checkpoints=maybe", "'checkpoints' (checkpoints=maybe)", "true or false"),
]


@pytest.mark.parametrize(("path", "problem", "takes"), BAD_QUERIES)
def test_a_bad_query_parameter_is_named_with_what_it_takes(
    make_service: MakeService, path: str, problem: str, takes: str
) -> None:
    client = make_service(**HISTORY)
    client.put("/models/m", json=SPECS["binary"])
    r = client.get(path)
    assert r.status_code == 422 and r.json()["code"] == "validation_error", r.text
    detail = r.json()["detail"]
    assert problem in detail and takes in detail and "The query parameter '" in detail, detail
    assert "body" not in detail and "Content-Type" not in detail, detail


# Generated requests of each history route, on the service in-process: a body or query string
# that is not what the route takes is a 422 that says so, never a 500; one that is, a 200 (or,
# for a version or checkpoint the model does not keep, its documented code).
NOT_A_VERSION = ["true", "false", "null", "NaN", "Infinity", "-1e400", '"7"', "1.5", "3.0", "[1]"]
NOT_A_VERSION += ["{}", "-1", str(2**51)]
NOT_A_TIME = ["true", "false", "NaN", "Infinity", "-Infinity", "-1e400", "1e400", '"7"', "[1]"]
NOT_A_TIME += ["{}", "-1", str(2**51)]
NOT_A_COUNT = ["0", "-5", "true", "false", "1.5", "", "abc", "1e3", str(2**51)]
NOT_A_FLAG = ["maybe", "2", "", "null", "tru"]
GENERATED = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture
def history_model() -> Iterator[httpx.Client]:
    """A binary model 'm' with some history, on the service in-process (the fast layer)."""
    service = InProcessService(Settings(auth=False, **HISTORY)).start()
    client = service.client()
    client.put("/models/m", json=SPECS["binary"])
    learn_and_export(client, SPECS["binary"], 20)
    yield client
    service.stop()


def send(client: httpx.Client, path: str, body: str) -> httpx.Response:
    r = client.post(path, content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code < 500 and (r.status_code == 200 or r.json()["code"]), r.text
    return r


def assert_refused(r: httpx.Response, *names: str) -> None:
    assert r.status_code == 422 and r.json()["code"] == "validation_error", r.text
    for name in names:
        assert f"'{name}'" in r.json()["detail"], r.text


def test_generated_rollback_bodies(history_model: httpx.Client) -> None:
    @GENERATED
    @given(st.data())
    def check(data: st.DataObject) -> None:
        kept = history_model.get("/models/m/checkpoints").json()
        field = data.draw(st.sampled_from(["version", "checkpoint"]))
        kind = data.draw(st.sampled_from(["not a number", "kept", "any"]))
        if kind == "not a number":
            r = send(
                history_model,
                "/models/m/rollback",
                f'{{"{field}": {data.draw(st.sampled_from(NOT_A_VERSION))}}}',
            )
            assert_refused(r)
            return
        pick = data.draw(st.integers(0, MAX_COUNT))  # a kept one: the pick-th, round the list
        first, last = kept["restorable_from"], kept["version"]
        if kind == "any":
            value = pick
        elif field == "version":
            value = first + pick % (last - first + 1)
        else:
            value = kept["checkpoints"][pick % len(kept["checkpoints"])]["id"]
        r = send(history_model, "/models/m/rollback", json.dumps({field: value}))
        if kind == "kept":
            assert r.status_code == 200, r.text
        else:
            assert r.status_code in (200, 404, 409, 422), r.text  # 422: checkpoint 0

    check()


def test_generated_undo_bodies(history_model: httpx.Client) -> None:
    times = st.one_of(st.integers(0, 2**40), st.floats(0, 2e9), st.just(time.time()))
    value = st.one_of(st.none(), times.map(json.dumps), st.sampled_from(NOT_A_TIME))

    @GENERATED
    @given(st.one_of(st.none(), st.text(max_size=8)), value, value)
    def check(source: str | None, start: str | None, stop: str | None) -> None:
        given_ = {
            "source": None if source is None else json.dumps(source),
            "from_time": start,
            "to_time": stop,
        }
        body = ", ".join(f'"{k}": {v}' for k, v in given_.items() if v is not None)
        r = send(history_model, "/models/m/undo", "{" + body + "}")
        bad = [k for k, v in given_.items() if k != "source" and v in NOT_A_TIME]
        if source and not KEY_NAME_RE.fullmatch(source):  # ('': the updates of no key)
            bad.append("source")
        if bad:
            assert_refused(r, *bad)
        elif source is None and start is None and stop is None:
            assert_refused(r)
        elif start is not None and stop is not None and float(start) >= float(stop):
            assert_refused(r)
            assert "Give a from_time before to_time" in r.json()["detail"]
        else:
            assert r.status_code == 200, r.text

    check()


def query_value(good: st.SearchStrategy[str], bad: list[str]) -> st.SearchStrategy[str | None]:
    return st.one_of(st.none(), good, st.sampled_from(bad))


def test_generated_history_query_strings(history_model: httpx.Client) -> None:
    """GET updates (limit, from_version), export (checkpoints) and checkpoints (none: any
    parameter is left aside)."""
    counts = st.integers(1, 10_000).map(str)
    flags = st.sampled_from(["true", "false", "1", "0", "yes", "no", "on", "off"])
    others = st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3)

    @GENERATED
    @given(
        query_value(counts, NOT_A_COUNT),
        query_value(st.integers(1, MAX_COUNT).map(str), NOT_A_COUNT),
        query_value(flags, NOT_A_FLAG),
        others,
    )
    def check(
        limit: str | None, first: str | None, flag: str | None, other: dict[str, str]
    ) -> None:
        asked = {"limit": limit, "from_version": first}
        r = history_model.get(
            "/models/m/updates", params={k: v for k, v in asked.items() if v is not None}
        )
        bad = [k for k, v in asked.items() if v in NOT_A_COUNT]
        if bad:
            assert_refused(r, *bad)
            assert "query parameter" in r.json()["detail"]
        else:
            assert r.status_code == 200, r.text
        r = history_model.get(
            "/models/m/export", params={} if flag is None else {"checkpoints": flag}
        )
        if flag in NOT_A_FLAG:
            assert_refused(r, "checkpoints")
        else:
            assert r.status_code == 200, r.text
        assert history_model.get("/models/m/checkpoints", params=other).status_code == 200

    check()


def test_a_prediction_waiting_for_its_label_lapses_at_a_rollback(make_service: MakeService) -> None:
    client = make_service(**HISTORY)
    client.put("/models/m", json=SPECS["binary"])
    learn_and_export(client, SPECS["binary"], 5)
    pid = client.post("/predict", json={"model": "m", "features": [1, 2, 3, 4]}).json()
    rollback(client, version=1)
    r = client.post("/feedback", json={"prediction_id": pid["prediction_id"], "label": 1})
    assert r.status_code == 404
    assert client.get("/models/m").json()["version"] == 1


@pytest.mark.servers  # two worker processes on a real redis-server
def test_a_rollback_under_load_is_exact_for_every_worker(redis_url: str) -> None:
    """Two workers learn and predict on the model while it is rolled back. Afterwards the
    model, as the workers served and learned it from the restored weights on, equals bit for
    bit the same versions rebuilt from its very first weights through every kept update; and
    the version rolled back to equals the export taken when the model was there."""
    env = {f"PERCEPTRON_{k.upper()}": str(v).lower() for k, v in HISTORY.items()}
    with running(ServiceProcess(redis_url, workers=2, **env)) as service:
        client = httpx.Client(base_url=service.url, timeout=30)
        spec = SPECS["binary"]
        assert client.put("/models/m", json=spec).status_code == 201
        exports = learn_and_export(client, spec, 40)
        target = sorted(exports)[len(exports) // 2]
        stop = threading.Event()
        seen: list[int] = []

        def load(seed: int) -> None:
            rng = np.random.default_rng(seed)
            with httpx.Client(base_url=service.url, timeout=30) as c:
                while not stop.is_set():
                    xs, ys = examples(spec, rng, 3)
                    r = c.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys})
                    assert r.status_code == 200, r.text
                    p = c.post("/predict", json={"model": "m", "features": xs[0]})
                    assert p.status_code == 200, p.text
                    seen.append(p.json()["version"])

        threads = [threading.Thread(target=load, args=(s,)) for s in (1, 2, 3)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(seen) >= 30, what="learning under way")
            answer = rollback(client, version=target)
            rolled = len(seen)
            # (as long again after: the later half of what was served, all after it)
            wait_until(lambda: len(seen) >= 2 * rolled + 10, what="learning after the rollback")
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        assert answer["version"] == target
        assert len(seen) > 20 and min(seen[len(seen) // 2 :]) >= target
        final = client.get("/models/m/export").json()
        assert final["version"] > target  # learned on after the rollback
        listed = client.get("/models/m/checkpoints").json()
        assert listed["restorable_from"] == 0
        # Rebuilt from the start, through the updates kept before and after the rollback
        # (read here, in one transaction): not from the weights the rollback wrote.
        keys = ModelKeys("m")
        with redis.Redis.from_url(redis_url) as r, r.pipeline(transaction=True) as pipe:
            pipe.hgetall(keys.meta).lrange(keys.past, 0, -1).lrange(keys.log, 0, -1)
            meta, past, log = pipe.execute()
            at = keys.checkpoint_weights(int(meta[Meta.PAST_BASE.encode()]))
            first = b"".join(r.lrange(at, 0, -1))  # (its chunks: store/ops/blobs.py)
        start = int(meta[Meta.PAST_VERSION.encode()])
        assert start == 0 and int(meta[Meta.SNAP_VERSION.encode()]) > target
        entries = (past + log)[: final["version"] - start]
        _, weights = rebuild(Restorable(meta[Meta.CONFIG.encode()].decode(), 0, first, entries))
        assert base64.b64encode(pack_weights(weights)).decode() == final["weights"]
        rollback(client, version=final["version"])
        assert client.get("/models/m/export").json()["weights"] == final["weights"]
        rollback(client, version=target)
        assert client.get("/models/m/export").json()["weights"] == exports[target]
        # And every worker serves it: a prediction from each answers that version.
        versions = {
            httpx.post(
                f"{service.url}/predict", json={"model": "m", "features": [1, 2, 3, 4]}
            ).json()["version"]
            for _ in range(20)
        }
        assert versions == {target}
        client.close()


def test_the_python_client_lists_checkpoints_and_rolls_back(make_service: MakeService) -> None:
    http = make_service(**HISTORY)
    http.put("/models/m", json=SPECS["binary"])
    exports = learn_and_export(http, SPECS["binary"], 20)
    v = sorted(exports)[5]
    with Client(str(http.base_url), **reach(http)) as c:
        listed = c.checkpoints("m")
        assert listed.version == max(exports) and listed.restorable_from == 0
        assert all(isinstance(k, CheckpointInfo) for k in listed.checkpoints)
        done = c.rollback("m", version=v)
        assert (done.version, done.restored_checkpoint) == (v, None)
        back = c.rollback("m", checkpoint=done.undo_checkpoint)
        assert (back.version, back.restored_checkpoint) == (max(exports), done.undo_checkpoint)
        with pytest.raises(ConflictError) as e:
            c.rollback("m", version=10**9)
        assert e.value.code == "version_not_kept"
        with pytest.raises(ValueError, match="either version or checkpoint"):
            c.rollback("m")
        with pytest.raises(ValueError, match="a source, a time range"):
            c.undo("m")
    http.put("/models/n", json=SPECS["binary"])
    http.post(
        "/learn/batch",
        json={"model": "n", "features": [[1, 2, 3, 4]] * 9, "labels": [1, -1] * 4 + [1]},
    )
    with Client(str(http.base_url), **reach(http)) as c:
        made = c.read_model("n").version
        kept = c.updates("n", from_version=2, limit=3)
        assert [u.version for u in kept.updates] == [2, 3, 4]
        assert kept.sources == {"": 3}  # keys are off: no name
        assert c.updates("n").updates[-1].version == made
        gone = c.undo("n", source="", from_time=0)
        assert (gone.removed, gone.version) == (made, 0)
    assert http.get("/models/m/export").json()["weights"] == exports[max(exports)]


def test_each_update_records_the_key_that_caused_it_and_when(
    make_service: MakeService, clock: Clock
) -> None:
    keys = {"alice": "a" * 24, "bob": "b" * 24, "unnamed": "u" * 24}
    entries = f"alice=train:{keys['alice']},bob=admin:{keys['bob']},train:{keys['unnamed']}"
    client = make_service(**HISTORY, auth=True, api_keys=entries)
    admin = {"authorization": f"Bearer {keys['bob']}"}
    assert client.put("/models/m", json={"n_features": 2}, headers=admin).status_code == 201
    sent: list[str] = []
    taught = {who: [0, 0, 0] for who in keys}  # labelled, mistakes, updates
    for i in range(12):
        who = ("alice", "bob", "unnamed")[i % 3]
        h = {"authorization": f"Bearer {keys[who]}"}
        x, y = [1.0, float(i)], (-1) ** i
        if i % 2:
            r = client.post("/learn", json={"model": "m", "features": x, "label": y}, headers=h)
            answer = r.json()
        else:
            p = client.post("/predict", json={"model": "m", "features": x}, headers=h).json()
            f = {"prediction_id": p["prediction_id"], "label": y}
            answer = client.post("/feedback", json=f, headers=h).json()
        for j, happened in enumerate((True, answer["mistake"], answer["updated"])):
            taught[who][j] += happened
        if answer["updated"]:
            sent.append(who)
    listed = client.get("/models/m/updates", headers=admin).json()
    assert [u["version"] for u in listed["updates"]] == list(range(1, len(sent) + 1))
    unnamed = "key-" + hashlib.sha256(keys["unnamed"].encode()).hexdigest()[:8]
    assert [u["source"] for u in listed["updates"]] == [
        unnamed if w == "unnamed" else w for w in sent
    ]
    assert all(u["time"] == pytest.approx(clock(), abs=5) for u in listed["updates"])
    assert sum(listed["sources"].values()) == len(sent)
    page = client.get("/models/m/updates?from_version=2&limit=2", headers=admin).json()
    assert [u["version"] for u in page["updates"]] == [2, 3]
    trainer = {"authorization": f"Bearer {keys['alice']}"}
    assert client.get("/models/m/updates", headers=trainer).status_code == 403
    assert keys["alice"] not in str(listed) and keys["unnamed"] not in str(listed)
    # What each key taught the model, counted as it happened, in its metrics and /metrics.
    names = {"alice": "alice", "bob": "bob", "unnamed": unnamed}
    expected = {names[w]: c for w, c in taught.items()}
    counted = client.get("/models/m/metrics", headers=admin).json()["sources"]
    assert {r["source"]: [r["labelled"], r["mistakes"], r["updates"]] for r in counted} == expected
    assert [r["labelled"] for r in counted] == sorted((c[0] for c in taught.values()), reverse=True)
    exposition = client.get("/metrics", headers=admin).text
    for source, (n, m, u) in expected.items():
        for what, count in (("seen", n), ("mistakes", m), ("updates", u)):
            line = f'perceptron_model_source_{what}_total{{model="m",source="{source}"}} {count}.0'
            assert (line in exposition) == (count > 0), line
    # An export carries them, an import brings them back, and a reset starts them anew.
    document = client.get("/models/m/export", headers=admin).json()
    assert document["counters"]["src:alice:n"] == str(taught["alice"][0])
    copy = client.post("/models/copy/import", json=document, headers=admin)
    assert copy.status_code == 200, copy.text
    copied = client.get("/models/copy/metrics", headers=admin).json()["sources"]
    assert copied == counted
    assert client.post("/models/m/reset", headers=admin).status_code == 200
    assert client.get("/models/m/metrics", headers=admin).json()["sources"] == []


@pytest.mark.servers  # two worker processes on a real redis-server
def test_keys_learning_at_once_are_each_counted_what_their_answers_say(redis_url: str) -> None:
    """Two keys' requests at once, on two workers: the model's writer learns both workers'
    requests in shared group commits. Each key's counts are still the sum of its answers."""
    keys = {"alice": "a" * 24, "bob": "b" * 24}
    entries = ",".join(f"{who}=train:{key}" for who, key in keys.items())
    env = {
        "PERCEPTRON_AUTH": "true",
        "PERCEPTRON_API_KEYS": f"{entries},admin:{'c' * 24}",
        "PERCEPTRON_DEFAULT_MODEL": "false",
    }
    admin = {"authorization": f"Bearer {'c' * 24}"}
    taught = {who: [0, 0, 0] for who in keys}  # labelled, mistakes, updates
    lock = threading.Lock()
    with (
        running(ServiceProcess(redis_url, workers=2, **env)) as service,
        httpx.Client(base_url=service.url, timeout=30, headers=admin) as http,
    ):
        assert http.put("/models/m", json={"n_features": 3}).status_code == 201

        def teach(who: str, seed: int) -> None:
            rng = np.random.default_rng(seed)
            h = {"authorization": f"Bearer {keys[who]}"}
            with httpx.Client(base_url=service.url, timeout=30, headers=h) as c:
                for _ in range(150):
                    x, y = rng.normal(size=3).round(2).tolist(), int(rng.choice([-1, 1]))
                    r = c.post("/learn", json={"model": "m", "features": x, "label": y})
                    assert r.status_code == 200, r.text
                    answer = r.json()
                    with lock:
                        for j, happened in enumerate((True, answer["mistake"], answer["updated"])):
                            taught[who][j] += happened

        threads = [
            threading.Thread(target=teach, args=(who, i))
            for i, who in enumerate([*keys, *keys])  # two connections a key
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        counted = http.get("/models/m/metrics").json()["sources"]
        version = http.get("/models/m").json()["version"]
    assert {r["source"]: [r["labelled"], r["mistakes"], r["updates"]] for r in counted} == taught
    assert taught["alice"][0] == taught["bob"][0] == 300
    assert sum(u for _, _, u in taught.values()) == version


def reference(updates: list[tuple[list[float], int]]) -> str:
    """A binary perceptron's weights (learning rate 1, bias) after these updates in order, as
    an export writes them: ``w += y * x``, ``b += y``, each in turn."""
    w, b = np.zeros((1, 3)), np.zeros(1)
    for x, y in updates:
        w[0] += float(y) * np.asarray(x, dtype=np.float64)
        b[0] += float(y)
    return base64.b64encode(w.tobytes() + b.tobytes()).decode()


KEYS = {"alice": "a" * 24, "bob": "b" * 24}  # alice trains, bob is an admin
ADMIN = {"authorization": f"Bearer {KEYS['bob']}"}
Update = tuple[str, float, list[float], int]  # who caused it, when, x, y


def learn_from_two_keys(
    make_service: MakeService,
    clock: Clock,
    who: Callable[[int, np.random.Generator], str],
    seed: int,
    pauses: tuple[int, ...],
) -> tuple[httpx.Client, list[Update]]:
    """A dense binary model (d=3) that alice and bob teach 60 examples by /learn, ``who``
    picking each sender, with the clock 10 s on after each of ``pauses``: the updates made."""
    entries = f"alice=train:{KEYS['alice']},bob=admin:{KEYS['bob']}"
    client = make_service(**HISTORY, auth=True, api_keys=entries)
    client.put("/models/m", json={"n_features": 3}, headers=ADMIN)
    rng = np.random.default_rng(seed)
    made: list[Update] = []
    for i in range(60):
        sender = who(i, rng)
        x, y = rng.normal(size=3).round(2).tolist(), int(rng.choice([-1, 1]))
        h = {"authorization": f"Bearer {KEYS[sender]}"}
        r = client.post("/learn", json={"model": "m", "features": x, "label": y}, headers=h)
        if r.json()["updated"]:
            made.append((sender, clock(), x, y))
        if i in pauses:
            clock.advance(10)
    return client, made


def test_undoing_a_time_range_of_a_keys_updates_leaves_exactly_those_out(
    make_service: MakeService, clock: Clock
) -> None:
    client, made = learn_from_two_keys(
        make_service, clock, lambda i, _: ("alice", "bob")[i % 2], 5, (19, 39)
    )
    start, stop = made[0][1] + 5, made[0][1] + 15  # the middle third
    body = {"source": "alice", "from_time": start, "to_time": stop}
    r = client.post("/models/m/undo", json=body, headers=ADMIN)
    gone = [1 for w, t, *_ in made if w == "alice" and start <= t < stop]
    assert r.status_code == 200 and r.json()["removed"] == len(gone) > 0
    kept = [(x, y) for w, t, x, y in made if not (w == "alice" and start <= t < stop)]
    assert client.get("/models/m/export", headers=ADMIN).json()["weights"] == reference(kept)
    # Every key's updates in a time range: the last third.
    r = client.post("/models/m/undo", json={"from_time": stop}, headers=ADMIN)
    assert r.json()["removed"] == sum(1 for _, t, *_ in made if t >= stop) > 0


def test_undoing_a_keys_updates_rebuilds_the_model_without_them_exactly(
    make_service: MakeService, clock: Clock
) -> None:
    client, made = learn_from_two_keys(
        make_service, clock, lambda _, rng: "alice" if rng.random() < 0.4 else "bob", 3, (29,)
    )
    middle = made[0][1] + 5  # (the clock went 10 s on half way)
    before = client.get("/models/m/export", headers=ADMIN).json()
    assert before["weights"] == reference([(x, y) for _, _, x, y in made])
    alices = sum(who == "alice" for who, *_ in made)
    assert 0 < alices < len(made)

    r = client.post("/models/m/undo", json={"source": "alice"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["removed"] == alices and r.json()["version"] == len(made) - alices
    after = client.get("/models/m/export", headers=ADMIN).json()
    assert after["weights"] == reference([(x, y) for who, _, x, y in made if who != "alice"])
    # The updates that stay are still kept, renumbered: bob's alone.
    listed = client.get("/models/m/updates", headers=ADMIN).json()
    assert listed["sources"] == {"bob": len(made) - alices}
    assert [u["version"] for u in listed["updates"]] == list(range(1, len(made) - alices + 1))
    # The model as it was is one rollback away (its weights: the kept updates start again
    # from them, as at any rollback to a checkpoint).
    assert r.json()["before"] == r.json()["undo_checkpoint"]  # (its former name, kept)
    back = {"checkpoint": r.json()["undo_checkpoint"]}
    assert client.post("/models/m/rollback", json=back, headers=ADMIN).status_code == 200
    assert client.get("/models/m/export", headers=ADMIN).json()["weights"] == before["weights"]
    # Nothing of that key kept now: nothing to undo, nothing changes.
    body = {"source": "alice", "from_time": middle}
    r = client.post("/models/m/undo", json=body, headers=ADMIN)
    assert (r.json()["removed"], r.json()["undo_checkpoint"], r.json()["before"]) == (0, None, None)
    assert client.post("/models/m/undo", json={}, headers=ADMIN).status_code == 422
    trainer = {"authorization": f"Bearer {KEYS['alice']}"}
    assert client.post("/models/m/undo", json=body, headers=trainer).status_code == 403


def test_an_undo_while_three_clients_learn_on_two_workers_keeps_every_update_once(
    redis_url: str,
) -> None:
    """Undo orders itself with learning instead of waiting for it to stop: the updates learned
    while it rebuilds stay after the rebuilt weights, as logged. Three clients learn on two
    workers throughout (each example a feature of its own: a weight counts how often it was
    learned); the undo of alice's updates answers 200 at once, and afterwards the weights are
    exactly bob's acknowledged updates, each once, and none of alice's. (It answered 503
    model_busy after 20 tries before: the version moved under every rebuild.)"""
    d, alices = 3000, 60
    entries = f"alice=train:{KEYS['alice']},bob=admin:{KEYS['bob']}"
    env = {f"PERCEPTRON_{k.upper()}": str(v).lower() for k, v in HISTORY.items()}
    service = ServiceProcess(
        redis_url, workers=2, PERCEPTRON_AUTH="true", PERCEPTRON_API_KEYS=entries, **env
    )
    with running(service), httpx.Client(base_url=service.url, timeout=30) as client:
        assert client.put("/models/m", json={"n_features": d}, headers=ADMIN).status_code == 201
        alice = {"authorization": f"Bearer {KEYS['alice']}"}

        def one_hot(i: int) -> list[float]:
            x = [0.0] * d
            x[i] = 1.0
            return x

        for i in range(alices):  # alice's, to be undone: the last positions
            body = {"model": "m", "features": one_hot(d - 1 - i), "label": (-1, 1)[i % 2]}
            assert client.post("/learn", json=body, headers=alice).status_code == 200
        stop = threading.Event()
        learned: list[tuple[int, int, bool]] = []  # (position, label, updated)
        failed: list[str] = []

        def load(first: int) -> None:
            with httpx.Client(base_url=service.url, timeout=30, headers=ADMIN) as c:
                for i in range(first, d - alices, 3):
                    if stop.is_set():
                        return
                    y = (1, -1)[(i // 3) % 2]
                    r = c.post("/learn", json={"model": "m", "features": one_hot(i), "label": y})
                    if r.status_code != 200:
                        failed.append(r.text)
                        return
                    learned.append((i, y, r.json()["updated"]))

        threads = [threading.Thread(target=load, args=(s,)) for s in (0, 1, 2)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(learned) >= 30, what="learning under way")
            before = len(learned)
            r = client.post("/models/m/undo", json={"source": "alice"}, headers=ADMIN)
            after = len(learned)
            wait_until(lambda: len(learned) >= after + 30, what="learning after the undo")
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert r.status_code == 200, r.text
        assert not failed, failed[:3]
        assert after > before > 0  # learning went on during the undo
        assert r.json()["removed"] > 0
        doc = client.get("/models/m/export", headers=ADMIN).json()
        packed = np.frombuffer(base64.b64decode(doc["weights"]), dtype="<f8")
        w, b = packed[:d], packed[d]
        expected = np.zeros(d)
        for i, y, updated in learned:
            expected[i] += y if updated else 0
        assert np.array_equal(w, expected)  # bob's, each once; alice's none
        assert b == sum(y for _, y, updated in learned if updated)
        assert doc["version"] == sum(updated for *_, updated in learned)


def test_a_check_across_fields_ends_its_sentence_once(make_service: MakeService) -> None:
    client = make_service(**HISTORY)
    assert client.put("/models/m", json={"n_features": 2}).status_code == 201
    got = client.post("/models/m/undo", json={})
    assert got.status_code == 422, got.text
    assert got.json()["detail"].endswith("or both.") and ".." not in got.json()["detail"]
