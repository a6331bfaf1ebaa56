"""Property-based fuzzing of every operation of the service's own OpenAPI schema.

Schemathesis generates valid and invalid requests for each operation of the document the
service serves at ``/openapi.json``, sends them over HTTP to a live service (a uvicorn thread on
a real Redis) and checks every answer: never a 5xx, the status code documented for its
operation, and the body, content type and headers as the schema says.

Random names and ids would almost always end in a 404 or 422, so part of the generated cases
are steered, deterministically, towards what exists: models ``default`` (named features),
``d`` (dense, 3 features, classes ``a``/``b``) and ``m`` (dense, 2 features, 3 classes, ovo,
averaged), features of the right dimension (JSON or packed), their labels, real prediction
ids and a real export document. The values themselves stay generated, so they still reach the
learner and the Lua scripts with odd numbers. ``test_fuzzing_reached_the_learner`` checks
that they did.

The budget is fixed (few examples per operation, derandomized, no example database) so a run
is reproducible and takes well under a minute on two cores.
"""

from __future__ import annotations

import base64
import json
import logging
import struct
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any, TypeVar

import httpx
import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.errors import InvalidSchema
from schemathesis.core.result import Err, Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.app import create_app
from service.cli.loopback import wait_until
from service.settings import Settings

from .servers import RedisServer, ServiceThread

T = TypeVar("T")

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

# Small limits keep generated models and batches cheap; the code paths are the same.
SETTINGS = Settings(
    redis_url=None,
    auth=False,
    max_classes=5,
    max_features=64,
    max_batch=16,
    max_models=40,
    max_body_bytes=64 * 1024,
    redis_timeout_s=5.0,
    stream_max_s=0.5,  # (an event stream ends soon: the fuzz reads each whole)
)
# The document the live service serves at /openapi.json (test_schema_is_the_served_one checks
# it); loaded at import so that each operation is a test of its own.
OPENAPI: dict[str, Any] = create_app(SETTINGS).openapi()
schema = schemathesis.openapi.from_dict(OPENAPI)

MODELS: dict[str, dict[str, Any]] = {
    "d": {"classes": ["a", "b"], "n_features": 3},
    "m": {"classes": [0, 1, 2], "n_features": 2, "averaged": True, "multiclass": "ovo"},
}
DIM = {"d": 3, "m": 2}
LABELS: dict[str, list[Any]] = {"default": [-1, 1], "d": ["a", "b"], "m": [0, 1, 2]}
# Names generated cases are steered to: existing models, and scratch names that PUT, import,
# reset and DELETE may create and remove (the three models above are never deleted).
READ_NAMES = ["default", "d", "m", "t1"]
WRITE_NAMES = ["t1", "t2"]
log = logging.getLogger("perceptron.tests")  # shown with --log-cli-level=INFO
STATUSES: Counter[tuple[str, int]] = Counter()
EXAMPLES = 40  # per operation, half valid and half invalid requests on average


@pytest.fixture(scope="module")
def live_url(redis_server: RedisServer) -> Iterator[str]:
    """The service on the session's Redis (flushed first), with the models above in it."""
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()
    service = ServiceThread(SETTINGS.model_copy(update={"redis_url": redis_server.url})).start()
    try:
        with redis.Redis(port=redis_server.port) as r:
            wait_until(lambda: r.exists("pcp:{default}:meta"), what="default model")
        with httpx.Client(base_url=service.url, timeout=30) as c:
            for name, spec in MODELS.items():
                assert c.put(f"/models/{name}", json=spec).status_code == 201
            learn = {"model": "d", "features": [1, 2, 3], "label": "b"}
            assert c.post("/learn", json=learn).status_code == 200
            assert c.post("/learn", json={"features": {"x": 1.0}, "label": 1}).status_code == 200
        yield service.url
    finally:
        service.stop()
        with redis.Redis(port=redis_server.port) as r:
            r.flushall()


def test_schema_is_the_served_one(live_url: str) -> None:
    assert httpx.get(live_url + "/openapi.json").json() == OPENAPI


class Steer:
    """Deterministic choices drawn from a case's own content (reproducible with it)."""

    def __init__(self, case: Any) -> None:
        seed = json.dumps(
            [case.operation.label, case.path_parameters, case.body], sort_keys=True, default=repr
        )
        self.h = zlib.crc32(seed.encode())

    def pick(self, n: int) -> int:
        value = self.h % n
        self.h = (self.h // n) ^ zlib.crc32(self.h.to_bytes(8, "little"))
        return value


def _fit(features: Any, dim: int) -> Any:
    """A generated feature list cut or padded (with 0) to ``dim`` values."""
    if isinstance(features, list):
        return (features + [0] * dim)[:dim]
    return features


def _tame(features: Any, s: Steer) -> Any:
    """Generated features with the values the service refuses replaced by small integers."""

    def ok(v: Any) -> Any:
        fine = isinstance(v, int | float) and not isinstance(v, bool) and abs(v) <= 1e15
        return v if fine else s.pick(7) - 3

    if isinstance(features, list):
        return [ok(v) for v in features]
    if isinstance(features, dict):
        return {k: ok(v) for k, v in features.items()} or {"x": 1}
    return features


def steer(case: Any, url: str) -> None:
    s = Steer(case)
    op = case.operation
    params = case.path_parameters
    if isinstance(params, dict) and "name" in params:
        destructive = op.method.upper() == "DELETE" or op.path.endswith(("/import", "/reset"))
        names = WRITE_NAMES if destructive or op.method.upper() == "PUT" else READ_NAMES
        if s.pick(4) or (destructive and params["name"] in READ_NAMES):
            params["name"] = names[s.pick(len(names))]
    body = case.body
    if op.path.endswith("/import") and s.pick(3) == 0:
        case.body = httpx.get(f"{url}/models/d/export").json()
        return
    if not isinstance(body, dict):
        return
    if ("features" in body or "packed_features" in body) and s.pick(4):
        body["model"] = ["default", "d", "m"][s.pick(3)]
    model = body.get("model", "default")
    if not isinstance(model, str):
        return
    if "packed_features" in body and s.pick(4):  # a batch takes one form of examples
        if isinstance(body.get("features"), list) and s.pick(2):
            del body["packed_features"]
        else:
            body.pop("features", None)
            labels = body.get("labels")
            n = len(labels) if isinstance(labels, list) and labels else 1 + s.pick(3)
            values = [float(s.pick(5) - 2) for _ in range(n * DIM.get(model, 2))]
            packed = struct.pack(f"<{len(values)}d", *values)
            body["packed_features"] = base64.b64encode(packed).decode()
    features = body.get("features")
    batch = op.path.endswith("/batch") and isinstance(features, list)
    if "features" in body and model in DIM and s.pick(4):
        dim = DIM[model]
        if batch and isinstance(features, list):
            body["features"] = [_fit(x, dim) for x in features]
        else:
            body["features"] = _fit(features, dim)
    features = body.get("features")
    if "features" in body and s.pick(4):
        if batch and isinstance(features, list):
            body["features"] = [_tame(x, s) for x in features]
        else:
            body["features"] = _tame(features, s)
    labels = LABELS.get(model)
    if labels and "label" in body and s.pick(4):
        body["label"] = labels[s.pick(len(labels))]
    if labels and isinstance(body.get("labels"), list) and s.pick(4):
        n = len(body["features"]) if isinstance(body.get("features"), list) else 1
        body["labels"] = [labels[s.pick(len(labels))] for _ in range(n)]
    if "prediction_id" in body and s.pick(4):
        body["prediction_id"] = _prediction(url, s)
    if isinstance(body.get("feedback"), list):
        for item in body["feedback"]:
            if isinstance(item, dict) and s.pick(2):
                item["prediction_id"] = _prediction(url, s)
                item["label"] = LABELS["default"][s.pick(2)]


def _prediction(url: str, s: Steer) -> str:
    """A real, pending prediction of the default model."""
    x = {"x": s.pick(5) - 2, "y": s.pick(3)}
    answer = httpx.post(f"{url}/predict", json={"features": x}).json()
    pid: str = answer["prediction_id"]
    return pid


def _ok(result: Ok[T] | Err[InvalidSchema]) -> T:
    """What a schemathesis result holds; a part of the schema that is not valid raises."""
    if isinstance(result, Err):
        raise result.err()
    return result.ok()


OPERATIONS = [_ok(result) for result in schema.get_all_operations()]


def cases(operation: Any) -> st.SearchStrategy[Any]:
    """Valid requests and invalid ones (schemathesis' positive and negative modes)."""
    modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    return st.one_of([operation.as_strategy(generation_mode=mode) for mode in modes])


# One valid request of each operation that learns or predicts, sent as it is before the
# generated ones (Hypothesis' explicit phase): which generated cases the steering makes valid
# depends on the schema and on what the process drew before, so the deep paths are reached
# whatever those are.
VALID: dict[str, dict[str, Any]] = {
    "POST /predict": {"model": "d", "features": [1.0, -2.0, 0.5]},
    "POST /predict/batch": {"model": "m", "features": [[1.0, 2.0], [0.0, -1.0]]},
    "POST /learn": {"model": "d", "features": [1.0, -2.0, 0.5], "label": "b"},
    "POST /learn/batch": {"model": "m", "features": [[1.0, 2.0], [0.0, -1.0]], "labels": [2, 0]},
}


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.label)
def test_every_operation_answers_as_documented(operation: Any, live_url: str) -> None:
    valid = VALID.get(operation.label)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases(operation))
    def check(case: Any) -> None:
        if case.body is not valid:
            steer(case, live_url)
        response = case.call_and_validate(base_url=live_url, checks=CHECKS, timeout=30)
        STATUSES[(operation.label, response.status_code)] += 1

    if valid is not None:
        check = example(case=operation.Case(body=valid, media_type="application/json"))(check)
    check()


def test_fuzzing_reached_the_learner(live_url: str) -> None:
    """The steered cases were accepted, not only refused: the deep paths were exercised."""
    if not STATUSES:
        pytest.skip("the fuzz tests did not run (deselected)")
    log.info("answers by operation and status: %s", sorted(STATUSES.items()))
    for label, status in [
        ("PUT /models/{name}", 201),
        ("DELETE /models/{name}", 204),
        ("POST /models/{name}/import", 200),
        ("GET /models/{name}/metrics", 200),
        ("POST /predict", 200),
        ("POST /predict/batch", 200),
        ("POST /feedback", 200),
        ("POST /learn", 200),
        ("POST /learn/batch", 200),
    ]:
        if STATUSES[(label, status)] == 0:  # (every answer of that operation, untruncated)
            answered = sorted((s, n) for (op, s), n in STATUSES.items() if op == label)
            pytest.fail(f"{label} never answered {status}: {answered}")
    with httpx.Client(base_url=live_url) as c:
        for name in ("default", "d", "m"):
            counters = c.get(f"/models/{name}").json()["counters"]
            assert counters["seen"] >= 1 and counters["predictions"] >= 1, (name, counters)
