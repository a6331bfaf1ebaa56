"""``perceptron models``: real commands against a running service, their output and exit codes.

Each command is the console command run as its own process (``python -m service.cli.main``), with
the service's URL and key from options or the environment, as a script would run it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from perceptron_client import ModelSpec
from service.cli.loopback import free_port
from service.cli.models_command import add_arguments

from .conftest import MakeService

pytestmark = pytest.mark.servers  # perceptron processes against a service

ROOT = Path(__file__).resolve().parents[1]
# The exit codes docs/cli.md documents for scripts.
EXIT = {"refused": 1, "usage": 2, "not_found": 3, "conflict": 4, "auth": 5, "unavailable": 6}
ADMIN, READER = "admin-key-" + "a" * 24, "predict-key-" + "p" * 24


def perceptron(
    *args: str, url: str | None = None, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``perceptron ARGS`` as a process; ``url`` goes in PERCEPTRON_URL."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PERCEPTRON_")}
    if url is not None:
        environ["PERCEPTRON_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "service.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**environ, **env},
    )


def as_json(r: subprocess.CompletedProcess[str]) -> Any:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_create_has_a_flag_for_every_field_of_a_configuration() -> None:
    """perceptron models create reads one option per field of the client's ModelSpec (which
    tests/test_client_answers.py holds to the service's)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["create", "m"])
    assert set(ModelSpec.model_fields) <= set(vars(args))


def test_a_model_through_its_life(client: httpx.Client, tmp_path: Path) -> None:
    url = str(client.base_url).rstrip("/")
    listed = as_json(perceptron("models", "list", "--json", url=url))
    assert [m["name"] for m in listed["models"]] == ["default"]

    made = perceptron(
        "models", "create", "iris", "--classes", "setosa,versicolor,virginica",
        "--n-features", "4", "--averaged", "--json", url=url,
    )  # fmt: skip
    config = as_json(made)["config"]
    assert (config["classes"], config["n_features"], config["averaged"]) == (
        ["setosa", "versicolor", "virginica"],
        4,
        True,
    )
    assert client.get("/models/iris").json()["config"] == config
    # The same again: nothing changes; another configuration: the conflict's exit code.
    assert (
        perceptron("models", "create", "iris", "--config", json.dumps(config), url=url).returncode
        == 0
    )
    clash = perceptron("models", "create", "iris", "--classes", "a,b", url=url)
    assert clash.returncode == EXIT["conflict"] == 4
    assert "409 model_exists" in clash.stderr and clash.stdout == ""
    ints = as_json(perceptron("models", "create", "bin", "--classes=-1,1", "--json", url=url))
    assert ints["config"]["classes"] == [-1, 1]  # integer labels stay integers
    # The plain form too, though argparse alone would take -1,1 for an option
    plain = as_json(perceptron("models", "create", "neg", "--classes", "-1,0,1", "--json", url=url))
    assert plain["config"]["classes"] == [-1, 0, 1]

    body = {"model": "iris", "features": [[5.1, 3.5, 1.4, 0.2], [6.3, 3.3, 6.0, 2.5]]}
    assert client.post("/learn/batch", json={**body, "labels": ["setosa", "virginica"]}).is_success

    shown = perceptron("models", "show", "iris", url=url)
    assert shown.returncode == 0
    lines = dict(line.split(None, 1) for line in shown.stdout.splitlines())
    assert lines["classes"] == "setosa, versicolor, virginica" and lines["learned"] == "2"
    table = perceptron("models", "list", url=url).stdout.splitlines()
    assert table[0].split() == ["NAME", "CLASSES", "FEATURES", "VERSION", "SEEN", "MISTAKES"]
    assert [row.split()[0] for row in table[1:]] == ["bin", "default", "iris", "neg"]

    # Export to a file, import it under another name, from the file and from stdin.
    saved = tmp_path / "iris.json"
    exported = perceptron("models", "export", "iris", "-o", str(saved), url=url)
    assert exported.returncode == 0 and str(saved) in exported.stdout
    assert json.loads(saved.read_text()) == client.get("/models/iris/export").json()
    copy = as_json(perceptron("models", "import", "copy", str(saved), "--json", url=url))
    assert (copy["name"], copy["counters"]["learned"]) == ("copy", 2)
    assert (
        client.get("/models/copy/weights").json()["rows"]
        == (client.get("/models/iris/weights").json()["rows"])
    )
    whole = json.loads(perceptron("models", "export", "iris", "--checkpoints", url=url).stdout)
    assert whole == client.get("/models/iris/export?checkpoints=true").json()
    assert "checkpoints" in whole
    piped = perceptron("models", "export", "iris", url=url).stdout
    assert (
        as_json(perceptron("models", "import", "piped", "--json", url=url, stdin=piped))["version"]
        == (client.get("/models/iris").json()["version"])
    )

    reset = as_json(perceptron("models", "reset", "iris", "--json", url=url))
    assert (reset["version"], reset["counters"]["learned"]) == (0, 0)
    assert client.get("/models/iris").json()["counters"]["learned"] == 0

    assert perceptron("models", "delete", "iris", url=url).returncode == 0
    assert client.get("/models/iris").status_code == 404
    gone = perceptron("models", "show", "iris", "--json", url=url)
    assert gone.returncode == EXIT["not_found"] == 3
    assert json.loads(gone.stderr)["code"] == "model_not_found"
    assert perceptron("models", "delete", "iris", url=url).returncode == 3
    assert perceptron("models", "delete", "iris", "--missing-ok", url=url).returncode == 0


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["models", "create", "x", "--classes", "a"], "refused", "'classes' has 1 item"),
        (["models", "import", "x", "/nonexistent/file.json"], "usage", "cannot read"),
        (["models", "import", "x.json"], "usage", "no FILE given"),  # (the file as the name)
        (
            ["models", "create", "x", "--config", '{"n_features": 4}', "--n-features", "5"],
            "usage",
            "--config and --n-features give 'n_features' two values",
        ),  # fmt: skip
        (["models", "create", "x", "--config", "[1]"], "usage", "not a JSON object"),
        (["models", "frobnicate"], "usage", "invalid choice"),
        (["models", "show"], "usage", "NAME"),
        (["models", "drift", ""], "usage", "'' is not a model's name"),
        (["models", "show", ".."], "usage", "'..' is not a model's name"),
        (["models", "create", "x" * 65], "usage", "is not a model's name"),
        (["models", "create", "x", "--learning-rate", "nan"], "usage", "must be a finite number"),
        (["models", "create", "x", "--timeout", "-1"], "usage", "must be a positive number"),
        (["models", "undo", "x", "--from-time", "inf"], "usage", "must be a finite number"),
        (["models", "add-challenger", "x", ""], "usage", "A challenger's id is 1 to 64"),
        (["models", "delete-challenger", "x", "a/b"], "usage", "A challenger's id is 1 to 64"),
        (["models", "challengers", "x", "served"], "usage", "A challenger's id is 1 to 64"),
        (["models", "promote", "x", "p", "--demote-as", ""], "usage", "A challenger's id"),
        (["serve", "--port", "114535"], "usage", "must be a port from 1 to 65535"),
        (["serve", "--workers", "0"], "usage", "must be at least 1"),
        (["models", "undo", "x", "--source", "bad key!"], "usage", "is not an API key's name"),
        (["models", "create", "x", "--url", "http://[::1"], "usage", "is not a URL"),
        (["models", "list", "--url", "localhost:8000"], "usage", "is not a service's URL"),
        (["replay", "--dataset", "digits", "--url", "ftp://x"], "usage", "is not a service's"),
    ],
)
def test_exit_codes_of_refused_and_wrong_commands(
    client: httpx.Client, args: list[str], code: str, said: str
) -> None:
    r = perceptron(*args, url=str(client.base_url).rstrip("/"))
    assert r.returncode == EXIT[code], r.stderr
    assert said in r.stderr
    assert client.get("/models/x").status_code == 404  # nothing was made


def test_a_mistyped_name_is_answered_with_the_command_and_the_names_it_may_mean(
    client: httpx.Client,
) -> None:
    url = str(client.base_url).rstrip("/")
    assert client.put("/models/iris", json={"n_features": 4}).is_success
    for action in ("show", "reset", "export"):
        r = perceptron("models", action, "irs", url=url)
        assert r.returncode == EXIT["not_found"], r.stderr
        assert r.stderr == (
            "perceptron models: model 'irs' does not exist; did you mean 'iris'? To create it: "
            "perceptron models create irs --classes A,B,... (options: perceptron models create "
            "--help)\n"
        )
    gone = perceptron("models", "delete", "irs", url=url)
    assert (gone.returncode, gone.stderr) == (
        3,
        "perceptron models: model 'irs' does not exist; did you mean 'iris'?\n",
    )
    far = perceptron("models", "show", "zebra", url=url)
    assert far.returncode == 3 and "did you mean" not in far.stderr
    assert "perceptron models create zebra" in far.stderr and "PUT" not in far.stderr


def test_a_file_that_cannot_be_written_is_one_line_not_a_traceback(
    client: httpx.Client, tmp_path: Path
) -> None:
    url = str(client.base_url).rstrip("/")
    for path, cause in [
        (tmp_path / "no" / "iris.json", f"the folder {tmp_path / 'no'} does not exist"),
        (tmp_path, "it is a folder, not a file"),
    ]:
        r = perceptron("models", "export", "default", "-o", str(path), url=url)
        assert r.returncode == EXIT["usage"], r.stderr
        assert r.stderr == f"perceptron models: cannot write {path}: {cause}\n"


def test_an_unreachable_service_is_told_apart() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    r = perceptron("models", "list", url=url)
    assert r.returncode == EXIT["unavailable"] == 6
    assert f"cannot reach {url}" in r.stderr
    # --url wins over the environment.
    assert perceptron("models", "list", "--url", url, url="http://127.0.0.1:1").returncode == 6


def test_the_key_comes_from_an_option_or_the_environment(make_service: MakeService) -> None:
    service = make_service(auth=True, api_keys=f"admin:{ADMIN},predict:{READER}")
    url = str(service.base_url).rstrip("/")
    refused = perceptron("models", "list", url=url)
    assert refused.returncode == EXIT["auth"] == 5 and "401" in refused.stderr
    assert perceptron("models", "list", "--api-key", READER, url=url).returncode == 0
    weak = perceptron("models", "delete", "default", url=url, PERCEPTRON_API_KEY=READER)
    assert weak.returncode == 5 and "403" in weak.stderr
    assert service.get("/models/default", headers={"x-api-key": ADMIN}).status_code == 200
    strong = perceptron("models", "delete", "default", url=url, PERCEPTRON_API_KEY=ADMIN)
    assert strong.returncode == 0
    assert service.get("/models/default", headers={"x-api-key": ADMIN}).status_code == 404


def test_checkpoints_and_a_rollback_from_the_command_line(make_service: MakeService) -> None:
    http = make_service(default_model=False, compact_every=3, checkpoint_every=5)
    url = str(http.base_url).rstrip("/")
    http.put("/models/m", json={"n_features": 2})
    weights = {}
    for i in range(12):
        http.post("/learn", json={"model": "m", "features": [1.0, float(i)], "label": (-1) ** i})
        doc = http.get("/models/m/export").json()
        weights[doc["version"]] = doc["weights"]
    listed = as_json(perceptron("models", "checkpoints", "m", "--json", url=url))
    assert listed["restorable_from"] == 0 and listed["version"] == max(weights)
    table = perceptron("models", "checkpoints", "m", url=url)
    assert table.returncode == 0 and "every version from 0 on can be restored" in table.stdout
    assert "scheduled" in table.stdout
    v = sorted(weights)[2]
    back = perceptron("models", "rollback", "m", "--version", str(v), url=url)
    assert back.returncode == 0 and f"version {v} again" in back.stdout, back.stderr
    assert http.get("/models/m/export").json()["weights"] == weights[v]
    gone = perceptron("models", "rollback", "m", "--version", "999", url=url)
    assert gone.returncode == EXIT["conflict"] and "version_not_kept" in gone.stderr
    assert perceptron("models", "rollback", "m", url=url).returncode == EXIT["usage"]


def test_every_action_lists_its_exit_codes_in_its_help() -> None:
    """Each action's --help ends with the exit-code table docs/cli.md gives."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    actions = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {"rollback", "challengers", "add-challenger", "promote", "undo"} <= set(actions.choices)
    for name, sub in actions.choices.items():
        text = sub.format_help()
        assert "exit codes:" in text and "4  a conflict" in text, name


def test_show_prints_every_setting_aligned(client: httpx.Client) -> None:
    url = str(client.base_url).rstrip("/")
    spec = {"classes": ["a", "b"], "n_features": 2, "default_label": "b"}
    assert client.put("/models/shown", json=spec).status_code == 201
    shown = perceptron("models", "show", "shown", url=url)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.split() == ["default_label", "b"] for line in lines), shown.stdout
    assert any(line.startswith("defaulted_mistakes ") for line in lines)
    starts = {len(line) - len(line.split(None, 1)[1]) for line in lines}
    assert len(starts) == 1, shown.stdout  # every value in one column


def test_challengers_a_promotion_and_an_undo_from_the_command_line(client: httpx.Client) -> None:
    """Add, list, show, promote, delete challengers; list kept updates and undo them: each
    action's output, its JSON and its exit codes at its errors."""
    url = str(client.base_url).rstrip("/")
    assert client.put("/models/c", json={"n_features": 2}).status_code == 201
    for i in range(20):
        client.post("/learn", json={"model": "c", "features": [1.0, i - 9.5], "label": (-1) ** i})
    added = perceptron(
        "models", "add-challenger", "c", "pa", "--algorithm", "pa1", "--C", "0.1",
        "--from-served", url=url,
    )  # fmt: skip
    assert added.returncode == 0 and "added 'pa'" in added.stdout and "pa1 C=0.1" in added.stdout
    assert perceptron("models", "add-challenger", "c", "pa", url=url).returncode == EXIT["conflict"]
    bad = perceptron("models", "add-challenger", "c", "x", "--C", "0", url=url)
    assert bad.returncode == EXIT["refused"] and "invalid_config" in bad.stderr + bad.stdout
    for i in range(10):
        client.post("/learn", json={"model": "c", "features": [i - 4.5, 1.0], "label": (-1) ** i})
    listed = as_json(perceptron("models", "challengers", "c", "--json", url=url))
    assert [ch["id"] for ch in listed["challengers"]] == ["pa"]
    assert listed["challengers"][0]["since"] == 20 and listed["challengers"][0]["seen"] == 10
    table = perceptron("models", "challengers", "c", url=url).stdout
    assert "served" in table and "pa1 C=0.1" in table and "SINCE" in table
    one = as_json(perceptron("models", "challengers", "c", "pa", "--json", url=url))
    assert one["id"] == "pa" and one["config"]["algorithm"] == "pa1"
    missing = perceptron("models", "challengers", "c", "nope", url=url)
    assert missing.returncode == EXIT["not_found"] and "challenger_not_found" in missing.stderr
    up = perceptron("models", "promote", "c", "pa", "--demote-as", "old", url=url)
    assert up.returncode == 0 and "served by 'pa'" in up.stdout, up.stderr
    assert client.get("/models/c").json()["config"]["algorithm"] == "pa1"
    again = perceptron("models", "promote", "c", "nope", url=url)
    assert again.returncode == EXIT["not_found"]
    gone = as_json(perceptron("models", "delete-challenger", "c", "old", "--json", url=url))
    assert gone == {"deleted": "old"}
    assert perceptron("models", "delete-challenger", "c", "old", url=url).returncode == 3
    kept = as_json(perceptron("models", "updates", "c", "--limit", "5", "--json", url=url))
    assert len(kept["updates"]) <= 5
    assert kept["version"] == client.get("/models/c").json()["version"]
    assert "source" in perceptron("models", "updates", "c", url=url).stdout
    undone = perceptron("models", "undo", "c", "--from-time", "0", url=url)
    assert undone.returncode == 0 and "updates left out" in undone.stdout, undone.stderr
    assert perceptron("models", "undo", "c", url=url).returncode == EXIT["usage"]


def test_the_learners_and_their_flags_from_the_command_line(client: httpx.Client) -> None:
    url = str(client.base_url).rstrip("/")
    listed = perceptron("models", "learners", url=url)
    assert listed.returncode == 0, listed.stderr
    assert "logistic: logistic regression (binary, ovr, probabilities)" in listed.stdout
    assert "arow: AROW (binary, ovr)" in listed.stdout and "  --r (default 1):" in listed.stdout
    answer = as_json(perceptron("models", "learners", "--json", url=url))
    names = [learner["name"] for learner in answer["learners"]]
    assert names == ["perceptron", "pa1", "pa2", "logistic", "arow"]
    made = perceptron(
        "models", "create", "ar", "--n-features", "2", "--algorithm", "arow", "--r", "0.5",
        "--json", url=url,
    )  # fmt: skip
    assert (as_json(made)["config"]["algorithm"], as_json(made)["config"]["r"]) == ("arow", 0.5)
    shown = perceptron("models", "show", "ar", url=url)
    assert any(line.split() == ["r", "0.5"] for line in shown.stdout.splitlines()), shown.stdout
    assert not any(line.split()[0] == "learning_rate" for line in shown.stdout.splitlines())
    other = perceptron("models", "create", "ar2", "--algorithm", "arow", "--C", "0.5", url=url)
    assert other.returncode == EXIT["refused"] and "not used by 'arow'" in other.stderr


def test_a_drift_detector_from_the_command_line(client: httpx.Client) -> None:
    """create --drift takes a detector's name or its configuration; drift shows it, each
    learner's state and the events the API lists; show names it."""
    url = str(client.base_url).rstrip("/")
    made = perceptron("models", "create", "dd", "--n-features", "2", "--drift", "ddm", url=url)
    assert made.returncode == 0, made.stderr
    assert client.get("/models/dd").json()["config"]["drift"]["drift_threshold"] == 3.0
    shown = perceptron("models", "show", "dd", url=url).stdout.splitlines()
    assert any(line.split()[:2] == ["drift", "detector=ddm"] for line in shown), "\n".join(shown)
    quiet = perceptron("models", "drift", "dd", url=url)
    assert quiet.returncode == 0 and "no warning or drift yet" in quiet.stdout, quiet.stderr
    spec = '{"detector": "eddm", "warm_start": 5, "alpha": 0.99}'
    made = perceptron("models", "create", "ed", "--n-features", "2", "--drift", spec, url=url)
    assert made.returncode == 0, made.stderr
    xs = np.random.default_rng(2).normal(size=(400, 2)).round(3)
    ys = np.where(xs[:, 0] > 0, 1, -1) * np.repeat([1, -1], 200)
    body = {"model": "ed", "features": xs.tolist(), "labels": ys.tolist()}
    assert client.post("/learn/batch", json=body).status_code == 200
    report = client.get("/models/ed/drift").json()
    assert report["events"] and report["drift"]["alpha"] == 0.99
    assert as_json(perceptron("models", "drift", "ed", "--json", url=url)) == report
    table = perceptron("models", "drift", "ed", url=url).stdout
    assert table.startswith("detector eddm: on_drift alert, warm_start 5, alpha 0.99, beta 0.9")
    state = report["learners"][0]["state"]
    assert f"served: {state} after 400 labelled examples" in table
    rows = [line.split()[:3] for line in table.splitlines()[3:]]
    assert rows == [["served", e["kind"], f"{e['at_seen']:,}"] for e in report["events"]]
    for bad_drift, says in (
        ("adwin", "drift.detector must be one of ['ddm', 'eddm']"),
        ('{"detector": "ddm", "drift_threshold": NaN}', "NaN is no number JSON has"),
        ('{"detector": "ddm", "drift_threshold": 1e309}', "1e309 is past the largest number"),
        ('{"detector": "ddm", "warm_start": 0}', "warm_start must be a whole number"),
        ('{"detector": "ddm", "on_drift": "heal"}', "on_drift must be one of ['alert', 'retrain']"),
    ):  # (refused before anything is sent: no traceback, exit 2)
        bad = perceptron("models", "create", "x", "--drift", bad_drift, url=url)
        assert bad.returncode == EXIT["usage"] and says in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr
    nan = perceptron("models", "create", "x", "--config", '{"n_features": NaN}', url=url)
    assert nan.returncode == EXIT["usage"] and "Traceback" not in nan.stderr, nan.stderr
    plain = perceptron("models", "create", "p", "--n-features", "2", url=url)
    assert plain.returncode == 0
    none = perceptron("models", "drift", "p", url=url)
    assert "no drift detector" in none.stdout
    missing = perceptron("models", "drift", "nope", url=url)
    assert missing.returncode == EXIT["not_found"]


def test_a_models_metrics_from_the_command_line(client: httpx.Client) -> None:
    """metrics shows the mistake rates with the examples each is over, the confusion matrix
    and the labels by source; --json the API's answer as it is."""
    url = str(client.base_url).rstrip("/")
    spec = {"classes": ["ham", "spam"], "n_features": 2, "default_label": "ham"}
    assert client.put("/models/mm", json=spec).status_code == 201
    quiet = perceptron("models", "metrics", "mm", url=url)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.splitlines()[:2] == [
        "mm: version 0, 0 labelled examples, 0 wrong",
        "mistake rate  cumulative -; last 100 -; last 1000 -",
    ]
    xs = np.random.default_rng(4).normal(size=(150, 2)).round(3)
    ys = np.where(xs[:, 0] > 0, "spam", "ham")
    body = {"model": "mm", "features": xs.tolist(), "labels": ys.tolist()}
    assert client.post("/learn/batch", json=body).status_code == 200
    answer = client.get("/models/mm/metrics").json()
    assert as_json(perceptron("models", "metrics", "mm", "--json", url=url)) == answer
    shown = perceptron("models", "metrics", "mm", url=url).stdout.splitlines()
    c, r = answer["counters"], answer["mistake_rate"]
    assert (
        shown[0] == f"mm: version {answer['version']}, 150 labelled examples, {c['mistakes']} wrong"
    )
    assert shown[1].startswith(
        f"mistake rate  cumulative {r['cumulative']:.3f} of 150; "
        f"last 100 {r['last_100']:.3f} of 100; last 1000 {r['last_1000']:.3f} of 150"
    )
    matrix = answer["confusion"]["matrix"]
    at = next(i for i, line in enumerate(shown) if line.startswith("true"))
    assert shown[at].split()[-2:] == ["ham", "spam"]
    assert [line.split() for line in shown[at + 1 : at + 3]] == [
        ["ham", *map(str, matrix[0])],
        ["spam", *map(str, matrix[1])],
    ]
    assert sum(map(sum, matrix)) == 150
    sources = [line.split() for line in shown[at + 3 :]]
    assert sources[0] == ["source", "labelled", "mistakes", "updates"]
    # (with keys off, the one source has no key's name)
    assert sources[1:] == [["(no", "key)", "150", str(c["mistakes"]), str(c["updates"])]]
    missing = perceptron("models", "metrics", "none", url=url)
    assert missing.returncode == EXIT["not_found"], missing.stderr


def test_json_is_the_services_answer_as_it_came(client: httpx.Client) -> None:
    """--json prints the service's answer: a learner's settings and no other's, and no field
    the service did not send (the client's defaults, null)."""
    url = str(client.base_url).rstrip("/")
    made = perceptron(
        "models", "create", "pa", "--algorithm", "pa2", "--C", "0.5", "--json", url=url
    )
    assert as_json(made) == client.get("/models/pa").json()
    assert (
        as_json(perceptron("models", "show", "pa", "--json", url=url))
        == client.get("/models/pa").json()
    )
    assert client.put("/models/pa/challengers/c", json={"algorithm": "pa1"}).is_success
    shown = as_json(perceptron("models", "challengers", "pa", "--json", url=url))
    assert shown == client.get("/models/pa/challengers").json()
    listed = as_json(perceptron("models", "list", "--json", url=url))
    assert listed == client.get("/models").json()
