"""``perceptron models from-sklearn`` and ``to-sklearn`` against ``perceptron serve --workers 2``
on a real redis-server: the models they make and the files they write predict alike (run as
processes), what they refuse exits 2 in one line (a file or an estimator before any request,
in the fast layer), and the block of docs/cli.md runs as pasted."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.linear_model import LogisticRegression, Perceptron
from sklearn.tree import DecisionTreeClassifier

from perceptron_client import Client
from service.cli.loopback import free_port
from service.cli.main import main

from .servers import ServiceProcess
from .test_first_session import section, shell_blocks, shown_answers
from .test_models_command import EXIT, as_json, perceptron

ROOT = Path(__file__).resolve().parents[1]
X, Y = load_wine(return_X_y=True)
TRAIN, TEST = slice(0, None, 2), slice(1, None, 2)


@pytest.fixture
def api(two_workers: ServiceProcess) -> Iterator[Client]:
    with Client(two_workers.url) as c:
        yield c


def saved(tmp_path: Path, estimator: Any, name: str = "estimator.joblib") -> str:
    path = tmp_path / name
    joblib.dump(estimator, path)
    return str(path)


@pytest.mark.servers
def test_a_model_from_a_file_and_back_to_one(api: Client, tmp_path: Path) -> None:
    est = LogisticRegression(max_iter=10_000).fit(X[TRAIN], Y[TRAIN])
    made = perceptron(
        "models", "from-sklearn", "wine-cli", saved(tmp_path, est), "--multiclass", "ovr",
        "--learning-rate", "0.5", "--averaged", "--json", url=api.base_url,
    )  # fmt: skip
    config = as_json(made)["config"]
    assert (config["classes"], config["n_features"], config["multiclass"]) == ([0, 1, 2], 13, "ovr")
    assert (config["learning_rate"], config["averaged"]) == (0.5, True)
    served = [p.label for p in api.predict_batch("wine-cli", X[TEST]).predictions]
    assert served == est.predict(X[TEST]).tolist()

    out = tmp_path / "back.joblib"
    wrote = perceptron("models", "to-sklearn", "wine-cli", str(out), url=api.base_url)
    assert wrote.returncode == 0, wrote.stderr
    assert wrote.stdout == (
        f"wrote 'wine-cli' to {out}: a fitted sklearn.linear_model.Perceptron (3 classes, "
        "13 features)\n"
    )
    back = joblib.load(out)
    assert isinstance(back, Perceptron) and back.predict(X[TEST]).tolist() == served
    assert np.array_equal(back.coef_, est.coef_)


def models(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str]:
    """``perceptron models ARGS`` in this process (scikit-learn is imported already, which
    costs a new process seconds): its exit code and what it wrote to stderr."""
    code = main(["models", *args, "--url", url])
    return code, capsys.readouterr().err


def test_what_a_file_or_the_bridge_refuses_exits_2_in_one_line_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # a request would exit 6, not 2
    not_estimator = tmp_path / "model.json"
    not_estimator.write_text('{"format": "perceptron-model"}')
    cases = [
        (str(tmp_path / "none.joblib"), "cannot read", "no such file"),
        (str(not_estimator), "cannot read an estimator from", "(a joblib or pickle file)"),
        (
            saved(tmp_path, Perceptron(), "unfitted.joblib"),
            "This Perceptron instance",
            "not fitted",
        ),
        (
            saved(tmp_path, DecisionTreeClassifier().fit(X, Y), "tree.joblib"),
            "DecisionTreeClassifier has no coef_",
            "not a pipeline",
        ),
    ]
    for file, said, why in cases:
        code, err = models(capsys, nowhere, "from-sklearn", "refused", file)
        assert code == EXIT["usage"], err
        assert err.startswith("perceptron models: ") and said in err and why in err
        assert err.count("\n") == 1, err  # one line, no traceback

    unwritable = tmp_path / "no" / "x.joblib"
    assert models(capsys, nowhere, "to-sklearn", "m", str(unwritable)) == (
        EXIT["usage"],
        f"perceptron models: cannot write {unwritable}: the folder {unwritable.parent} does not "
        "exist\n",
    )


@pytest.mark.servers
def test_a_model_scikit_learn_cannot_express_exits_2_and_writes_nothing(
    api: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.create_model("votes", classes=[0, 1, 2], n_features=2, multiclass="ovo")
    api.create_model("named", classes=[0, 1])
    for name, why in [("votes", "'ovo'"), ("named", "named features")]:
        out = tmp_path / f"{name}.joblib"
        code, err = models(capsys, api.base_url, "to-sklearn", name, str(out))
        assert code == EXIT["usage"] and why in err and err.count("\n") == 1, err
        assert not out.exists()
    code, err = models(capsys, api.base_url, "to-sklearn", "nothing", str(tmp_path / "x.joblib"))
    assert code == EXIT["not_found"] and "does not exist" in err


@pytest.mark.servers
def test_the_page_of_the_command_line_runs_as_pasted(api: Client, tmp_path: Path) -> None:
    (block,) = shell_blocks(section("scikit-learn, both ways", ROOT / "docs" / "cli.md"))
    script = block.replace(".venv/bin/python", sys.executable).replace(
        ".venv/bin/perceptron", str(Path(sys.executable).with_name("perceptron"))
    )
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PERCEPTRON_URL": api.base_url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for line in shown_answers(block):
        assert line in done.stdout.splitlines(), (line, done.stdout)
    back = joblib.load(tmp_path / "wine-perceptron.joblib")
    served = [p.label for p in api.predict_batch("wine", X).predictions]
    assert back.predict(X).tolist() == served
