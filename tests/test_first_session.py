"""A newcomer's first session: the README's commands as pasted, and what they meet on the way.

The README's blocks run against a real ``perceptron serve`` (only the port differs), pasted top
to bottom into one shell on one service: each answer coming out as the README shows it after
``#`` and nothing else, the Python block printing what its comments say. The blocks of
docs/cli.md carry on from the first session's. Then: what ``GET /`` answers, the start-up log naming
the store, the command's help, and what git ignores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest

from service.cli.loopback import free_port
from service.settings import Settings

from .servers import ServiceProcess, running
from .test_serve_sh import Serve, copied_checkout

pytestmark = pytest.mark.servers  # the README's commands, run for real

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLI = ROOT / "docs" / "cli.md"
PERCEPTRON = Path(sys.executable).with_name("perceptron")
ANY = "<any>"  # what a bare ... stands for in a shown answer: any value


def section(title: str, page: Path = README) -> str:
    text = page.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def shown_answers(script: str) -> list[str]:
    """The answers a block shows: each a line after "# ", continued on lines after "#  "."""
    shown: list[str] = []
    for line in script.splitlines():
        if line.startswith("#  ") and shown:
            shown[-1] += line[3:]
        elif line.startswith("# "):
            shown.append(line[2:])
    return shown


def shown_json(answer: str) -> Any:
    """A shown answer as JSON, a bare ``...`` (a value that differs from run to run) as ANY."""
    return json.loads(re.sub(r"(?<=:)\.\.\.(?=[,}\]])", json.dumps(ANY), answer))


def json_documents(text: str) -> list[Any]:
    """Every JSON object in ``text``, in order (curl prints them without newlines)."""
    decoder = json.JSONDecoder()
    found, i = [], text.find("{")
    while i >= 0:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        found.append(value)
        i = text.find("{", end)
    return found


def matches(shown: Any, actual: Any) -> bool:
    """Whether an answer is the one the README shows ("abc..." stands for any "abc" + more)."""
    if shown == ANY:
        return True
    if isinstance(shown, dict):
        return (
            isinstance(actual, dict)
            and list(shown) == list(actual)
            and all(matches(shown[k], actual[k]) for k in shown)
        )
    if isinstance(shown, list):
        return (
            isinstance(actual, list)
            and len(shown) == len(actual)
            and all(matches(a, b) for a, b in zip(shown, actual, strict=True))
        )
    if isinstance(shown, str) and shown.endswith("..."):
        return isinstance(actual, str) and actual.startswith(shown[:-3])
    return bool(shown == actual and type(shown) is type(actual))


@pytest.fixture
def service() -> Iterator[ServiceProcess]:
    with running(ServiceProcess(redis_url=None)) as server:
        yield server


class Reachable(Protocol):
    """A running service, however started: its port and URL."""

    @property
    def port(self) -> int: ...

    @property
    def url(self) -> str: ...


def run_blocks(blocks: list[str], service: Reachable, cwd: Path) -> tuple[str, str]:
    """The blocks as one bash script against ``service``: (the script, what it printed)."""
    script = "\n".join(blocks)
    assert "..." not in "".join(line for line in script.splitlines() if not line.startswith("#"))
    return script, run_script(script, service, cwd)


def run_script(script: str, service: Reachable, cwd: Path, timeout: float = 120) -> str:
    """A bash script of pasted blocks against ``service`` (its port for the README's): what it
    printed; its Python finds the client as `pip install ./client` would."""
    script = script.replace("localhost:8000", f"127.0.0.1:{service.port}")
    script = script.replace("http://127.0.0.1:8000", service.url)
    script = script.replace(".venv/bin/perceptron", str(PERCEPTRON))
    env = {**os.environ, "PERCEPTRON_URL": service.url}
    if importlib.util.find_spec("perceptron_client") is None:
        env["PYTHONPATH"] = str(ROOT / "client")
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def answers_as_shown(script: str, out: str, at_least: int) -> None:
    """Each answer on a line of its own, and each one shown: nothing more, nothing less."""
    shown, printed = shown_answers(script), out.splitlines()
    assert len(printed) == len(shown) >= at_least, (shown, out)
    for expected, line in zip(shown, printed, strict=True):
        assert matches(shown_json(expected), json.loads(line)), (expected, line)


BLOCK_END = "=== block done ==="  # printed after each block, to tell their outputs apart


def readme_blocks() -> list[tuple[str, str]]:
    """Every ``sh`` and ``python`` block of the README, in its order, as (language, text); but
    the first, the two commands (serve.sh starts the service the test starts, test.sh runs
    this test)."""
    blocks = re.findall(r"```(sh|python)\n(.*?)```", README.read_text(), re.S)
    assert "deploy/serve.sh" in blocks[0][1] and "deploy/test.sh" in blocks[0][1]
    return [(language, text) for language, text in blocks[1:]]


@dataclass
class ServeSh:
    port: int
    url: str


def test_the_readme_runs_top_to_bottom_on_one_service(tmp_path: Path) -> None:
    """Every block of the README pasted in turn into one shell (a Python block into Python)
    against one fresh ``bash deploy/serve.sh`` (a copy of deploy/ beside this .venv, its store
    its own): each shell block prints exactly the answers it shows, the
    Python block what its comments say, the replay demo its summary with the mistakes the
    README gives; and the history's blocks answer the versions and checkpoints they show
    after every block before them (the challengers' promotion among them)."""
    (tmp_path / "checkout").mkdir()
    (tmp_path / "shell").mkdir()
    with copied_checkout(tmp_path / "checkout") as checkout:
        serve_sh = Serve(checkout).start()
        try:
            url = f"http://127.0.0.1:{serve_sh.port}"
            readme_in_order(ServeSh(serve_sh.port, url), tmp_path / "shell")
        finally:
            assert serve_sh.stop(signal.SIGINT) == 0  # (a terminal's Ctrl-C)


def readme_in_order(service: ServeSh, tmp_path: Path) -> None:
    blocks = readme_blocks()
    assert [language for language, _ in blocks].count("python") == 1 and len(blocks) >= 7
    parts = []
    for language, text in blocks:
        if language == "sh":
            code = "".join(line for line in text.splitlines() if not line.startswith("#"))
            assert "..." not in code, text
            parts.append(text)
        else:
            parts.append(f"{sys.executable} - <<'PYTHON'\n{text}PYTHON\n")
        parts.append(f"echo '{BLOCK_END}'\n")
    printed = run_script("".join(parts), service, tmp_path, timeout=240)
    outputs = printed.split(BLOCK_END + "\n")
    assert outputs[-1] == "" and len(outputs) == len(blocks) + 1, printed
    checked = 0
    for (language, text), out in zip(blocks, outputs, strict=False):
        if language == "python":
            shown = [line.split("  # ", 1)[1] for line in text.splitlines() if "print(" in line]
            assert out.splitlines() == shown and len(shown) >= 3, (shown, out)
        elif "perceptron replay" in text:
            mistakes = next(line for line in out.splitlines() if line.startswith("mistakes"))
            assert "293" in mistakes, out
            assert (tmp_path / "curve.png").is_file()
        else:
            shown_lines = shown_answers(text)
            assert shown_lines, text  # (every other block shows its answers)
            lines = out.splitlines()
            assert len(lines) == len(shown_lines), (shown_lines, out)
            for expected, line in zip(shown_lines, lines, strict=True):
                assert matches(shown_json(expected), json.loads(line)), (expected, line)
        checked += 1
    assert checked == len(blocks)
    # The feedback found its prediction; the Python block's and the replay's models are there.
    models = {m["name"]: m for m in httpx.get(service.url + "/models").json()["models"]}
    assert {"default", "iris", "spam", "digits"} <= set(models)
    assert models["iris"]["config"]["algorithm"] == "pa1"  # promoted


def test_the_cli_page_carries_on_from_the_first_session(
    service: ServiceProcess, tmp_path: Path
) -> None:
    blocks = shell_blocks(section("A first session"))
    assert len(blocks) >= 2
    answers_as_shown(*run_blocks(blocks, service, tmp_path), at_least=4)
    # The feedback found its prediction: the model learned from it.
    assert httpx.get(service.url + "/models/default").json()["version"] == 1

    # docs/cli.md carries on from there: its shown lines come out too.
    blocks = shell_blocks(section("`perceptron models`", CLI))
    assert len(blocks) >= 1
    script, out = run_blocks(blocks, service, tmp_path)
    answers = json_documents(out)
    for expected in shown_answers(script):
        if expected.startswith("{"):
            doc = shown_json(expected)
            assert any(matches(doc, a) for a in answers), (expected, answers)
            answers = answers[[matches(doc, a) for a in answers].index(True) + 1 :]
        else:
            assert expected in out, (expected, out)
    assert (tmp_path / "iris.perceptron.json").is_file()


def test_the_python_first_try_runs_as_pasted(service: ServiceProcess, tmp_path: Path) -> None:
    (block,) = python_blocks(section("A first session"))
    code = block.replace("http://127.0.0.1:8000", service.url)
    env = dict(os.environ)
    if importlib.util.find_spec("perceptron_client") is None:  # as `pip install ./client` would
        env["PYTHONPATH"] = str(ROOT / "client")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    shown = [line.split("  # ", 1)[1] for line in block.splitlines() if "print(" in line]
    assert len(shown) >= 3
    assert done.stdout.splitlines() == shown


def test_the_root_points_to_the_dashboard_and_the_docs(service: ServiceProcess) -> None:
    with httpx.Client(base_url=service.url) as c:
        r = c.get("/")
        assert r.status_code == 200
        links = r.json()["links"]
        assert links["dashboard"] == "/dashboard" and links["docs"] == "/docs"
        for path in links.values():
            assert c.get(path).status_code == 200, path
        # A browser asks for a page: it lands on the dashboard.
        page = c.get("/", headers={"accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        assert page.status_code == 307 and page.headers["location"] == "dashboard"
        landed = c.get("/", headers={"accept": "text/html"}, follow_redirects=True)
        assert landed.url.path == "/dashboard" and "<title>Perceptron dashboard" in landed.text


def test_start_up_logs_the_store_and_never_its_password(tmp_path: Path) -> None:
    secret = "pw-" + "s3cret" * 4
    port, nothing_there = free_port(), free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PERCEPTRON_")},
        "PERCEPTRON_AUTH": "false",
        "PERCEPTRON_REDIS_URL": f"redis://:{secret}@127.0.0.1:{nothing_there}/3",
    }
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(PERCEPTRON), "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        try:
            deadline = time.monotonic() + 30
            while "not reachable" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    text = log.read_text()
    assert f"store: Redis at 127.0.0.1:{nothing_there}, db 3" in text, text
    assert "not reachable" in text
    assert secret not in text


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (None, "the embedded in-process store"),
        ("redis://:pw@10.0.0.5:6380/2", "Redis at 10.0.0.5:6380, db 2"),
        ("rediss://user:pw@cache.example:6390/0", "Redis at cache.example:6390, db 0 over TLS"),
        ("redis+cluster://:pw@10.0.0.7:7000", "a Redis Cluster reached at 10.0.0.7:7000"),
        ("unix://:pw@/run/redis.sock?db=4", "Redis on the socket /run/redis.sock, db 4"),
    ],
)
def test_the_store_described(url: str | None, said: str) -> None:
    from service.store import describe_store

    described = describe_store(Settings(redis_url=url))
    assert said in described and "pw" not in described and "user" not in described


def test_help_describes_the_commands_and_their_defaults() -> None:
    top = subprocess.run([str(PERCEPTRON), "--help"], capture_output=True, text=True, timeout=60)
    assert top.returncode == 0
    assert "``" not in top.stdout and "console command" not in top.stdout
    for command in ("serve", "replay", "models"):
        assert re.search(rf"^\s+perceptron {command}\s+\w", top.stdout, re.M), command
    serve = subprocess.run(
        [str(PERCEPTRON), "serve", "--help"], capture_output=True, text=True, timeout=60
    )
    assert serve.returncode == 0
    words = " ".join(serve.stdout.split())
    for option, about in [
        ("--host HOST", "address to listen on (default: 127.0.0.1)"),
        ("--port PORT", "port to listen on (default: 8000)"),
        ("--workers N", "worker processes sharing the port; more than 1 needs "),
    ]:
        assert f"{option} {about}" in words, option
    assert "(default: 1)" in words
    assert "PERCEPTRON_" in serve.stdout


@pytest.mark.parametrize(
    "path", ["curve.png", "iris.perceptron.json", ".redis/appendonlydir/x.aof", "wine-lr.joblib"]
)
def test_what_the_readme_writes_into_the_checkout_is_ignored(path: str) -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    r = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, timeout=30)
    assert r.returncode == 0, f"git does not ignore {path}"
    tracked = subprocess.run(
        ["git", "ls-files", "--", "*.png", "*.perceptron.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert tracked.stdout == ""
