"""Every number a client sets, walked at its limit and one past it, as the table of docs/api.md
says ("Every number a client sets, and its limit"): each row of the table has its walk here,
and each walk its row, so neither a new limit nor a changed answer goes unlisted."""

from __future__ import annotations

import base64
import json
import re
import socket
from collections.abc import Callable
from hashlib import sha256
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.contract import store_protocol as protocol

from .answers import with_weights
from .conftest import MakeService

pytestmark = pytest.mark.in_process

ROOT = Path(__file__).resolve().parents[1]
JSON = {"content-type": "application/json"}


def table() -> dict[str, tuple[str, str]]:
    """number -> (accepted, one past it), from the docs' table."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("### Every number a client sets, and its limit", 1)[1]
    rows = {}
    for line in section.split("\n\n| number |", 1)[1].splitlines()[2:]:
        if not line.startswith("|"):
            break
        number, accepted, past = (c.strip() for c in line.strip("|").split("|"))
        rows[number] = (accepted, past)
    return rows


def answers(r: httpx.Response, past: str) -> None:
    """``r`` is the refusal the table's last column names: ``413 `batch_too_large```."""
    status, code = re.fullmatch(r"(\d{3}) `(\w+)`", past).groups()  # type: ignore[union-attr]
    assert (r.status_code, r.json().get("code")) == (int(status), code), r.text


def accepted(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code in (200, 201), r.text
    body: dict[str, Any] = r.json()
    return body


Walk = Callable[[httpx.Client, str], None]
WALKS: dict[str, Walk] = {}


def walks(number: str) -> Callable[[Walk], Walk]:
    def register(walk: Walk) -> Walk:
        WALKS[number] = walk
        return walk

    return register


def put(c: httpx.Client, name: str, **config: Any) -> httpx.Response:
    return c.put(f"/models/{name}", json=config)


def configuration(field: str, good: Any, bad: Any, **rest: Any) -> Walk:
    def walk(c: httpx.Client, past: str) -> None:
        accepted(put(c, "at", **{**rest, field: good}))
        answers(put(c, "past", **{**rest, field: bad}), past)

    return walk


@walks("request body")
def _body(c: httpx.Client, past: str) -> None:
    accepted(put(c, "m", n_features=1))
    start = b'{"model": "m", "features": [1]'
    at = start + b" " * (4_194_304 - len(start) - 1) + b"}"
    accepted(c.post("/predict", content=at, headers={"content-type": "application/json"}))
    over = at[:-1] + b" }"
    answers(c.post("/predict", content=over, headers={"content-type": "application/json"}), past)


@walks("an import's body (an export file)")
def _import_body(c: httpx.Client, past: str) -> None:
    doc = json.dumps(an_export(c)).encode()
    at = doc[:-1] + b" " * (268_435_456 - len(doc)) + b"}"  # (the file, padded to the limit)
    accepted(c.post("/models/copy/import", content=at, headers=JSON))
    del at
    over = doc[:-1] + b" " * (268_435_456 - len(doc) + 1) + b"}"
    answers(c.post("/models/past/import", content=over, headers=JSON), past)
    assert c.get("/models/past").status_code == 404


@walks("JSON nesting")
def _nesting(c: httpx.Client, past: str) -> None:
    accepted(put(c, "m", n_features=1))

    def nested(levels: int) -> bytes:  # the body is one level, its "x" the rest
        return (
            b'{"model": "m", "features": [1], "x": '
            + b"[" * (levels - 1)
            + b"]" * (levels - 1)
            + b"}"
        )

    r = c.post("/predict", content=nested(32), headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["code"] == "validation_error", r.text  # parsed
    answers(
        c.post("/predict", content=nested(33), headers={"content-type": "application/json"}), past
    )


@walks("examples in a batch")
def _examples(c: httpx.Client, past: str) -> None:
    accepted(put(c, "m", n_features=1))
    accepted(c.post("/predict/batch", json={"model": "m", "features": [[1.0]] * 1000}))
    answers(c.post("/predict/batch", json={"model": "m", "features": [[1.0]] * 1001}), past)
    body = {"model": "m", "features": [[1.0]] * 1001, "labels": [1] * 1001}
    answers(c.post("/learn/batch", json=body), past)


@walks("feedback items in a batch")
def _feedback_items(c: httpx.Client, past: str) -> None:
    accepted(put(c, "m", n_features=1))
    made = accepted(c.post("/predict/batch", json={"model": "m", "features": [[1.0]] * 1000}))
    items = [{"prediction_id": p["prediction_id"], "label": 1} for p in made["predictions"]]
    accepted(c.post("/feedback/batch", json={"feedback": items}))
    answers(c.post("/feedback/batch", json={"feedback": [*items, items[0]]}), past)


@walks("named features in an example")
def _named(c: httpx.Client, past: str) -> None:
    accepted(put(c, "m", hash_bits=4))
    at = {f"f{i}": 1.0 for i in range(100_000)}
    accepted(c.post("/predict", json={"model": "m", "features": at}))
    answers(c.post("/predict", json={"model": "m", "features": {**at, "one-more": 1.0}}), past)


@walks("a feature's name")
def _feature_name(c: httpx.Client, past: str) -> None:
    accepted(put(c, "m", hash_bits=4))
    accepted(c.post("/predict", json={"model": "m", "features": {"n" * 256: 1.0}}))
    answers(c.post("/predict", json={"model": "m", "features": {"n" * 257: 1.0}}), past)


@walks("a feature's value")
def _feature_value(c: httpx.Client, past: str) -> None:
    accepted(put(c, "m", n_features=2))
    accepted(c.post("/predict", json={"model": "m", "features": [1e15, -1e15]}))
    answers(c.post("/predict", json={"model": "m", "features": [1e15, -1.0000001e15]}), past)


@walks("a model's name")
def _model_name(c: httpx.Client, past: str) -> None:
    accepted(put(c, "n" * 64, n_features=1))
    answers(put(c, "n" * 65, n_features=1), past)


WALKS["`n_features`"] = configuration("n_features", 100_000, 100_001)
WALKS["`hash_bits`"] = configuration("hash_bits", 24, 25)
WALKS["an integer class label"] = configuration("classes", [0, 2**53], [0, 2**53 + 1])
WALKS["a string class label"] = configuration("classes", ["a", "s" * 256], ["a", "s" * 257])
WALKS["`learning_rate`"] = configuration("learning_rate", 1e6, 1.000001e6, n_features=1)
WALKS["`margin`"] = configuration("margin", 1e12, 1.000001e12, n_features=1)
WALKS["`feedback_ttl_s`"] = configuration("feedback_ttl_s", 2_592_000, 2_592_001, n_features=1)


# The last of many classes is one of them; a label beside them (of the type of the others) not
@walks("`drift`")
def _drift(c: httpx.Client, past: str) -> None:
    for at, over in [
        (
            {"detector": "ddm", "warm_start": 1_000_000},
            {"detector": "ddm", "warm_start": 1_000_001},
        ),
        ({"detector": "eddm", "warm_start": 1}, {"detector": "eddm", "warm_start": 0}),
        (
            {"detector": "ddm", "warning_threshold": 3.0, "drift_threshold": 3.0},
            {"detector": "ddm", "warning_threshold": 3.0000001, "drift_threshold": 3.0},
        ),
        ({"detector": "eddm", "alpha": 1.0, "beta": 1.0}, {"detector": "eddm", "alpha": 1.0000001}),
    ]:
        accepted(put(c, "at", n_features=1, drift=at))
        assert c.delete("/models/at").status_code == 204
        answers(put(c, "past", n_features=1, drift=over), past)


WALKS["`default_label`"] = configuration(
    "default_label", 999, 1000, classes=list(range(1000)), n_features=1, multiclass="ovr"
)
WALKS["`algorithm`"] = configuration("algorithm", "pa2", "pa3", n_features=1)
WALKS["`C`"] = configuration("C", 1e6, 1.000001e6, n_features=1, algorithm="pa1")
WALKS["`learning_rate`, `margin`, `averaged` of another learner"] = configuration(
    "learning_rate", 1.0, 0.5, n_features=1, algorithm="pa1"
)
WALKS["`classes`"] = configuration(
    "classes", list(range(1000)), list(range(1001)), n_features=1, multiclass="ovr"
)
# 335 x 100,000 = 33,500,000 weights; 336 x 100,000 = 33,600,000
WALKS["weights of a model (rows x dimension)"] = configuration(
    "classes", list(range(335)), list(range(336)), n_features=100_000, multiclass="ovr"
)


@walks("models in the store")
def _models(c: httpx.Client, past: str) -> None:
    for i in range(1000):
        accepted(put(c, f"m{i}", n_features=1))
    answers(put(c, "one-more", n_features=1), past)
    accepted(put(c, "m0", n_features=1))  # an existing one is not one more


def an_export(c: httpx.Client) -> dict[str, Any]:
    accepted(put(c, "m", n_features=2))
    accepted(c.post("/learn", json={"model": "m", "features": [1, 2], "label": 1}))
    return accepted(c.get("/models/m/export"))


@walks("an import's `version`, `seen` and counters")
def _import_counts(c: httpx.Client, past: str) -> None:
    doc, top = an_export(c), protocol.MAX_COUNT
    assert top == 2**50
    for at, over in (
        ({"version": top, "seen": top}, {"version": top, "seen": top + 1}),
        ({"seen": top}, {"seen": top, "version": top + 1}),
        ({"counters": {"predictions": top}}, {"counters": {"predictions": top + 1}}),
    ):
        accepted(c.post("/models/m/import", json={**doc, **at}))
        answers(c.post("/models/m/import", json={**doc, **over}), past)


@walks("an import's weights")
def _import_weights(c: httpx.Client, past: str) -> None:
    doc = an_export(c)
    accepted(c.post("/models/m/import", json=with_weights(doc, -1e250)))
    answers(c.post("/models/m/import", json=with_weights(doc, 1.000001e250)), past)
    answers(c.post("/models/m/import", json=with_weights(doc, float("inf"))), past)
    data = base64.b64decode(doc["weights"])
    for wrong in (b"", data[:-8], data + data[-8:]):  # every weight, and no more
        given = {"weights": base64.b64encode(wrong).decode(), "sha256": sha256(wrong).hexdigest()}
        answers(c.post("/models/m/import", json={**doc, **given}), past)


@walks("an import's `r2`")
def _import_r2(c: httpx.Client, past: str) -> None:
    doc = an_export(c)
    accepted(c.post("/models/m/import", json={**doc, "counters": {"r2": "1e300"}}))
    answers(c.post("/models/m/import", json={**doc, "counters": {"r2": "1.000001e300"}}), past)


def head_answer(url: httpx.URL, size: int, pieces: int) -> int:
    """The status answered to a request whose head (request line, headers and the blank line
    that ends them) is ``size`` bytes, sent in ``pieces`` writes on a raw connection."""
    start = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: "
    head = start + b"a" * (size - len(start) - 4) + b"\r\n\r\n"
    assert len(head) == size
    with socket.create_connection((url.host, url.port or 80), timeout=10) as s:
        step = -(-size // pieces)
        try:
            for at in range(0, size, step):
                s.sendall(head[at : at + step])
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the last piece
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


@walks("a rollback's `version` (`checkpoint`)")
def _rollback(c: httpx.Client, past: str) -> None:
    an_export(c)
    top = protocol.MAX_COUNT
    accepted(c.post("/models/m/rollback", json={"version": 0}))
    # Numbers within the limits pass the request's checks: the model keeps no such one.
    assert c.post("/models/m/rollback", json={"version": top}).status_code == 409
    assert c.post("/models/m/rollback", json={"checkpoint": top}).status_code == 404
    for body in ({"version": top + 1}, {"version": -1}, {"version": True}, {"version": False}):
        answers(c.post("/models/m/rollback", json=body), past)
    for body in ({"checkpoint": top + 1}, {"checkpoint": 0}, {"checkpoint": True}):
        answers(c.post("/models/m/rollback", json=body), past)


@walks("an undo's `from_time` and `to_time`")
def _undo(c: httpx.Client, past: str) -> None:
    an_export(c)
    top = protocol.MAX_COUNT // 1000
    accepted(c.post("/models/m/undo", json={"from_time": 0, "to_time": top}))
    accepted(c.post("/models/m/undo", json={"to_time": 0.001}))
    for body in (
        {"to_time": top + 1},
        {"from_time": -0.001},
        {"from_time": True},
        {"to_time": False},
        {"from_time": 5, "to_time": 5},
        {"from_time": float("nan")},  # NaN, Infinity: JSON literals that Python's json writes
        {"to_time": float("-inf")},
    ):
        r = c.post("/models/m/undo", content=json.dumps(body), headers=JSON)
        answers(r, past)


@walks("`limit` of `GET /models/{name}/updates`")
def _updates_limit(c: httpx.Client, past: str) -> None:
    an_export(c)
    for at in ("1", "10000"):
        accepted(c.get("/models/m/updates", params={"limit": at}))
    for over in ("0", "10001", "true"):
        answers(c.get("/models/m/updates", params={"limit": over}), past)


@walks("`from_version` of `GET /models/{name}/updates`")
def _updates_from(c: httpx.Client, past: str) -> None:
    an_export(c)
    for at in (1, protocol.MAX_COUNT):
        accepted(c.get("/models/m/updates", params={"from_version": at}))
    for over in (0, protocol.MAX_COUNT + 1, "true"):
        answers(c.get("/models/m/updates", params={"from_version": over}), past)


@walks("a request's head (request line and headers)")
def _head(c: httpx.Client, past: str) -> None:
    """On a real connection: the in-process service has no HTTP parser to bound."""
    limit = int(re.sub(r"\D", "", table()["a request's head (request line and headers)"][0]))
    status, _ = re.fullmatch(r"(\d{3}) `(\w+)`", past).groups()  # type: ignore[union-attr]
    for pieces in (1, 3, 64):  # whether its end arrives whole or split across reads
        assert head_answer(c.base_url, limit, pieces) == 200
        assert head_answer(c.base_url, limit + 1, pieces) == int(status)
    r = c.get("/healthz", headers={"X-Pad": "a" * limit})
    answers(r, past)


HTTP_ROWS = {"a request's head (request line and headers)"}  # walked on a real server alone


def test_every_row_of_the_table_has_its_walk_and_every_walk_its_row() -> None:
    assert sorted(table()) == sorted(WALKS)


@pytest.mark.parametrize("number", sorted(set(WALKS) - HTTP_ROWS))
def test_each_limit_at_its_edge_and_one_past_it(make_service: MakeService, number: str) -> None:
    client = make_service(default_model=False)
    WALKS[number](client, table()[number][1])


@pytest.mark.servers
@pytest.mark.parametrize("number", sorted(HTTP_ROWS))
def test_each_limit_of_the_http_server_at_its_edge_and_one_past_it(
    redis_url: str, number: str
) -> None:
    from service.settings import Settings

    from .servers import ServiceThread

    with (
        ServiceThread(Settings(redis_url=redis_url, auth=False)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        WALKS[number](client, table()[number][1])
