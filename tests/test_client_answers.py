"""The client keeps its own answer types (``client/perceptron_client/answers.py``) and builds
its own requests (``calls.py``); these tests hold both to the service's OpenAPI document, so that a
change on either side that the other does not follow fails here, without a server.

For each operation of the client: its method and path are a route of the service; its body is
one the route's request schema accepts; and the type it reads the answer into declares the
fields of the route's answer schema, in the same order, each accepting every value the service
may send there.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Literal, get_args, get_type_hints

import jsonschema
import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict
from sklearn.linear_model import Perceptron

from perceptron_client import AsyncClient, Client, ModelEvent, calls
from service.app import create_app
from service.settings import Settings

OPENAPI: dict[str, Any] = create_app(Settings(redis_url=None, auth=False)).openapi()
COMPONENTS: dict[str, Any] = OPENAPI["components"]["schemas"]

# A fitted scikit-learn classifier of two features, for the warm start's body
FITTED = Perceptron().fit(np.array([[0.0, 1.0], [1.0, 0.0]]), [0, 1])

# Arguments for each operation of ``calls``: every form of body the client sends.
EXAMPLES: dict[str, list[tuple[Any, ...]]] = {
    "create_model": [("iris", {"classes": ["a", "b", "c"], "n_features": 4}), ("m", {})],
    "list_models": [()],
    "learners": [()],
    "read_model": [("iris",)],
    "delete_model": [("iris",)],
    "reset_model": [("iris",)],
    "checkpoints": [("iris",)],
    "rollback": [("iris", 3), ("iris", None, 2)],
    "updates": [("iris",), ("iris", 10, 5)],
    "undo": [("iris", "labeller"), ("iris", None, 1764028800.0, 1764032400.5)],
    "export_model": [("iris",)],
    "from_sklearn": [("iris", FITTED, {}), ("iris", FITTED, {"averaged": True})],
    "to_sklearn": [("iris",)],
    "import_model": [("iris", {"format": 1, "config": {}, "checksum": "0" * 64})],
    "weights": [("iris",)],
    "challengers": [("iris",)],
    "drift": [("iris",)],
    "challenger": [("iris", "pa")],
    "add_challenger": [("iris", "pa", {}), ("iris", "pa", {"algorithm": "pa1", "C": 0.5}, True)],
    "delete_challenger": [("iris", "pa")],
    "promote": [("iris", "pa"), ("iris", "pa", "before")],
    "metrics": [("iris",)],
    "predict": [("iris", [1.0, 2.0]), ("named", {"colour": 1.0}), ("iris", np.zeros(2))],
    "predict_batch": [("iris", [[1.0, 2.0], [3, 4]]), ("iris", np.ones((2, 2)))],
    "feedback": [("iris:0123", "a"), ("bin:0123", np.int64(1))],
    "feedback_batch": [([("iris:0123", "a"), ("bin:0123", 1)],)],
    "learn": [("iris", [1.0, 2.0], "a"), ("named", {"x": 1.5}, 1)],
    "learn_batch": [("iris", [[1.0, 2.0]], ["a"]), ("iris", np.ones((2, 2), "i4"), [0, 1])],
    "healthz": [()],
    "readyz": [()],
}
OPERATIONS = sorted(name for name in calls.__all__ if name[0].islower())
CASES = [
    pytest.param(name, args, id=f"{name}-{i}")
    for name in OPERATIONS
    for i, args in enumerate(EXAMPLES.get(name, []))
]


def route(method: str, path: str) -> dict[str, Any]:
    """The OpenAPI operation that serves ``method path``."""
    for template, operations in OPENAPI["paths"].items():
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", template)
        if re.fullmatch(pattern, path) and method.lower() in operations:
            operation: dict[str, Any] = operations[method.lower()]
            return operation
    raise AssertionError(f"the service has no route {method} {path}")


def resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def mismatches(
    client: dict[str, Any],
    client_defs: dict[str, Any],
    server: dict[str, Any],
    where: str = "answer",
) -> list[str]:
    """Where the client's schema fails to take what the service's schema allows, or declares
    other fields than it; empty when the client reads every answer the service may send."""
    client, server = resolve(client, client_defs), resolve(server, COMPONENTS)
    if "anyOf" in server or "oneOf" in server:  # (each the service may send)
        return [
            problem
            for branch in server.get("anyOf") or server["oneOf"]
            for problem in mismatches(client, client_defs, branch, where)
        ]
    if "anyOf" in client:
        tries = [mismatches(branch, client_defs, server, where) for branch in client["anyOf"]]
        return [] if any(not t for t in tries) else min(tries, key=len)
    sent, read = server.get("type"), client.get("type")
    if sent != read and (sent, read) != ("integer", "number"):  # a float takes an integer
        return [f"{where}: the service sends {sent}, the client reads {read}"]
    if "enum" in client and not set(server.get("enum", [None])) <= set(client["enum"]):
        return [f"{where}: the service may send {server.get('enum')}, not in {client['enum']}"]
    if server.get("type") == "array":
        return mismatches(client["items"], client_defs, server["items"], f"{where}[]")
    if "properties" in server:
        ours, theirs = list(client.get("properties", {})), list(server["properties"])
        # (a class that keeps the fields it does not declare reads them all: a learner's
        # settings, which the service's registry names)
        keeps = client.get("additionalProperties") is True
        if ours != theirs and not (keeps and [f for f in theirs if f in ours] == ours):
            return [f"{where}: the service sends the fields {theirs}, the client reads {ours}"]
        return [
            problem
            for field in ours
            for problem in mismatches(
                client["properties"][field],
                client_defs,
                server["properties"][field],
                f"{where}.{field}",
            )
        ]
    if isinstance(server.get("additionalProperties"), dict):
        return mismatches(
            client["additionalProperties"],
            client_defs,
            server["additionalProperties"],
            f"{where}{{}}",
        )
    return []


def answer_type(name: str) -> Any:
    """What the client reads the operation's answer into: ``X`` of ``calls.name -> Call[X]``."""
    (answer,) = get_args(get_type_hints(getattr(calls, name))["return"])
    return answer


@pytest.mark.parametrize(("name", "args"), CASES)
def test_each_request_is_one_the_service_accepts(name: str, args: tuple[Any, ...]) -> None:
    call = getattr(calls, name)(*args)
    operation = route(call.method, call.path)
    request_body = operation.get("requestBody")
    if call.body is None:
        assert request_body is None or not request_body.get("required")
        return
    assert request_body is not None, f"{call.method} {call.path} takes no body"
    schema = request_body["content"]["application/json"]["schema"]
    jsonschema.validate(call.body, {**schema, "components": OPENAPI["components"]})


@pytest.mark.parametrize("name", OPERATIONS)
def test_each_answer_type_reads_the_services_answer(name: str) -> None:
    call = getattr(calls, name)(*EXAMPLES[name][0])
    answers = {
        status: response
        for status, response in route(call.method, call.path)["responses"].items()
        if status.startswith("2")
    }
    answer = answer_type(name)
    if answer is type(None):
        assert answers and all("content" not in r for r in answers.values()), answers
        return
    schemas = [r["content"]["application/json"]["schema"] for r in answers.values()]
    if answer == dict[str, Any] or answer is Any:  # Any: to_sklearn's estimator, read from it
        assert schemas == [{}]  # a JSON document of the service's own making (export)
        return
    assert issubclass(answer, BaseModel)
    ours = answer.model_json_schema()
    for theirs in schemas:
        assert "$ref" in theirs, f"{name}: the service documents no answer type"
        assert mismatches(ours, ours.get("$defs", {}), theirs) == []


def test_every_operation_has_examples() -> None:
    assert sorted(EXAMPLES) == OPERATIONS


class FieldShort(BaseModel):
    label: int | str
    mistake: bool
    updated: bool


class IntegerLabel(BaseModel):
    label: int
    mistake: bool
    updated: bool
    version: int


class IntegerRate(BaseModel):
    examples: int
    mistakes: int
    rate: int


class StrictMulticlass(BaseModel):
    model_config = ConfigDict(extra="allow")

    classes: list[int | str]
    multiclass: Literal["multiclass", "ovr"]
    n_features: int | None
    hash_bits: int
    fit_bias: bool
    feedback_ttl_s: int
    default_label: int | str | None = None
    algorithm: str = "perceptron"


@pytest.mark.parametrize(
    ("ours", "theirs", "problem"),
    [
        pytest.param(
            FieldShort,
            "LearnResponse",
            "answer: the service sends the fields ['label', 'mistake', 'updated', 'version'], "
            "the client reads ['label', 'mistake', 'updated']",
            id="a-field-missing",
        ),
        pytest.param(
            IntegerLabel,
            "LearnResponse",
            "answer.label: the service sends string, the client reads integer",
            id="a-type-narrower",
        ),
        pytest.param(
            IntegerRate,
            "CurvePoint",
            "answer.rate: the service sends number, the client reads integer",
            id="an-integer-for-a-number",
        ),
        pytest.param(
            StrictMulticlass,
            "ModelSpec",
            "answer.multiclass: the service may send ['multiclass', 'ovr', 'ovo'], not in "
            "['multiclass', 'ovr']",
            id="a-value-not-read",
        ),
    ],
)
def test_the_check_finds_a_drift(ours: type[BaseModel], theirs: str, problem: str) -> None:
    ref = {"$ref": f"#/components/schemas/{theirs}"}
    assert mismatches(ours.model_json_schema(), {}, ref) == [problem]


def test_both_clients_offer_every_operation_with_its_signature() -> None:
    for name in OPERATIONS:
        sync, asynchronous = getattr(Client, name), getattr(AsyncClient, name)
        assert inspect.iscoroutinefunction(asynchronous) and not inspect.iscoroutinefunction(sync)
        assert inspect.signature(sync) == inspect.signature(asynchronous), name
        answer = answer_type(name)
        assert get_type_hints(sync)["return"] == get_type_hints(asynchronous)["return"] == answer
    public = {n for n in vars(Client) if not n.startswith("_")} - {"close", "base_url"}
    public_async = {n for n in vars(AsyncClient) if not n.startswith("_")} - {"aclose", "base_url"}
    assert public == public_async == {*OPERATIONS, *STREAMS}


# Operations whose answer is a stream of events, read as they come (event_streams.py).
STREAMS = {"events": "events_path"}


def test_each_stream_is_a_route_of_the_service_with_both_clients_alike() -> None:
    for name, path_of in STREAMS.items():
        sync, asynchronous = getattr(Client, name), getattr(AsyncClient, name)
        sig, async_sig = inspect.signature(sync), inspect.signature(asynchronous)
        assert sig.parameters == async_sig.parameters, name
        hints, async_hints = get_type_hints(sync)["return"], get_type_hints(asynchronous)["return"]
        assert get_args(hints)[0] is get_args(async_hints)[0] is ModelEvent
        operation = route("GET", getattr(calls, path_of)("m"))
        assert "text/event-stream" in operation["responses"]["200"]["content"]
