"""API keys with roles, model-limited keys, and limits on what a request may ask."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.api.auth import KeyError_, KeyRing, Role
from service.app import create_app
from service.settings import Settings

from .conftest import MakeService

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

ADMIN, TRAIN, PREDICT, SCOPED = (
    "admin-key-0123456789",
    "train-key-0123456789",
    "predict-key-012345678",
    "scoped-key-012345678",
)
KEYS = f"admin:{ADMIN},train:{TRAIN},predict:{PREDICT},train:{SCOPED}:allowed|other"


@pytest.fixture
def secured(make_service: MakeService) -> httpx.Client:
    client = make_service(auth=True, api_keys=KEYS)
    for name in ("allowed", "denied"):
        r = client.put(f"/models/{name}", json={"n_features": 2}, headers=auth(ADMIN))
        assert r.status_code == 201
    return client


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


CALLS = [
    ("post", "/predict", {"model": "allowed", "features": [1, 2]}, "predict"),
    ("get", "/models/allowed/metrics", None, "predict"),
    ("get", "/models/allowed/weights", None, "predict"),
    ("get", "/models", None, "predict"),
    ("get", "/models/allowed/checkpoints", None, "predict"),
    ("get", "/models/allowed/updates", None, "admin"),
    ("post", "/models/allowed/undo", {"source": "nobody"}, "admin"),
    ("post", "/learn", {"model": "allowed", "features": [1, 2], "label": 1}, "train"),
    ("post", "/learn/batch", {"model": "allowed", "features": [[1, 2]], "labels": [1]}, "train"),
    ("put", "/models/new", {"n_features": 1}, "admin"),
    ("delete", "/models/allowed", None, "admin"),
]
RANK = {"predict": 1, "train": 2, "admin": 3}


@pytest.mark.parametrize(("method", "path", "body", "needs"), CALLS)
@pytest.mark.parametrize("role", ["predict", "train", "admin"])
def test_roles(
    secured: httpx.Client, method: str, path: str, body: object, needs: str, role: str
) -> None:
    key = {"predict": PREDICT, "train": TRAIN, "admin": ADMIN}[role]
    r = secured.request(method.upper(), path, json=body, headers=auth(key))
    if RANK[role] >= RANK[needs]:
        assert r.status_code in (200, 201, 204), r.text
    else:
        assert r.status_code == 403 and r.json()["code"] == "forbidden"


def test_no_or_bad_key_is_401(secured: httpx.Client) -> None:
    r = secured.post("/predict", json={"model": "allowed", "features": [1, 2]})
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    r = secured.get("/models", headers=auth("not-a-key-at-all-0000"))
    assert r.status_code == 401
    assert "not-a-key" not in r.text
    r = secured.get("/models", headers={"X-API-Key": PREDICT})
    assert r.status_code == 200


def test_conflicting_keys_are_refused_whichever_is_valid(secured: httpx.Client) -> None:
    """A valid X-API-Key won over a wrong Bearer key: a request is one caller's."""
    for headers in (
        [("Authorization", "Bearer not-a-key-at-all-0000"), ("X-API-Key", ADMIN)],
        [("Authorization", f"Bearer {ADMIN}"), ("X-API-Key", PREDICT)],
        [("X-API-Key", PREDICT), ("X-API-Key", ADMIN)],
        [("Authorization", f"Bearer {ADMIN}"), ("Authorization", f"Bearer {TRAIN}")],
    ):
        r = secured.get("/models", headers=httpx.Headers(headers))
        assert r.status_code == 401 and r.json()["code"] == "unauthorized", (headers, r.text)
        assert "more than one API key" in r.json()["detail"]
        assert ADMIN not in r.text and PREDICT not in r.text
    # The same key both ways is one key.
    both = httpx.Headers([("Authorization", f"Bearer {ADMIN}"), ("X-API-Key", ADMIN)])
    assert secured.get("/models", headers=both).status_code == 200


def test_feedback_needs_train(secured: httpx.Client) -> None:
    p = secured.post(
        "/predict", json={"model": "allowed", "features": [1, 2]}, headers=auth(PREDICT)
    ).json()
    body = {"prediction_id": p["prediction_id"], "label": 1}
    assert secured.post("/feedback", json=body, headers=auth(PREDICT)).status_code == 403
    assert secured.post("/feedback", json=body, headers=auth(TRAIN)).status_code == 200


def test_key_limited_to_models(secured: httpx.Client) -> None:
    ok = secured.post(
        "/learn", json={"model": "allowed", "features": [1, 2], "label": 1}, headers=auth(SCOPED)
    )
    assert ok.status_code == 200
    denied = secured.post(
        "/learn", json={"model": "denied", "features": [1, 2], "label": 1}, headers=auth(SCOPED)
    )
    assert denied.status_code == 403
    names = [m["name"] for m in secured.get("/models", headers=auth(SCOPED)).json()["models"]]
    assert names == ["allowed"]
    p = secured.post(
        "/predict", json={"model": "denied", "features": [1, 2]}, headers=auth(ADMIN)
    ).json()
    fb = {"prediction_id": p["prediction_id"], "label": 1}
    assert secured.post("/feedback", json=fb, headers=auth(SCOPED)).status_code == 403
    assert secured.get("/models/denied", headers=auth(ADMIN)).json()["counters"]["feedback"] == 0


def test_a_feedback_batch_with_one_denied_model_is_refused_whole(secured: httpx.Client) -> None:
    """Each item's model is checked against the key before anything is applied; an id that
    cannot be one names no model, and is not found, item by item."""
    ids = [
        secured.post(
            "/predict", json={"model": name, "features": [1, 2]}, headers=auth(ADMIN)
        ).json()["prediction_id"]
        for name in ("allowed", "denied")
    ]
    fb = {"feedback": [{"prediction_id": i, "label": 1} for i in ids]}
    r = secured.post("/feedback/batch", json=fb, headers=auth(SCOPED))
    assert r.status_code == 403 and "'denied'" in r.json()["detail"]
    assert secured.get("/models/allowed", headers=auth(ADMIN)).json()["counters"]["feedback"] == 0
    fb = {"feedback": [{"prediction_id": t, "label": 1} for t in (ids[0], "denied", "a:b:c")]}
    r = secured.post("/feedback/batch", json=fb, headers=auth(SCOPED))
    assert r.status_code == 200
    results = r.json()["results"]
    assert results[0]["version"] == 1
    assert [x["error"]["code"] for x in results[1:]] == ["prediction_not_found"] * 2


def test_health_needs_no_key(secured: httpx.Client) -> None:
    assert secured.get("/healthz").status_code == 200
    assert secured.get("/readyz").status_code == 200


def test_keys_from_a_file(make_service: MakeService, tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"# one per line\nadmin:{ADMIN}\n")
    client = make_service(auth=True, api_keys_file=path)
    assert client.get("/models", headers=auth(ADMIN)).status_code == 200
    assert client.get("/models", headers=auth(TRAIN)).status_code == 401


def test_auth_on_without_keys_refuses_to_start() -> None:
    with pytest.raises(RuntimeError, match="PERCEPTRON_API_KEYS"):
        create_app(Settings(auth=True))


def test_bad_key_entry_is_reported_without_the_key() -> None:
    with pytest.raises(ValueError) as info:
        create_app(Settings(auth=True, api_keys="root:supersecretvalue123"))
    assert "supersecretvalue123" not in str(info.value)


def test_a_key_entry_may_give_its_name_which_the_history_records() -> None:
    key = "k" * 20
    (_, named), (_, plain) = KeyRing.parse([f"labeller.2=train:{key}:iris", f"admin:{key}"]).entries
    assert (named.name, named.role, named.models) == ("labeller.2", Role.train, frozenset({"iris"}))
    assert plain.name == "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]
    for bad in ("a b", "x" * 65, "a|b", "=", "é"):
        with pytest.raises(KeyError_, match="name is 1 to 64") as e:
            KeyRing.parse([f"{bad}=train:{key}"] if bad != "=" else [f"=train:{key}"])
        assert key not in str(e.value)
    with pytest.raises(KeyError_, match="optional 'name='"):
        KeyRing.parse([f"alice=boss:{key}"])


def test_auth_off_is_logged_loudly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="perceptron"):
        create_app(Settings(auth=False))
    assert any("AUTH IS OFF" in r.message for r in caplog.records)


LIMITS = [
    pytest.param(
        {"max_body_bytes": 2000},
        "post",
        "/learn/batch",
        {"model": "m", "features": [[1.0, 2.0]] * 200, "labels": [1] * 200},
        413,
        "body_too_large",
        "PERCEPTRON_MAX_BODY_BYTES",
        id="body",
    ),
    pytest.param(
        {"max_features": 3},
        "post",
        "/predict",
        {"features": {"a": 1, "b": 1, "c": 1, "d": 1}},
        413,
        "too_many_features",
        "3",
        id="features",
    ),
    pytest.param(
        {"max_name_length": 5},
        "post",
        "/predict",
        {"features": {"abcdef": 1}},
        422,
        "feature_name_too_long",
        "5",
        id="name-length",
    ),
    pytest.param(
        {"max_hash_bits": 10},
        "put",
        "/models/h",
        {"hash_bits": 11},
        422,
        "invalid_config",
        "PERCEPTRON_MAX_HASH_BITS",
        id="hash-bits",
    ),
    pytest.param(
        {"max_classes": 3},
        "put",
        "/models/c",
        {"classes": [1, 2, 3, 4]},
        422,
        "invalid_config",
        "PERCEPTRON_MAX_CLASSES",
        id="classes",
    ),
    pytest.param(
        {"max_models": 2},
        "put",
        "/models/third",
        {},
        422,
        "too_many_models",
        "PERCEPTRON_MAX_MODELS",
        id="models",
    ),
]


@pytest.mark.parametrize(("settings", "method", "path", "body", "status", "code", "named"), LIMITS)
def test_limits(
    make_service: MakeService,
    settings: dict[str, int],
    method: str,
    path: str,
    body: object,
    status: int,
    code: str,
    named: str,
) -> None:
    client = make_service(**settings)
    client.put("/models/m", json={"n_features": 2})
    before = client.get("/models").json()
    r = client.request(method.upper(), path, json=body)
    assert r.status_code == status, r.text
    assert r.json()["code"] == code and named in r.json()["detail"]
    assert client.get("/models").json() == before


def test_body_limit_applies_without_content_length(make_service: MakeService) -> None:
    client = make_service(max_body_bytes=2000)

    def chunks() -> Iterator[bytes]:
        yield b'{"features": {'
        for i in range(300):
            yield b'"f%d": 1, ' % i
        yield b'"z": 1}}'

    r = client.post("/predict", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["code"] == "body_too_large"
