"""Layers import downward: the learner and the protocol are pure (no Redis, no web framework),
the store knows nothing of the API, the learning code on replicas needs no store, and the
Python client none of the server."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# module -> packages it must not pull in, even indirectly
PURE = {
    "service.learner": ("redis", "fastapi", "starlette", "service.store", "service.api"),
    "service.contract.names": (
        "redis",
        "fastapi",
        "starlette",
        "numpy",
        "service.store",
        "service.api",
    ),
    "service.contract.store_values": (
        "redis",
        "fastapi",
        "starlette",
        "service.store",
        "service.api",
    ),
    "service.contract.store_protocol": (
        "redis",
        "fastapi",
        "starlette",
        "service.store",
        "service.api",
    ),
    "service.engine.sequence": ("redis", "fastapi", "starlette", "service.store", "service.api"),
    "service.engine.replica": ("redis", "fastapi", "starlette", "service.store", "service.api"),
    "service.contract.learn_wire": (
        "redis",
        "fastapi",
        "starlette",
        "service.store",
        "service.api",
    ),
    "service.contract": (
        "redis",
        "fastapi",
        "starlette",
        "service.store",
        "service.api",
        "service.engine",
        "service.admin",
    ),
    "service.store": (
        "fastapi",
        "starlette",
        "service.api",
        "service.engine.learning",
        "service.api.startup",
    ),
    "service.engine.replicas": (
        "fastapi",
        "starlette",
        "service.api",
        "service.engine.learning",
    ),
    "service.metrics": ("service.api", "service.engine.learning", "service.store"),
    "service.engine.batcher": ("redis", "fastapi", "starlette", "service.store", "service.api"),
    # what users of the Python client install and import (client/, a distribution of its own,
    # perceptron-client): nothing of the server, not one service.* module, and not numpy,
    # scikit-learn or River, its optional extras, imported only by a bridge when it is used
    # (tests/test_client_install.py installs it alone)
    "perceptron_client": (
        "service",
        "redis",
        "fastapi",
        "starlette",
        "uvicorn",
        "fakeredis",
        "numpy",
        "pybase64",
        "sklearn",
        "river",
        "joblib",
    ),
    # each bridge: its own library, none of the server's, nor the other bridge's
    "perceptron_client.sklearn_bridge": ("service", "redis", "fastapi", "starlette", "river"),
    "perceptron_client.river_bridge": ("service", "redis", "fastapi", "starlette", "sklearn"),
}


def _forbidden(imported: set[str], bad: tuple[str, ...]) -> list[str]:
    return sorted(
        m
        for m in imported
        if m.split(".")[0] in bad or any(m == p or m.startswith(p + ".") for p in bad)
    )


@pytest.mark.servers  # a fresh interpreter per module
@pytest.mark.parametrize("module", sorted(PURE))
def test_a_module_does_not_pull_in_a_higher_layer(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {PURE[module]!r} "
        f"or any(m == p or m.startswith(p + '.') for p in {PURE[module]!r})]\n"
        "print(','.join(sorted(bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"


# The same rule read from the source, in the fast layer: every import a module makes when it is
# loaded (its top-level statements, ``if TYPE_CHECKING`` left out), followed through the
# project's own modules. A package that a third-party package loads is seen only at run time.
PACKAGES = {"service": ROOT / "service", "perceptron_client": ROOT / "client/perceptron_client"}


def _source(module: str) -> Path | None:
    top, *rest = module.split(".")
    if top not in PACKAGES:
        return None
    base = PACKAGES[top].joinpath(*rest)
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _loaded(node: ast.stmt) -> list[ast.stmt]:
    """The statements a module runs when loaded, through its top-level if and try blocks."""
    if isinstance(node, ast.If):
        if "TYPE_CHECKING" in ast.unparse(node.test):
            return list(node.orelse)
        return [*node.body, *node.orelse]
    if isinstance(node, ast.Try):
        return [*node.body, *(s for h in node.handlers for s in h.body), *node.orelse]
    return [node]


def _imports(module: str) -> set[str]:
    """What loading ``module`` imports itself, as absolute module names."""
    path = _source(module)
    assert path is not None, module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If | ast.Try) and _loaded(node) != [node]:
            todo.extend(_loaded(node))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            for alias in node.names:  # ``from package import module``
                if _source(f"{base}.{alias.name}") is not None:
                    found.add(f"{base}.{alias.name}")
    return found


def _closure(module: str) -> set[str]:
    """Every module loading ``module`` imports, through the project's own (and their
    packages: loading a.b.c runs a and a.b first)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            m = ".".join(parts[:i])
            if m in seen:
                continue
            seen.add(m)
            if _source(m) is not None:
                todo.extend(_imports(m))
    return seen


@pytest.mark.parametrize("module", sorted(PURE))
def test_a_module_does_not_import_a_higher_layer_in_its_source(module: str) -> None:
    assert _forbidden(_closure(module), PURE[module]) == []


def test_the_source_walk_sees_what_a_module_imports() -> None:
    """The walk finds imports, relative ones included: the api imports Starlette, and the
    store imports redis through its own modules."""
    assert _forbidden(_closure("service.api.edge"), ("starlette",))
    assert "redis" in _closure("service.store")
    assert "service.learner.config" in _closure("service.learner")


def test_the_packages_top_level_holds_only_what_every_layer_shares() -> None:
    """The tree shows the layers: beside its folders, ``service/`` holds the settings, the
    errors and the app that assembles them, nothing else."""
    top = sorted(p.name for p in (ROOT / "service").glob("*.py"))
    assert top == ["__init__.py", "app.py", "errors.py", "settings.py"]
    folders = sorted(p.name for p in (ROOT / "service").iterdir() if (p / "__init__.py").exists())
    assert folders == [
        "admin",
        "api",
        "apidocs",
        "cli",
        "contract",
        "dashboard",
        "engine",
        "learner",
        "metrics",
        "replay",
        "store",
    ]


MODULE_MOST_LINES = 400
FUNCTION_MOST_LINES = 60
# Functions still longer, each held to its length now: none may grow, and none joins it (none
# is, now).
LONGER: dict[tuple[str, str], int] = {}


def test_no_module_over_400_lines_nor_a_function_over_60() -> None:
    """Small modules whose names say what they do, and functions read at once."""
    long_modules, long_functions = [], {}
    for path in sorted((ROOT / "service").rglob("*.py")):
        source = path.read_text()
        where = str(path.relative_to(ROOT))
        if source.count("\n") > MODULE_MOST_LINES:
            long_modules.append(where)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_MOST_LINES:
                    long_functions[(where, node.name)] = lines
    assert long_modules == []
    assert long_functions.keys() == LONGER.keys()
    assert all(long_functions[k] <= LONGER[k] for k in LONGER), long_functions


MOST_POSITIONAL = 5


def test_no_call_passes_more_than_five_values_by_position() -> None:
    """A call of six values or more names them (keywords, or one typed value): a reader sees
    which is which, and a parameter added or moved cannot shift the others unseen."""
    found = []
    for path in sorted((ROOT / "service").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                given = [a for a in node.args if not isinstance(a, ast.Starred)]
                if len(given) > MOST_POSITIONAL:
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.append(f"{where} {ast.unparse(node.func)}")
    assert found == []


# The packages of service/ by layer, lowest first (the top level's modules by their names): a
# module imports from its own package and from those below it, never from one above, so no two
# packages import each other.
LAYERS = (
    ("errors", "settings"),
    ("learner",),
    ("contract",),
    ("store", "metrics"),
    ("engine",),
    ("admin",),
    ("api", "apidocs", "dashboard"),
    ("app", "replay"),
    ("cli",),
)


def _package_imports() -> dict[tuple[str, str], str]:
    """(importing package, imported package) -> a module of the first that imports the
    second, for every import between two packages of service/ (lazy ones included)."""
    found: dict[tuple[str, str], str] = {}
    for path in sorted((ROOT / "service").rglob("*.py")):
        parts = path.relative_to(ROOT / "service").parts
        package = parts[0] if len(parts) > 1 else path.stem
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                top, _, rest = name.partition(".")
                other = rest.split(".")[0]
                if top == "service" and other and other != package:
                    found.setdefault((package, other), str(path.relative_to(ROOT)))
    return found


def test_no_import_runs_up_a_layer() -> None:
    floor = {p: i for i, names in enumerate(LAYERS) for p in names}
    packages = {
        p.stem if p.is_file() else p.name
        for p in (ROOT / "service").iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    } - {"__init__"}
    assert packages <= floor.keys(), packages - floor.keys()
    imports = _package_imports()
    assert ("cli", "replay") in imports  # (the walk sees imports between packages)
    up = {f"{where}: {a} -> {b}" for (a, b), where in imports.items() if floor[b] > floor[a]}
    assert sorted(up) == []


def test_past_five_values_a_function_takes_them_by_keyword() -> None:
    """A function of service/ with more than five parameters (``self`` aside) takes those
    past the fifth by keyword only: no call can pass them by position."""
    found = []
    for path in sorted((ROOT / "service").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                given = node.args.posonlyargs + node.args.args
                named = [a for a in given if a.arg not in ("self", "cls")]
                if len(named) > MOST_POSITIONAL:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert found == []


def test_no_file_name_twice_under_service() -> None:
    """Every module of service/ found by its name alone (``__init__.py`` aside)."""
    names = [p.name for p in (ROOT / "service").rglob("*.py") if p.name != "__init__.py"]
    assert sorted({n for n in names if names.count(n) > 1}) == []
