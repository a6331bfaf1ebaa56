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
from pathlib import Path

import httpx
import pytest

from service.cli.loopback import free_port, wait_until

pytestmark = pytest.mark.servers  # perceptron serve, a real process

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """``perceptron serve`` on the embedded store, auth off, at the info log level: its port
    and its log (stdout and stderr)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERCEPTRON_")}
    env["PERCEPTRON_AUTH"] = "false"
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
