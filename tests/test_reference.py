"""The reference against what it describes.

The pages (README.md, docs/, deploy/): every relative link lands on a file and a heading that
exist, every page of docs/ is linked from the front page, the perceptron's conventions are
written in one place, and the exit codes of docs/cli.md are the commands' own. The table of
docs/errors.md names every error code the service can answer (found in its source), and no
other. The OpenAPI document behind /docs and /redoc introduces the service, describes each group
of routes, and shows an example of every body a route takes or answers, each valid against its
schema; and the request examples are bodies the service takes.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from service.api.openapi import openapi_examples
from service.app import create_app
from service.cli.exit_codes import CLIENT_CODES, MEANING, SERVE_CODES
from service.settings import Settings
from service.store.refusals import STORE_STATES

ROOT = Path(__file__).resolve().parents[1]
SERVICE = ROOT / "service"
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *DOCS.glob("*.md"), *(ROOT / "deploy").rglob("*.md")])
OPENAPI: dict[str, Any] = create_app(Settings(redis_url=None, auth=False)).openapi()
METHODS = {"get", "put", "post", "delete", "patch"}

# --- the pages --------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def prose(path: Path) -> str:
    """A page without its fenced blocks (where a link is only text)."""
    return FENCE.sub("", path.read_text())


def slug(heading: str) -> str:
    """The anchor a heading gets on GitHub: lower case, punctuation gone, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", prose(path), re.M)}


def links(path: Path) -> Iterator[str]:
    for target in LINK.findall(prose(path)):
        if not re.match(r"[a-z]+:", target):  # http:, https:, mailto: lead elsewhere
            yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_of_a_page_lands(page: Path) -> None:
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        landing = (page.parent / file).resolve() if file else page
        if not landing.exists():
            broken.append(f"{target}: no such file")
        elif anchor and landing.suffix == ".md" and anchor not in anchors(landing):
            broken.append(f"{target}: no such heading")
    assert broken == []


def test_every_page_of_docs_is_linked_from_the_front_page() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    assert sorted(p.name for p in DOCS.glob("*.md") if p.resolve() not in linked) == []


def test_the_conventions_are_written_in_one_place() -> None:
    rule = "A binary model predicts `classes[1]` iff `s > 0`"
    assert [p.name for p in PAGES if rule in " ".join(p.read_text().split())] == ["conventions.md"]


def test_the_exit_codes_of_the_command_line_are_those_it_gives() -> None:
    text = (DOCS / "cli.md").read_text()
    table = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", text, re.M))
    assert table == {str(int(code)): meaning for code, meaning in MEANING.items()}
    first, last = int(CLIENT_CODES[0]), int(CLIENT_CODES[-1])
    assert f"`perceptron replay` exit with {first} to {last}" in " ".join(text.split())
    serve = ", ".join(str(int(c)) for c in SERVE_CODES[:-1]) + f" or {int(SERVE_CODES[-1])}"
    assert f"`perceptron serve` with {serve}," in " ".join(text.split())


# --- the error codes --------------------------------------------------------------------------

# Codes the source names that never reach a client, and why.
NEVER_ANSWERED = {
    # a writer's answer to the worker that handed it a request, when the model was replaced:
    # that worker loads the model again and retries (engine/replicas.py), or answers model_busy
    "stale_model",
}


def _str(node: ast.expr | None, constants: dict[str, str]) -> str | None:
    """A string literal, or a module constant's string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def answerable_codes() -> dict[str, set[str]]:
    """Every error code the service's source can answer with, and where it is made.

    A code is made: as ``code=...`` given to any call; as the ``code`` argument, by position,
    of a function or class that takes one (``FeatureError(code, message)``,
    ``Condition(code, ...)``, ``_error(status, code, detail)``); as the class attribute
    ``code`` of an error class made without a code of its own; as a string assigned to a
    variable ``code`` in a function; and as a Redis refusal's code (``STORE_STATES``).
    """
    trees = {p: ast.parse(p.read_text()) for p in sorted(SERVICE.rglob("*.py"))}
    class_code: dict[str, str] = {}  # class -> its attribute code
    bases: dict[str, list[str]] = {}
    own_init: set[str] = set()  # classes whose __init__ gives a code= itself
    code_at: dict[str, int] = {}  # function or class -> position of its code argument
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
                fields = []
                for st in node.body:
                    if isinstance(st, ast.Assign) and _targets(st) == ["code"]:
                        value = _str(st.value, {})
                        if value:
                            class_code[node.name] = value
                    elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        fields.append(st.target.id)
                    elif isinstance(st, ast.FunctionDef) and st.name == "__init__":
                        params = [a.arg for a in st.args.args[1:]]
                        if "code" in params:
                            code_at[node.name] = params.index("code")
                        if any(_keyword(c, "code") for c in ast.walk(st)):
                            own_init.add(node.name)
                dataclass = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
                if dataclass and "code" in fields:
                    code_at.setdefault(node.name, fields.index("code"))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                params = [a.arg for a in node.args.args]
                if "code" in params:
                    code_at.setdefault(node.name, params.index("code"))

    def class_default(name: str) -> str | None:
        if name in own_init:
            return None
        while name not in class_code and bases.get(name):
            name = bases[name][0]
        return class_code.get(name)

    def module_constants(tree: ast.Module) -> dict[str, str]:
        return {
            t: v
            for st in tree.body
            if isinstance(st, ast.Assign)
            for t in _targets(st)
            if (v := _str(st.value, {})) is not None
        }

    # (a module's own constants, then those another module declares and it imports)
    shared = {k: v for tree in trees.values() for k, v in module_constants(tree).items()}
    found: dict[str, set[str]] = {}
    for path, tree in trees.items():
        where = str(path.relative_to(ROOT))
        constants = {**shared, **module_constants(tree)}
        for node in ast.walk(tree):
            made: list[str | None] = []
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", None))
                given = _keyword(node, "code")
                if given is not None:
                    made.append(_str(given, constants))
                elif name in code_at and len(node.args) > code_at[name]:
                    made.append(_str(node.args[code_at[name]], constants))
                elif name in bases:
                    made.append(class_default(name))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Assign) and _targets(inner) == ["code"]:
                        made += [
                            c.value
                            for c in ast.walk(inner.value)
                            if isinstance(c, ast.Constant) and isinstance(c.value, str)
                        ]
            for code in made:
                if code:
                    found.setdefault(code, set()).add(where)
    for code, _ in STORE_STATES.values():
        found.setdefault(code, set()).add("service/app.py")
    return found


def _targets(st: ast.Assign) -> list[str]:
    return [t.id for t in st.targets if isinstance(t, ast.Name)]


def _keyword(node: ast.AST, arg: str) -> ast.expr | None:
    if isinstance(node, ast.Call):
        for k in node.keywords:
            if k.arg == arg:
                return k.value
    return None


def documented_codes() -> dict[str, int | str]:
    """code -> status of each row of the table of docs/errors.md."""
    rows = re.findall(r"^\| (\w+) \| (`.*?`) \|", (DOCS / "errors.md").read_text(), re.M)
    return {
        code: int(status) if status.isdigit() else status
        for status, codes in rows
        for code in re.findall(r"`(\w+)`", codes)
    }


def test_the_scan_finds_codes_made_every_way() -> None:
    found = answerable_codes()
    for code in (
        "unknown_label",  # code="..."
        "model_not_found",  # an error class's own code
        "malformed_json",  # inherited by a subclass (TooDeep)
        "wrong_dimension",  # FeatureError(code, message)
        "store_full",  # Condition(code, detail)
        "validation_error",  # _error(status, code, detail)
        "method_not_allowed",  # code = {404: ..., 405: ...}.get(...)
        "store_read_only",  # STORE_STATES
        "stale_model",  # code=STALE, a constant another module declares
    ):
        assert code in found, code
    # Base classes whose every use names its own code do not count.
    assert not {"invalid_input", "too_large", "conflict", "unavailable"} & set(found)


def test_every_code_the_service_answers_is_in_the_table_of_errors() -> None:
    answered = set(answerable_codes()) - NEVER_ANSWERED
    documented = set(documented_codes())
    assert sorted(answered - documented) == [], "add these to docs/errors.md"
    assert sorted(documented - answered) == [], "the service no longer answers these"


def test_the_table_gives_each_code_its_status() -> None:
    table = documented_codes()
    assert table["not_found"] == table["model_not_found"] == 404
    assert table["method_not_allowed"] == 405
    assert table["malformed_json"] == 400 and table["validation_error"] == 422


# --- the OpenAPI document ---------------------------------------------------------------------


def operations() -> Iterator[tuple[str, dict[str, Any]]]:
    for path, ops in OPENAPI["paths"].items():
        for method, op in ops.items():
            if method in METHODS:
                yield f"{method.upper()} {path}", op


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = OPENAPI["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def examples_of(media: dict[str, Any]) -> list[Any]:
    """The examples a page shows for a body: the media type's own, else its schema's (through
    a $ref, or any branch of an anyOf)."""
    if "example" in media:
        return [media["example"]]
    if "examples" in media:
        return [e["value"] for e in media["examples"].values()]
    schema = resolve(media.get("schema", {}))
    branches = [resolve(b) for b in schema.get("anyOf", [schema])]
    return [e for b in branches for e in b.get("examples", [])]


def bodies() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(where, media type, media object) of every body a route takes or answers."""
    for name, op in operations():
        for media_type, media in op.get("requestBody", {}).get("content", {}).items():
            yield f"{name} request", media_type, media
        for status, response in op["responses"].items():
            for media_type, media in response.get("content", {}).items():
                yield f"{name} {status}", media_type, media


def test_the_document_introduces_the_service() -> None:
    info = OPENAPI["info"]
    text = info["description"]
    for heading in ("## Predict, then feedback", "## API keys", "## Errors"):
        assert heading in text
    for word in ("/predict", "/feedback", "prediction_id", "Authorization: Bearer", '"code"'):
        assert word in text, word


def test_every_group_of_routes_is_described() -> None:
    used = {tag for _, op in operations() for tag in op.get("tags", [])}
    described = {t["name"]: t.get("description", "") for t in OPENAPI.get("tags", [])}
    assert sorted(used) == sorted(described)
    assert all(len(d) > 40 for d in described.values()), described


def test_every_body_a_route_takes_or_answers_has_an_example() -> None:
    assert sorted(where for where, _, media in bodies() if not examples_of(media)) == []


@pytest.mark.parametrize(("where", "media_type", "media"), list(bodies()), ids=lambda v: v)
def test_each_example_is_valid_against_its_schema(
    where: str, media_type: str, media: dict[str, Any]
) -> None:
    found = examples_of(media)
    if media_type != "application/json":
        assert all(isinstance(e, str) and e for e in found), where
        return
    schema = {**media.get("schema", {}), "components": OPENAPI["components"]}
    for example in found:
        jsonschema.validate(example, schema)


@pytest.mark.in_process
def test_the_request_examples_are_bodies_the_service_takes(client: httpx.Client) -> None:
    def sent(method: str, path: str, body: Any, status: int = 200) -> Any:
        r = client.request(method, path, json=body)
        assert r.status_code == status, (path, body, r.text)
        return r.json()

    iris, named = openapi_examples.MODEL_SPEC
    assert sent("PUT", "/models/iris", iris, 201).keys() == openapi_examples.MODEL_INFO.keys()
    sent("PUT", "/models/spam", named, 201)
    sent("POST", "/models/iris-copy/import", openapi_examples.EXPORT)
    assert (
        sent("GET", "/models/iris-copy/export", None)["sha256"] == openapi_examples.EXPORT["sha256"]
    )
    for body in openapi_examples.PREDICT_REQUEST:
        assert sent("POST", "/predict", body).keys() == openapi_examples.PREDICTION.keys()
    for body in openapi_examples.LEARN_REQUEST:
        assert sent("POST", "/learn", body).keys() == openapi_examples.LEARN_RESPONSE[0].keys()
    for body in openapi_examples.PREDICT_BATCH_REQUEST:
        answer = sent("POST", "/predict/batch", body)
        assert len(answer["predictions"]) == 2
    (body,) = openapi_examples.LEARN_BATCH_REQUEST
    assert (
        sent("POST", "/learn/batch", body).keys() == openapi_examples.LEARN_BATCH_RESPONSE[0].keys()
    )
    # The examples' prediction ids were made by another service, days ago: well formed, and
    # their wait has run out.
    (body,) = openapi_examples.FEEDBACK_REQUEST
    assert sent("POST", "/feedback", body, 410)["code"] == "prediction_expired"
    (body,) = openapi_examples.FEEDBACK_BATCH_REQUEST
    results = sent("POST", "/feedback/batch", body)["results"]
    assert [r["error"]["code"] for r in results] == ["prediction_expired"] * 2
    for answer, example in [
        (sent("GET", "/models", None), openapi_examples.MODEL_LIST[0]),
        (sent("GET", "/models/iris/weights", None), openapi_examples.WEIGHTS[0]),
        (sent("GET", "/models/iris/metrics", None), openapi_examples.METRICS[0]),
    ]:
        assert answer.keys() == example.keys()
