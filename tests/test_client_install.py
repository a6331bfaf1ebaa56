"""The Python client installs alone (client/, the distribution perceptron-client): built into a
wheel, installed with its dependencies (the lock's versions) into an empty environment of the
machine's own Python, it brings nothing of the server (no FastAPI, uvicorn, Redis, fakeredis,
no ``service`` package, not numpy without the extra ``numpy``), ships ``py.typed``, and talks
to a running service; its bridges name the extras they need (``sklearn``, ``river``), and work
once those are installed. Declaring a server dependency in client/pyproject.toml, or importing
server code, fails here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.servers  # builds, installs, runs another interpreter

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "client"
LOCK = ROOT / "requirements" / "test.txt"  # every locked package, at the versions tested

# import names that must not be found where only the client is installed
SERVER_IMPORTS = ("fastapi", "starlette", "uvicorn", "redis", "fakeredis", "service", "pybase64")

# Run in the client's environment, from a folder outside the checkout: what is installed there,
# then the client against the service (argv: its URL, a model name).
PROBE = r"""
import asyncio, importlib.util, json, sys
from importlib import metadata, resources

url, model = sys.argv[1], sys.argv[2]
names = json.loads(sys.argv[3])
report = {
    "found": sorted(m for m in names + ["numpy"] if importlib.util.find_spec(m) is not None),
    "distributions": sorted(d.metadata["Name"].lower().replace("_", "-")
                            for d in metadata.distributions()),
}

import perceptron_client as pc
from perceptron_client import AsyncClient, Client, NotFoundError

report["file"] = pc.__file__
report["py_typed"] = resources.files("perceptron_client").joinpath("py.typed").is_file()
report["imported"] = sorted({m.split(".")[0] for m in sys.modules} & set(names + ["numpy"]))

with Client(url) as c:
    info = c.create_model(model, classes=[-1, 1], n_features=3)
    p = c.predict(model, [1.0, 0.5, -2.0])
    f = c.feedback(p.prediction_id, -p.label)  # the other class: a mistake, learned
    after = c.read_model(model)
    try:
        c.predict(model + "-none", [1.0, 0.5, -2.0])
        missing = None
    except NotFoundError as e:
        missing = [e.status, e.code]
    first = next(iter(c.events(model)))
    report["event"] = [first.kind, first.data.counters.mistakes]


async def together():
    async with AsyncClient(url) as c:
        ps = await asyncio.gather(*(c.predict(model, [0.0, 1.0, 1.0]) for _ in range(3)))
        fb = await c.feedback_batch([(q.prediction_id, 1) for q in ps])
        return ps, fb

ps, fb = asyncio.run(together())
report["answers"] = {
    "types": [type(x).__name__ for x in (info, p, f, after, ps[0], fb)],
    "ours": all(type(x).__module__ == "perceptron_client.answers"
                for x in (info, p, f, after, ps[0], fb)),
    "label": [type(p.label).__name__, p.label in (-1, 1)],
    "feedback": [f.mistake, f.updated, f.version],
    "mistakes": after.counters.mistakes,
    "missing": missing,
    "batch": [r.error is None for r in fb.results],
}
report["imported_after"] = sorted({m.split(".")[0] for m in sys.modules} & set(names))

# The bridges, without their extras: an ImportError that names the extra, nothing sent.
report["bridges"] = []
with Client(url) as c:
    try:
        c.to_sklearn(model)
    except ImportError as e:
        report["bridges"].append(str(e))
try:
    import perceptron_client.river_bridge
except ImportError as e:
    report["bridges"].append(str(e))
print(json.dumps(report))
"""

# With the extras sklearn and river: a warm start from a fitted estimator and back, and River's
# progressive validation against the live model.
WITH_BRIDGES = r"""
import json, sys
from river import datasets, evaluate, metrics
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from perceptron_client import Client
from perceptron_client.river_bridge import ServiceClassifier

url, model = sys.argv[1], sys.argv[2]
X, y = load_iris(return_X_y=True)
est = LogisticRegression(max_iter=1000).fit(X[::2], y[::2])
with Client(url) as c:
    c.from_sklearn(model, est)
    served = [p.label for p in c.predict_batch(model, X[1::2]).predictions]
    back = c.to_sklearn(model)
    c.create_model(model + "-river", classes=[0, 1], n_features=9)
    accuracy = evaluate.progressive_val_score(
        list(datasets.Phishing())[:200], ServiceClassifier(c, model + "-river"), metrics.Accuracy()
    )
    counters = c.read_model(model + "-river").counters
print(json.dumps({
    "warm": served == est.predict(X[1::2]).tolist(),
    "back": back.predict(X[1::2]).tolist() == served,
    "kind": type(back).__name__,
    "river": [accuracy.get(), 1 - counters.mistakes / counters.seen, counters.feedback],
}))
"""

# With the extra numpy: a 2-D array (sent packed) and numpy labels.
WITH_NUMPY = r"""
import json, sys
import numpy as np
from perceptron_client import Client, LearnBatchResponse

url, model = sys.argv[1], sys.argv[2]
with Client(url) as c:
    x = np.array([[1.0, 0.5, -2.0], [0.0, 1.0, 1.0], [2.0, -1.0, 0.0]])
    b = c.learn_batch(model, x, np.array([1, -1, 1]))
    p = c.predict(model, x[0])
print(json.dumps({"batch": isinstance(b, LearnBatchResponse), "n": len(b.labels),
                  "label": type(p.label).__name__}))
"""


@dataclass
class Installed:
    """An environment with the client alone in it."""

    root: Path
    python: Path
    wheel: Path
    uv: Path

    def run(self, code: str, *args: str) -> dict[str, Any]:
        out = subprocess.run(
            [str(self.python), "-c", code, *args], cwd=self.root, capture_output=True,
            text=True, timeout=120, env=_clean_env(),
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        result: dict[str, Any] = json.loads(out.stdout)
        return result

    def install(self, *requirements: str) -> None:
        """Install with the dependencies, at the lock's versions: offline from uv's cache when
        it holds them (deploy/setup.sh has filled it with the same files), else from the
        index."""
        cmd = [str(self.uv), "pip", "install", "--quiet", "--python", str(self.python),
               *requirements, "-c", str(LOCK)]  # fmt: skip
        env = _clean_env()
        offline = subprocess.run([*cmd, "--offline"], capture_output=True, text=True, env=env,
                                 timeout=300)  # fmt: skip
        if offline.returncode != 0:
            online = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
            assert online.returncode == 0, (offline.stderr[-2000:], online.stderr[-3000:])


def _clean_env() -> dict[str, str]:
    """This environment without what would point another interpreter at the checkout or at the
    test's own environment."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "UV_PYTHON", "PYTHONSTARTUP")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement (``fastapi>=0.110`` -> fastapi)."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def server_only_distributions() -> set[str]:
    """What the service depends on and the client does not (from the two pyproject.toml)."""
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    client = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {_name(r) for r in server} - {_name(r) for r in client}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The client's wheel, built from a copy of client/ (nothing, build/ or *.egg-info, is
    left in the checkout) by this environment's pip and setuptools (requirements/build.txt)."""
    tmp = tmp_path_factory.mktemp("client-wheel")
    src = tmp / "src"
    shutil.copytree(
        CLIENT, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    )
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         str(src), "--wheel-dir", str(tmp / "dist")],
        capture_output=True, text=True, timeout=300, env=_clean_env(),
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (whl,) = (tmp / "dist").glob("perceptron_client-*.whl")
    return whl


@pytest.fixture
def installed(wheel: Path, tmp_path: Path) -> Installed:
    """An empty environment (no pip either) of the machine's own Python, not this venv's."""
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    uv = Path(sys.executable).with_name("uv")  # deploy/setup.sh installs it into .venv
    assert uv.exists(), f"{uv}: run bash deploy/setup.sh test"
    return Installed(tmp_path, venv / "bin" / "python", wheel, uv)


def test_the_wheel_declares_only_the_clients_dependencies(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [
            line.removeprefix("Requires-Dist: ")
            for line in whl.read(meta).decode().splitlines()
            if line.startswith("Requires-Dist: ")
        ]
    assert sorted(requires) == [
        "httpx-sse>=0.4",
        "httpx>=0.27",
        'numpy>=1.26; extra == "numpy"',
        'numpy>=1.26; extra == "sklearn"',
        "pydantic>=2.6",
        'river>=0.21; extra == "river"',
        'scikit-learn>=1.4; extra == "sklearn"',
    ]
    assert "perceptron_client/py.typed" in names
    assert not [n for n in names if n.startswith("service/")]


def test_the_client_alone_talks_to_the_service(installed: Installed, client: httpx.Client) -> None:
    installed.install(str(installed.wheel))
    url = str(client.base_url).rstrip("/")
    report = installed.run(PROBE, url, "installed", json.dumps(list(SERVER_IMPORTS)))

    # Nothing of the server is installed, or importable: the client's own dependencies only.
    assert report["found"] == [], report["found"]
    dists = set(report["distributions"])
    assert {"perceptron-client", "httpx", "httpx-sse", "pydantic"} <= dists, dists
    assert not dists & (server_only_distributions() | {"perceptron-service"}), dists
    assert "numpy" not in dists  # only with the extra
    # The installed package, with its marker for type checkers, importing none of them.
    assert report["file"].startswith(str(installed.root / "venv")), report["file"]
    assert report["py_typed"] is True
    assert report["imported"] == [] and report["imported_after"] == []

    answers = report["answers"]
    assert answers["types"] == [
        "ModelInfo", "PredictResponse", "FeedbackResponse", "ModelInfo", "PredictResponse",
        "FeedbackBatchResponse",
    ]  # fmt: skip
    assert answers["ours"] is True
    assert answers["label"] == ["int", True]
    assert answers["feedback"] == [True, True, 1]  # the other class: a mistake, learned
    assert answers["mistakes"] == 1
    assert answers["missing"] == [404, "model_not_found"]
    assert report["event"] == ["metrics", 1]  # the stream's first event, read as ModelMetrics
    assert answers["batch"] == [True, True, True]
    # ... and the service saw it all.
    counters = client.get("/models/installed").json()["counters"]
    assert counters["predictions"] == 4 and counters["feedback"] == 4, counters
    # The bridges say which extra they need.
    assert [b.rsplit(": ", 1)[-1] for b in report["bridges"]] == [
        "pip install 'perceptron-client[sklearn]'",
        "pip install 'perceptron-client[river]'",
    ]


def test_the_extras_sklearn_and_river_bring_the_bridges(
    installed: Installed, client: httpx.Client
) -> None:
    installed.install(f"perceptron-client[sklearn,river] @ {installed.wheel.as_uri()}")
    out = installed.run(WITH_BRIDGES, str(client.base_url).rstrip("/"), "bridged")
    assert (out["warm"], out["back"], out["kind"]) == (True, True, "Perceptron")
    river_accuracy, one_minus_mistake_rate, feedback = out["river"]
    assert river_accuracy == one_minus_mistake_rate and feedback == 200


def test_the_extra_numpy_brings_numpy_and_arrays_work(
    installed: Installed, client: httpx.Client
) -> None:
    installed.install(f"perceptron-client[numpy] @ {installed.wheel.as_uri()}")
    url = str(client.base_url).rstrip("/")
    assert client.put("/models/arrays", json={"classes": [-1, 1], "n_features": 3}).is_success
    out = installed.run(WITH_NUMPY, url, "arrays")
    assert out == {"batch": True, "n": 3, "label": "int"}
    assert client.get("/models/arrays").json()["counters"]["learned"] == 3
