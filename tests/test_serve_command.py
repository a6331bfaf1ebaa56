"""``perceptron serve`` as a newcomer starts it: what it prints once it answers, and a port that
is already taken.

The banner's and the port check's words without a process: tests/test_commands.py; through
``deploy/serve.sh`` with two workers: tests/test_serve_sh.py.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from service.cli.loopback import free_port, wait_until

pytestmark = pytest.mark.servers  # perceptron serve, a real process

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def started(tmp_path: Path, **settings: str) -> Iterator[tuple[int, Path]]:
    """``perceptron serve`` on the embedded store, auth off, every other setting at its
    default but ``settings``: its port and its log (stdout and stderr)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERCEPTRON_")}
    env.update(PERCEPTRON_AUTH="false", **settings)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: "ready on" in log.read_text(), timeout=30, what="the banner")
        yield port, log
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    with started(tmp_path) as found:
        yield found


def requests_of_every_kind(port: int, n: int) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as c:
        for i in range(n):
            p = c.post("/predict", json={"features": {"a": i}}).json()
            assert c.post("/feedback", json={"prediction_id": p["prediction_id"], "label": 1})
            assert c.post("/learn", json={"features": {"b": i}, "label": -1}).status_code == 200
            assert c.get("/models/default").status_code == 200


def test_with_the_defaults_a_request_writes_nothing_to_the_terminal(
    serving: tuple[int, Path],
) -> None:
    """No write to a terminal or a file on any request's path: 400 requests of four kinds
    leave the service's output as it was (the access log is off unless asked for)."""
    port, log = serving
    requests_of_every_kind(port, 1)  # (each kind's first: whatever it logs once)
    before = log.read_text()
    requests_of_every_kind(port, 100)
    assert log.read_text() == before


def test_the_access_log_writes_a_line_a_request_when_asked_for(tmp_path: Path) -> None:
    with started(tmp_path, PERCEPTRON_ACCESS_LOG="true") as (port, log):
        requests_of_every_kind(port, 5)
        wait_until(lambda: log.read_text().count('"POST /learn HTTP/1.1" 200') == 5, 10, "log")


def test_the_banner_says_once_where_things_are(serving: tuple[int, Path]) -> None:
    port, log = serving
    base = f"http://127.0.0.1:{port}"
    text = log.read_text()
    assert text.count("ready on") == 1 and f"perceptron serve: ready on {base}\n" in text
    assert text.count("AUTH IS OFF") == 1, text
    links = dict(re.findall(r"^  (dashboard|API docs)\s+(\S+)$", text, re.M))
    assert links == {"dashboard": f"{base}/dashboard", "API docs": f"{base}/docs"}
    for url in links.values():
        assert httpx.get(url).status_code == 200, url
    # The request to try, run as printed
    line = re.search(r"^  try\s+(curl .*)$", text, re.M)
    assert line is not None, text
    tried = subprocess.run(shlex.split(line[1]), capture_output=True, text=True, timeout=30)
    assert tried.returncode == 0 and '"prediction_id":"default:' in tried.stdout, tried
    # Quiet otherwise: the request that found the service up is no line of the access log.
    assert "/healthz" not in log.read_text()


def test_a_busy_port_says_so_and_how_to_pick_another(serving: tuple[int, Path]) -> None:
    port, _ = serving
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERCEPTRON_")}
    second = subprocess.run(
        [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)],
        env={**env, "PERCEPTRON_AUTH": "false"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 7
    assert second.stderr == (
        f"perceptron serve: port {port} on 127.0.0.1 is in use (another perceptron serve?): "
        "pick another with --port\n"
    )
