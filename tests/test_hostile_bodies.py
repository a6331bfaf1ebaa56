"""Hostile request bodies: nesting too deep for the parsers and handlers, and big bodies sent
without a valid key, which must be refused before the service reads them."""

from __future__ import annotations

import json
import random
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from service.api.auth import KeyRing
from service.settings import Settings

from .conftest import MakeService
from .servers import RedisServer, ServiceThread
from .test_api_errors import MODEL, state
from .test_security import ADMIN, KEYS, PREDICT, TRAIN, auth

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

DEPTHS = [500, 1000, 5000, 100_000]


def nested(depth: int, kind: str) -> str:
    """A JSON value ``depth`` levels deep: arrays in arrays, or objects in objects."""
    if kind == "array":
        return "[" * depth + "1" + "]" * depth
    return '{"a": ' * depth + "1" + "}" * depth


# Each template puts the nested value (``%s``) where a route reads something.
WHERE = [
    pytest.param("post", "/predict", '{"model": "d", "features": %s}', id="predict-features"),
    pytest.param("post", "/predict", '{"model": "d", "features": [1, 2, %s]}', id="predict-value"),
    pytest.param("post", "/predict", '{"features": {"x": %s}}', id="predict-named-value"),
    pytest.param("post", "/predict", "%s", id="predict-body"),
    pytest.param("post", "/predict/batch", '{"model": "d", "features": [%s]}', id="predict-batch"),
    pytest.param("post", "/learn", '{"model": "d", "features": %s, "label": "b"}', id="learn"),
    pytest.param(
        "post", "/learn", '{"model": "d", "features": [1, 2, 3], "label": %s}', id="label"
    ),
    pytest.param(
        "post",
        "/learn/batch",
        '{"model": "d", "features": [%s], "labels": ["b"]}',
        id="learn-batch",
    ),
    pytest.param(
        "post",
        "/learn/batch",
        '{"model": "d", "features": [[1, 2, 3]], "labels": [%s]}',
        id="learn-batch-labels",
    ),
    pytest.param("post", "/feedback", '{"prediction_id": "d:x", "label": %s}', id="feedback"),
    pytest.param("post", "/feedback/batch", '{"feedback": %s}', id="feedback-batch"),
    pytest.param(
        "post",
        "/feedback/batch",
        '{"feedback": [{"prediction_id": "d:x", "label": %s}]}',
        id="feedback-batch-label",
    ),
    pytest.param("put", "/models/x", "%s", id="create-body"),
    pytest.param("put", "/models/x", '{"classes": [1, %s]}', id="create-classes"),
    pytest.param("post", "/models/x/import", "%s", id="import-body"),
    pytest.param("post", "/models/x/import", '{"doc": %s}', id="import-field"),
    pytest.param(
        "post",
        "/models/x/import",
        '{"format": "perceptron-model", "format_version": %s}',
        id="import-version",
    ),
    pytest.param(
        "post",
        "/models/x/import",
        '{"format": "perceptron-model", "format_version": 1, "config": {}, "version": 0, '
        '"seen": 0, "created": 0, "counters": {}, "weights": "", "sha256": %s}',
        id="import-checksum",
    ),
]


@pytest.fixture
def dense(client: httpx.Client) -> httpx.Client:
    assert client.put("/models/d", json=MODEL).status_code == 201
    client.post("/learn", json={"model": "d", "features": [1, 2, 3], "label": "b"})
    return client


def assert_too_deep(r: httpx.Response) -> None:
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "malformed_json"
    assert "nested" in r.json()["detail"]


@pytest.mark.parametrize(("method", "path", "template"), WHERE)
def test_deep_nesting_is_400(dense: httpx.Client, method: str, path: str, template: str) -> None:
    before = state(dense)
    wrong = []
    for depth in DEPTHS:
        for kind in ("array", "object"):
            body = (template % nested(depth, kind)).encode()
            try:
                r = dense.request(
                    method.upper(), path, content=body, headers={"content-type": "application/json"}
                )
                assert_too_deep(r)
            except (AssertionError, httpx.TransportError) as e:
                wrong.append(f"{kind} {depth}: {e!r:.200}")
    assert not wrong, "\n".join(wrong)
    # The worker is still there, on the same connection, and nothing changed.
    assert dense.get("/healthz").status_code == 200
    assert state(dense) == before
    assert dense.get("/models/x").status_code == 404


def test_nesting_up_to_the_limit_is_parsed(dense: httpx.Client) -> None:
    from service.api.json_bodies import MAX_DEPTH

    def body(depth: int) -> str:  # the document is one level, its format_version the rest
        return (
            '{"format": "perceptron-model", "format_version": ' + nested(depth - 1, "array") + "}"
        )

    headers = {"content-type": "application/json"}
    r = dense.post("/models/x/import", content=body(MAX_DEPTH), headers=headers)
    assert r.status_code == 422 and r.json()["code"] == "invalid_import", r.text
    assert_too_deep(dense.post("/models/x/import", content=body(MAX_DEPTH + 1), headers=headers))


def test_brackets_in_strings_do_not_count(dense: httpx.Client) -> None:
    # Names full of brackets, quotes and backslashes: the check must skip strings exactly.
    names = ["[" * 200, "{" * 200, '\\"' + "[" * 100, "\\" * 99 + "x", "a\\\\" + "{" * 100]
    features = {name: 1.0 for name in names}
    r = dense.post("/learn", json={"features": features, "label": 1})
    assert r.status_code == 200, r.text
    r = dense.post("/predict/batch", json={"features": [features] * 100})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32-be"])
def test_deep_nesting_in_other_encodings(dense: httpx.Client, encoding: str) -> None:
    # The standard parser (the fallback for what orjson refuses) also reads UTF-16 and UTF-32;
    # a name whose code unit holds a quote byte (U+0122) must not hide the nesting.
    for depth in (40, 900):
        text = '{"features": {"\u0122": ' + nested(depth, "array") + "}}"
        r = dense.post(
            "/predict", content=text.encode(encoding), headers={"content-type": "application/json"}
        )
        assert_too_deep(r)


def test_big_bodies_take_the_same_checks(dense: httpx.Client) -> None:
    # Past THREAD_BYTES a body is checked and parsed in a worker thread: same answers.
    from service.api.json_bodies import THREAD_BYTES

    pad = " " * (THREAD_BYTES + 1)
    headers = {"content-type": "application/json"}

    def post(path: str, text: str) -> httpx.Response:
        body = text.replace("@", pad, 1).encode()
        assert len(body) > THREAD_BYTES
        return dense.post(path, content=body, headers=headers)

    r = post("/learn/batch", '{"model": "d", "features": [[1, 2, 3]]@, "labels": ["a"]}')
    assert r.status_code == 200 and r.json()["labels"] == ["b"], r.text
    assert_too_deep(post("/predict", '{"model": "d", "features": @' + nested(40, "array") + "}"))
    r = post("/predict", '{"model": "d", "features": [1, NaN, 3]@}')  # orjson refuses NaN
    assert r.status_code == 422 and r.json()["code"] == "non_finite_feature", r.text
    assert post("/predict", '{"model": "d", @').json()["code"] == "malformed_json"


def reference_depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((reference_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((reference_depth(v) for v in value.values()), default=0)
    return 0


def random_value(rng: random.Random, depth: int) -> Any:
    tricky = ["[", "]", "{", "}", '"', "\\", '\\"', "[[", '"]', "\\\\[", "x"]
    kind = rng.choice(["list", "dict", "str", "num"] if depth < 40 else ["str", "num"])
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == "dict":
        return {
            "".join(rng.choices(tricky, k=rng.randrange(4))): random_value(rng, depth + 1)
            for _ in range(rng.randrange(4))
        }
    if kind == "str":
        return "".join(rng.choices(tricky, k=rng.randrange(6)))
    return rng.random()


def test_depth_check_agrees_with_the_parser() -> None:
    from service.api.json_bodies import nesting_deeper_than

    rng = random.Random(7)
    for _ in range(3000):
        value = random_value(rng, 0)
        depth = reference_depth(value)
        for dumped in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
            body = dumped.encode()
            for limit in (0, 1, max(depth - 1, 0), depth, depth + 1):
                assert nesting_deeper_than(body, limit) == (depth > limit), (dumped, limit)


# -- a missing or wrong key is refused before the body is read ------------------------------

BIG = 20_000_000  # bytes the request announces; only the first SENT are ever sent
SENT = 64 * 1024


# Limits above the defaults: these bodies are large, yet within what the service accepts.
SECURED: dict[str, Any] = {
    "auth": True,
    "api_keys": KEYS,
    "max_body_bytes": 32 * 1024 * 1024,
    "max_batch": 10_000,
}


@pytest.fixture
def secured(make_service: MakeService) -> httpx.Client:
    client = make_service(**SECURED)
    assert client.put("/models/m", json={"n_features": 2}, headers=auth(ADMIN)).status_code == 201
    return client


@pytest.fixture(scope="module")
def refusing() -> Iterator[httpx.Client]:
    """``secured``'s service, shared by the module's refusals (a redis-server of its own): each
    refused request changes nothing, and each test checks it still serves model m at version 0,
    the requests of the tests before it included."""
    store = RedisServer().start()
    try:
        with ServiceThread(Settings(redis_url=store.url, **SECURED)) as server:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                r = client.put("/models/m", json={"n_features": 2}, headers=auth(ADMIN))
                assert r.status_code == 201, r.text
                yield client
    finally:
        store.stop()


def assert_unchanged(client: httpx.Client) -> None:
    r = client.get("/models/m", headers=auth(ADMIN))  # the service is fine, nothing changed
    assert r.status_code == 200 and r.json()["version"] == 0


def start_of_body() -> bytes:
    return (b'{"features": [[' + b"1.5, " * SENT)[:SENT]


def answer_to_partial_body(
    client: httpx.Client, method: str, path: str, headers: dict[str, str], chunked: bool
) -> tuple[int, dict[str, Any]]:
    """Announce a BIG body, send its first SENT bytes, and read the answer without sending
    the rest: a server that reads the body before checking the key never answers."""
    port = client.base_url.port
    assert port is not None
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {BIG}")
    lines += [f"{k}: {v}" for k, v in headers.items()]
    part = start_of_body()
    if chunked:
        part = b"%x\r\n%s\r\n" % (len(part), part)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + part)
        received = b""
        try:
            while b"\r\n\r\n" not in received:
                chunk = s.recv(65536)
                assert chunk, "the server closed the connection without an answer"
                received += chunk
            head, _, body = received.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                chunk = s.recv(65536)
                assert chunk, "the server closed the connection in the middle of its answer"
                body += chunk
        except TimeoutError:
            pytest.fail(f"no answer while {BIG - SENT} bytes of the body were still unsent")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


KEYED = [
    pytest.param("POST", "/predict", id="predict"),
    pytest.param("POST", "/predict/batch", id="predict-batch"),
    pytest.param("POST", "/feedback", id="feedback"),
    pytest.param("POST", "/feedback/batch", id="feedback-batch"),
    pytest.param("POST", "/learn", id="learn"),
    pytest.param("POST", "/learn/batch", id="learn-batch"),
    pytest.param("PUT", "/models/m2", id="create"),
    pytest.param("POST", "/models/m/import", id="import"),
    pytest.param("POST", "/models/m/reset", id="reset"),
    pytest.param("DELETE", "/models/m", id="delete"),
    pytest.param("GET", "/models", id="list"),
    pytest.param("GET", "/metrics", id="prometheus"),
]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize(("method", "path"), KEYED)
@pytest.mark.parametrize(
    "headers",
    [{}, auth("not-a-key-at-all-0000"), {"X-API-Key": "wrong-key-0123456789"}],
    ids=["no-key", "wrong-bearer", "wrong-x-api-key"],
)
@pytest.mark.servers  # a raw socket sends part of a body
def test_no_valid_key_is_refused_before_the_body(
    refusing: httpx.Client, method: str, path: str, headers: dict[str, str], chunked: bool
) -> None:
    status, body = answer_to_partial_body(refusing, method, path, headers, chunked)
    assert status == 401
    assert body["code"] == "unauthorized" and set(body) == {"detail", "code"}
    assert_unchanged(refusing)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize(
    ("method", "path", "key"),
    [
        pytest.param("POST", "/learn/batch", PREDICT, id="learn-with-predict-key"),
        pytest.param("POST", "/feedback/batch", PREDICT, id="feedback-with-predict-key"),
        pytest.param("POST", "/models/m/import", TRAIN, id="import-with-train-key"),
        pytest.param("PUT", "/models/m2", TRAIN, id="create-with-train-key"),
    ],
)
@pytest.mark.servers  # a raw socket sends part of a body
def test_a_key_without_the_role_is_refused_before_the_body(
    refusing: httpx.Client, method: str, path: str, key: str, chunked: bool
) -> None:
    status, body = answer_to_partial_body(refusing, method, path, auth(key), chunked)
    assert status == 403 and body["code"] == "forbidden"
    assert_unchanged(refusing)


def test_the_key_is_looked_up_once_per_request(
    secured: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up: list[str] = []
    find = KeyRing.find

    def counting(self: KeyRing, key: str) -> Any:
        looked_up.append(key)
        return find(self, key)

    monkeypatch.setattr(KeyRing, "find", counting)
    calls = [
        ("POST", "/predict", {"model": "m", "features": [1, 2]}),
        ("POST", "/learn", {"model": "m", "features": [1, 2], "label": 1}),
        ("GET", "/models/m", None),
        ("GET", "/metrics", None),
    ]
    for method, path, body in calls:
        looked_up.clear()
        r = secured.request(method, path, json=body, headers=auth(TRAIN))
        assert r.status_code == 200, r.text
        assert looked_up == [TRAIN], path


def test_a_valid_key_still_reads_a_big_body(secured: httpx.Client) -> None:
    # Chunked and with a length: the body is read and learned from once the key is known.
    examples = [[1.0, -1.0]] * 5000
    body = json.dumps({"model": "m", "features": examples, "labels": [1] * 5000}).encode()

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(body), 4096):
            yield body[i : i + 4096]

    headers = {"content-type": "application/json", **auth(TRAIN)}
    r = secured.post("/learn/batch", content=chunks(), headers=headers)
    assert r.status_code == 200 and len(r.json()["labels"]) == 5000, r.text
    r = secured.post("/learn/batch", content=body, headers=headers)
    assert r.status_code == 200 and len(r.json()["labels"]) == 5000, r.text
