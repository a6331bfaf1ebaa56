"""The ``perceptron`` commands' rough edges, without a service: files they cannot read or write,
a label list that starts with '-', one exit code per cause in every command, a busy port, and
what ``perceptron serve`` prints once it answers.

The commands against a real service: tests/test_models_command.py, tests/test_replay.py and
tests/test_serve_command.py.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from perceptron_client import (
    AuthError,
    ConflictError,
    NotFoundError,
    PerceptronError,
    UnavailableError,
)
from service.cli import exit_codes as commands
from service.cli import main as cli
from service.cli import models_command as manage
from service.cli.exit_codes import Exit
from service.cli.loopback import free_port
from service.settings import MIN_REDIS_TIMEOUT_S, Settings

from .run_command import run_perceptron as run_main

UNREACHABLE = "http://127.0.0.1:1"


# --- files ------------------------------------------------------------------------------------


def test_a_file_that_cannot_be_written_is_named_with_its_cause(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for path, cause in [
        (tmp_path / "no" / "deeper" / "m.json", f"the folder {tmp_path / 'no'} does not exist"),
        (tmp_path, "it is a folder, not a file"),
        (a_file / "m.json", f"{a_file} is a file, not a folder"),
    ]:
        assert commands.unwritable(path) == f"cannot write {path}: {cause}"
    assert commands.unwritable(tmp_path / "new.json") is None
    assert commands.unwritable(a_file) is None  # written over


def test_permission_denied_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    denied = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "m.json"))
    assert commands.file_error(tmp_path / "m.json", denied, writing=True) == (
        f"cannot write {tmp_path / 'm.json'}: permission denied"
    )
    monkeypatch.setattr(os, "access", lambda *a, **k: False)  # as for anyone but root
    assert commands.unwritable(tmp_path / "m.json") == (
        f"cannot write {tmp_path / 'm.json'}: permission denied"
    )


def test_a_file_that_cannot_be_read_is_named_with_its_cause(tmp_path: Path) -> None:
    def read(path: Path) -> str:
        try:
            path.read_text()
        except OSError as e:
            return commands.file_error(path, e)
        raise AssertionError(f"{path} was read")

    assert read(tmp_path / "none.csv") == f"cannot read {tmp_path / 'none.csv'}: no such file"
    assert read(tmp_path) == f"cannot read {tmp_path}: it is a folder, not a file"
    assert read(tmp_path / "no" / "x.csv") == (
        f"cannot read {tmp_path / 'no' / 'x.csv'}: the folder {tmp_path / 'no'} does not exist"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["models", "export", "iris", "-o", "{tmp}/no/dir/iris.json"], "the folder {tmp}/no does"),
        (["models", "export", "iris", "-o", "{tmp}"], "it is a folder"),
        (["models", "import", "iris", "{tmp}"], "it is a folder"),
        (["models", "import", "iris", "{tmp}/none.json"], "no such file"),
        (["replay", "--dataset", "iris", "--curve", "{tmp}/no/c.png"], "the folder {tmp}/no"),
        (["replay", "--dataset", "iris", "--curve", "{tmp}"], "it is a folder"),
        (["replay", "--csv", "{tmp}/none.csv"], "no such file"),
        (["replay", "--csv", "{tmp}"], "it is a folder"),
        (["replay", "--libsvm", "{tmp}/no/x.svm"], "the folder {tmp}/no does not exist"),
    ],
)
def test_commands_say_which_file_and_why_in_one_line(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """Exit 2 and one line, before any request (the URL reaches nothing): no traceback."""
    argv = [a.format(tmp=tmp_path) for a in args] + ["--url", UNREACHABLE]
    code, out, err = run_main(*argv)
    assert code == 2, err
    assert said.format(tmp=tmp_path) in err and str(tmp_path) in err
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""


# --- --classes -1,1 ---------------------------------------------------------------------------


def parse_models(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    manage.add_arguments(parser)
    return parser.parse_args(manage.join_dash_values(argv))


@pytest.mark.parametrize(
    ("argv", "classes"),
    [
        (["create", "neg", "--classes", "-1,1"], [-1, 1]),
        (["create", "neg", "--classes", "-1,0,1", "--n-features", "3"], [-1, 0, 1]),
        (["create", "neg", "--classes=-1,1"], [-1, 1]),
        (["create", "neg", "--classes", "-a,b"], ["-a", "b"]),
        (["create", "neg", "--classes", "a,b"], ["a", "b"]),
    ],
)
def test_classes_may_start_with_a_dash(argv: list[str], classes: list[Any]) -> None:
    assert parse_models(argv).classes == classes


@pytest.mark.parametrize(
    ("argv", "label"),
    [
        (["create", "d", "--classes", "-1,1", "--default-label", "-1"], -1),
        (["create", "d", "--classes", "a,b", "--default-label=b"], "b"),
        (["create", "d", "--default-label", "-no"], "-no"),
    ],
)
def test_the_default_label_may_start_with_a_dash(argv: list[str], label: Any) -> None:
    assert parse_models(argv).default_label == label


def test_the_default_label_is_one_label() -> None:
    with pytest.raises(SystemExit):
        parse_models(["create", "d", "--default-label", "a,b"])


def test_an_option_after_classes_stays_an_option() -> None:
    assert manage.join_dash_values(["create", "m", "--classes", "--json"]) == [
        "create", "m", "--classes", "--json",
    ]  # fmt: skip
    assert manage.join_dash_values(["--", "--classes", "-1,1"]) == ["--", "--classes", "-1,1"]


def test_the_command_line_reads_classes_that_start_with_a_dash() -> None:
    """Parsed, it goes on to the service (unreachable here), instead of a usage error."""
    code, _, err = run_main("models", "create", "neg", "--classes", "-1,1", "--url", UNREACHABLE)
    assert code == Exit.UNAVAILABLE and "expected one argument" not in err


# --- exit codes -------------------------------------------------------------------------------


def test_one_exit_code_per_cause() -> None:
    request = httpx.Request("GET", UNREACHABLE)
    errors: list[tuple[PerceptronError | httpx.TransportError, int]] = [
        (NotFoundError(404, "model_not_found", "x"), 3),
        (ConflictError(409, "model_exists", "x"), 4),
        (AuthError(401, "unauthorized", "x"), 5),
        (UnavailableError(503, "store_unavailable", "x"), 6),
        (httpx.ConnectError("refused", request=request), 6),
        (PerceptronError(500, "internal", "x"), 1),
    ]
    for error, code in errors:
        assert commands.exit_for(error) == code
    assert [int(c) for c in Exit] == list(range(8)) and set(commands.MEANING) == set(Exit)


def test_an_unreachable_service_exits_the_same_from_replay_and_models() -> None:
    replayed, _, said = run_main("replay", "--dataset", "iris", "--quiet", "--url", UNREACHABLE)
    listed, _, told = run_main("models", "list", "--url", UNREACHABLE)
    assert replayed == listed == 6
    assert "cannot reach" in said and "cannot reach" in told


def test_every_command_that_reads_the_api_key_reads_the_url_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The key goes to the service the environment names, never to the default one."""
    monkeypatch.setenv("PERCEPTRON_URL", UNREACHABLE)
    monkeypatch.setenv("PERCEPTRON_API_KEY", "k" * 24)
    for command in (["replay", "--dataset", "iris", "--quiet"], ["models", "list"]):
        code, _, said = run_main(*command)
        assert code == 6 and f"cannot reach {UNREACHABLE}" in said, (command, said)
        assert "8000" not in said


def help_of(*command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main([*command, "--help"])
    return out.getvalue()


def test_each_commands_help_lists_its_exit_codes() -> None:
    for command in ("models", "replay"):
        text = help_of(command)
        assert commands.epilog(commands.CLIENT_CODES) in text, command
        assert "  6  the service cannot be reached" in text and "  7  " not in text
    serve = help_of("serve")
    assert commands.epilog(commands.SERVE_CODES) in serve
    assert "  7  the port to listen on is in use" in serve


# --- perceptron serve -------------------------------------------------------------------------


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_busy_port_is_said_before_anything_starts(
    busy_port: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def not_started(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("started")

    monkeypatch.setattr("uvicorn.run", not_started)
    monkeypatch.setattr("service.cli.local_redis.LocalRedis.start", not_started)
    monkeypatch.delenv("PERCEPTRON_REDIS_URL", raising=False)
    monkeypatch.setenv("PERCEPTRON_AUTH", "false")
    for local in ("", str(tmp_path)):  # the embedded store, a local redis-server
        monkeypatch.setenv("PERCEPTRON_LOCAL_REDIS_DIR", local)
        code, _, err = run_main("serve", "--port", str(busy_port))
        assert code == 7
        assert err == (
            f"perceptron serve: port {busy_port} on 127.0.0.1 is in use (another perceptron "
            "serve?): pick another with --port\n"
        )


def test_a_wrong_setting_is_said_in_one_line_before_anything_starts(
    busy_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each wrong PERCEPTRON_* variable named, with its value and why, exit 2, instead of a
    traceback; PERCEPTRON_REDIS_TIMEOUT_S at its floor and one past it (below it, a wait of
    the service's own on Redis that runs its 0.1 s course would end in a timeout)."""

    def not_started(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("started")

    monkeypatch.setattr("uvicorn.run", not_started)
    monkeypatch.delenv("PERCEPTRON_REDIS_URL", raising=False)
    monkeypatch.delenv("PERCEPTRON_LOCAL_REDIS_DIR", raising=False)
    monkeypatch.setenv("PERCEPTRON_AUTH", "false")
    monkeypatch.setenv("PERCEPTRON_REDIS_TIMEOUT_S", "0.24")
    monkeypatch.setenv("PERCEPTRON_MAX_BATCH", "many")
    code, out, err = run_main("serve", "--port", str(busy_port))
    assert (code, out) == (Exit.USAGE, "")
    assert err == (
        "perceptron serve: PERCEPTRON_REDIS_TIMEOUT_S='0.24': Input should be greater than or "
        "equal to 0.25; PERCEPTRON_MAX_BATCH='many': Input should be a valid integer, unable to "
        "parse string as an integer\n"
    )
    monkeypatch.setenv("PERCEPTRON_REDIS_TIMEOUT_S", str(MIN_REDIS_TIMEOUT_S))
    monkeypatch.delenv("PERCEPTRON_MAX_BATCH")
    code, _, err = run_main("serve", "--port", str(busy_port))
    assert code == 7 and "in use" in err  # the settings pass: on to the port, which is taken


def test_the_services_own_waits_on_redis_fit_in_its_shortest_call_timeout() -> None:
    from service.engine import learning as learning
    from service.engine import writer

    waits = (writer.WAIT_S, writer.ANSWER_WAIT_S, learning.HOLD_WAIT_S)
    assert max(waits) <= MIN_REDIS_TIMEOUT_S / 2


def test_a_host_it_cannot_listen_on_is_wrong_usage() -> None:
    problem = cli.listen_problem("host.invalid", free_port())
    assert problem is not None and problem[0] == Exit.USAGE and "host.invalid" in problem[1]
    assert cli.listen_problem("127.0.0.1", free_port()) is None


def test_the_banner_says_where_things_are() -> None:
    text = cli.banner("127.0.0.1", 8123, Settings(auth=False))
    assert text.splitlines() == [
        "perceptron serve: ready on http://127.0.0.1:8123",
        "  dashboard  http://127.0.0.1:8123/dashboard",
        "  API docs   http://127.0.0.1:8123/docs",
        "  try        curl -s http://127.0.0.1:8123/predict -H 'content-type: application/json'"
        """ -d '{"features": {"word=free": 1, "word=offer": 1}}'""",
        f"  commands   {cli.command_path()} models list --url http://127.0.0.1:8123   (and --help)",
    ]
    usual = cli.banner("127.0.0.1", 8000, Settings(auth=False)).splitlines()[-1]
    assert usual == f"  commands   {cli.command_path()} models list   (and --help)"  # (its default)
    every = cli.banner("0.0.0.0", 9000, Settings(auth=True, default_model=False))
    assert every.startswith(
        "perceptron serve: ready on http://127.0.0.1:9000 (listening on 0.0.0.0: every address"
    )
    assert every.splitlines()[-2] == (
        '  try        curl -s http://127.0.0.1:9000/models -H "Authorization: Bearer '
        '$PERCEPTRON_API_KEY"'
    )
    assert "http://[::1]:8000/docs" in cli.banner("::1", 8000, Settings(auth=False))


def test_the_banner_names_the_command_as_the_shell_finds_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """After the README's two commands, ``perceptron`` is in .venv/bin, not on the PATH: the
    banner says how to run it from where the service was started."""
    here = Path(sys.executable).with_name("perceptron")
    assert here.exists()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert cli.command_path(here.parents[2]) == str(here.relative_to(here.parents[2]))
    assert cli.command_path(tmp_path) == str(here)
    monkeypatch.setenv("PATH", f"{here.parent}:/usr/bin:/bin")
    assert cli.command_path(tmp_path) == "perceptron"


def test_the_probe_for_the_banner_is_kept_out_of_the_access_log() -> None:
    import logging

    from service.api.edge import PROBE, QuietProbe

    quiet = QuietProbe()

    def record(path: str) -> logging.LogRecord:
        args = ("127.0.0.1:5", "GET", path, "1.1", 200)
        return logging.LogRecord("uvicorn.access", 20, "", 0, '%s - "%s %s HTTP/%s" %d', args, None)

    assert not quiet.filter(record(PROBE))
    assert quiet.filter(record("/healthz")) and quiet.filter(record("/predict"))
    assert cli.log_config("info")["loggers"]["uvicorn.access"]["filters"] == ["probe"]


def test_workers_of_serve_leave_auth_off_to_serve(caplog: pytest.LogCaptureFixture) -> None:
    from service.app import create_app

    with caplog.at_level("WARNING", logger="perceptron"):
        create_app(Settings(auth=False, redis_url=None), warn_auth_off=False)
    assert not any("AUTH IS OFF" in r.message for r in caplog.records)


def test_a_service_that_fails_to_start_exits_1_not_uvicorns_3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """uvicorn exits 3 when the app does not start: the code of 'no such model' here."""

    def failing(*args: Any, **kwargs: Any) -> None:
        raise SystemExit(3)

    monkeypatch.setattr("uvicorn.run", failing)
    monkeypatch.setattr(cli, "_compile_kernel", lambda: None)  # (a process of its own)
    monkeypatch.setattr("logging.config.dictConfig", lambda config: None)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "metrics"))
    monkeypatch.setenv("PERCEPTRON_AUTH", "false")
    monkeypatch.delenv("PERCEPTRON_REDIS_URL", raising=False)
    monkeypatch.setenv("PERCEPTRON_LOCAL_REDIS_DIR", "")
    assert cli.main(["serve", "--port", str(free_port())]) == Exit.FAILED
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: sys.exit(143))  # a signal's exit: kept
    with pytest.raises(SystemExit) as stopped:
        cli.main(["serve", "--port", str(free_port())])
    assert stopped.value.code == 143


def test_a_serve_worker_keeps_its_start_up_heap_out_of_collections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker of ``perceptron serve`` freezes the heap its app's start-up built and raises
    the collector's thresholds (service/engine/worker_gc.py); an in-process app leaves them
    alone."""
    import gc

    from service.app import create_app
    from service.engine import worker_gc

    monkeypatch.setenv("PERCEPTRON_AUTH", "false")
    thresholds = gc.get_threshold()
    try:
        create_app()
        assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds
        cli.worker_app()
        assert gc.get_freeze_count() > 10_000  # the modules of the app, at least
        assert gc.get_threshold() == worker_gc.THRESHOLDS != thresholds
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.servers  # (a process)
@pytest.mark.parametrize("module", ["service.cli", "service.cli.main"])
def test_the_command_runs_as_a_module(module: str) -> None:
    """``python -m service.cli`` (as ``python -m service.cli.main``) is ``perceptron``."""
    out = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "serve" in out.stdout and "models" in out.stdout


def test_with_json_every_failure_is_said_as_json() -> None:
    """``--json`` says an error as JSON on stderr: the service's, no answer at all (status
    null, code ``unreachable``), and a wrong use of the command (code ``usage``)."""
    from .run_command import run_perceptron

    nobody = f"http://127.0.0.1:{free_port()}"
    for args in (
        ("models", "show", "iris", "--json", "--url", nobody),
        ("replay", "--dataset", "iris", "--json", "--quiet", "--url", nobody),
    ):
        code, _, err = run_perceptron(*args)
        said = json.loads(err)
        assert (code, said["status"], said["code"]) == (Exit.UNAVAILABLE, None, "unreachable")
        assert said["detail"].startswith(f"cannot reach {nobody} (ConnectError")
        plain = run_perceptron(*(a for a in args if a != "--json"))
        assert plain[0] == Exit.UNAVAILABLE and "cannot reach" in plain[2] and "{" not in plain[2]
    two = ("models", "create", "x", "--config", '{"n_features": 4}', "--n-features", "5")
    refused = ("models", "show", "a/b"), ("replay", "--window", "0")  # (by argparse)
    for wrong in (two, *refused):
        code, _, err = run_perceptron(*wrong, "--json", "--url", nobody)
        said = json.loads(err)
        assert (code, said["code"], said["status"]) == (Exit.USAGE, "usage", None), err
        assert wrong is two or said["detail"].startswith("perceptron " + wrong[0])
        assert run_perceptron(*wrong, "--url", nobody)[2].startswith(("usage", "perceptron"))


def test_a_request_that_went_but_got_no_answer_is_said_so() -> None:
    """A timeout after the request went is not 'cannot reach': the request may have been done."""
    from .run_command import run_perceptron

    with socket.socket() as silent:  # listens, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        code, _, err = run_perceptron(
            "models", "show", "m", "--json", "--timeout", "0.2", "--url", url
        )
    said = json.loads(err)
    assert (code, said["status"], said["code"]) == (Exit.UNAVAILABLE, None, "no_answer")
    assert said["detail"].startswith(f"no answer from {url} (ReadTimeout")
    assert "may have been done" in said["detail"]


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://[::1", "is not a URL"),
        ("localhost:8000", "is not a service's URL"),
        ("ftp://host", "is not a service's URL"),
        ("http://", "is not a service's URL"),
    ],
)
def test_a_service_url_it_cannot_use_is_a_wrong_use(url: str, said: str) -> None:
    """--url or PERCEPTRON_URL: exit 2 and why, before anything is sent (JSON with --json)."""
    code, _, err = run_main("models", "list", "--url", url)
    assert code == Exit.USAGE and said in err, err
    code, _, err = run_main("models", "list", "--url", url, "--json")
    assert code == Exit.USAGE and json.loads(err)["code"] == "usage", err
    assert commands.checked_url("https://h:1/x") == "https://h:1/x"


def test_an_undo_source_is_a_keys_name_or_none() -> None:
    from service.cli.checked_arguments import key_name

    assert key_name("") == "" and key_name("alice.b-1") == "alice.b-1"
    for bad in ("a b", "x" * 65, "é"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not an API key's name"):
            key_name(bad)


def test_a_reader_that_closes_early_ends_the_command_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``perceptron ... | head``: writing to a pipe whose reader is gone ends the command with
    what was read, not a BrokenPipeError traceback."""
    read, write = os.pipe()
    os.close(read)
    with capsys.disabled(), open(write, "w") as closed:  # noqa: PTH123
        monkeypatch.setattr(sys, "stdout", closed)
        assert cli.main(["models", "--help"]) == 0


def test_models_drift_prints_the_version_a_retrain_came_after(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from perceptron_client.answers import DriftReport
    from service.cli.models_output import print_drift

    report = DriftReport.model_validate(
        {
            "drift": {"detector": "ddm", "on_drift": "retrain", "warm_start": 30,
                      "warning_threshold": 2.0, "drift_threshold": 3.0},
            "learners": [{"learner": "served", "state": "stable", "seen": 120}],
            "events": [
                {"learner": "served", "kind": "warning", "at_seen": 90, "time": None},
                {"learner": "served", "kind": "drift", "at_seen": 96, "time": None,
                 "action": "retrained", "version": 41},
            ],
        }
    )  # fmt: skip
    print_drift(report, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].split()[-3:] == ["after", "version", "41"] and "retrained" in lines[-1]
    assert lines[-2].split()[-1] == "-"
