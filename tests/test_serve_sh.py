"""``bash deploy/serve.sh``, the README's first command, keeps the models across restarts.

The real serve.sh and setup.sh run from a copy of deploy/ beside this checkout's .venv, so that
the store's default folder, data/redis, is the copy's and not this checkout's. The service is
stopped as a terminal's Ctrl-C does, by SIGTERM, and by SIGKILL; each time its redis-server
stops with it, and the next start finds the same weights, counters, curve and pending
predictions.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.cli.loopback import free_port, wait_until

pytestmark = pytest.mark.servers  # deploy/serve.sh and its redis-server

ROOT = Path(__file__).resolve().parents[1]


class Serve:
    """``bash deploy/serve.sh --port P ...`` in a session of its own, as from a terminal."""

    def __init__(self, checkout: Path, *args: str) -> None:
        self.checkout = checkout
        self.port = free_port()
        self.args = ["bash", str(checkout / "deploy" / "serve.sh"), "--port", str(self.port)]
        self.args += args
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PERCEPTRON_")}
        self.env["PERCEPTRON_LOG_LEVEL"] = "warning"
        self.proc: subprocess.Popen[str] | None = None
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)

    def start(self) -> Serve:
        with (self.checkout / f"serve-{self.port}.log").open("w") as log:
            self.proc = subprocess.Popen(
                self.args, env=self.env, start_new_session=True, stderr=log, text=True
            )
        wait_until(
            lambda: self.http.get("/readyz", timeout=1).status_code == 200,
            timeout=60,
            what="deploy/serve.sh",
        )
        return self

    def stop(self, how: signal.Signals) -> int:
        """Stop it: SIGINT to its process group (a terminal's Ctrl-C), SIGTERM or SIGKILL to
        the service (serve.sh execs it); the exit status."""
        assert self.proc is not None
        if how == signal.SIGINT:
            os.killpg(self.proc.pid, how)
        else:
            self.proc.send_signal(how)
        code = self.proc.wait(60)
        self.http.close()
        return code


@contextmanager
def copied_checkout(folder: Path) -> Iterator[Path]:
    """deploy/ and requirements/ copied into ``folder`` beside this checkout's .venv: a checkout
    whose data/redis is its own. Its redis-server, should a failed test leave one, is stopped."""
    shutil.copytree(ROOT / "deploy", folder / "deploy")
    shutil.copytree(ROOT / "requirements", folder / "requirements")  # setup.sh's locks
    (folder / ".venv").symlink_to(Path(sys.executable).parents[1])
    yield folder
    lock = folder / "data" / "redis" / "lock"
    if lock.exists():  # a redis-server left behind by a failed test: stop it by its socket
        subprocess.run(
            ["redis-cli", "-s", str(lock.with_name("redis.sock")), "shutdown"],
            capture_output=True,
            timeout=30,
        )


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[Path]:
    with copied_checkout(tmp_path) as folder:
        yield folder


def store_released(folder: Path) -> bool:
    """Whether no process (the service or its redis-server) holds the folder's lock."""
    with (folder / "lock").open("w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def state(http: httpx.Client) -> dict[str, Any]:
    """What the service knows of the model: configuration, version, counters, weights, curve."""
    return {
        "model": http.get("/models/kept").json(),
        "weights": http.get("/models/kept/weights").json(),
        "curve": http.get("/models/kept/metrics").json()["curve"],
    }


def test_models_outlive_a_restart_of_serve_sh(checkout: Path) -> None:
    store = checkout / "data" / "redis"
    first = Serve(checkout, "--workers", "2").start()  # two workers need a shared store
    http = first.http
    # Once it answers: where things are, once; that auth is off, once (not once per worker).
    log = checkout / f"serve-{first.port}.log"
    wait_until(lambda: "ready on" in log.read_text(), timeout=10, what="the banner")
    said = log.read_text()
    assert said.count(f"ready on http://127.0.0.1:{first.port}\n") == 1, said
    assert f"  dashboard  http://127.0.0.1:{first.port}/dashboard\n" in said
    assert said.count("AUTH IS OFF") == 1, said
    assert http.put("/models/kept", json={"n_features": 3}).status_code == 201
    xs = [[1.0, 0.5, -1.0], [-2.0, 1.0, 0.0], [0.5, -0.5, 2.0], [3.0, 1.0, 1.0]] * 10
    ys = [1, -1, 1, -1] * 10
    assert http.post(
        "/learn/batch", json={"model": "kept", "features": xs, "labels": ys}
    ).is_success
    answered = http.post("/predict", json={"model": "kept", "features": xs[0]}).json()
    first_answer = http.post(
        "/feedback", json={"prediction_id": answered["prediction_id"], "label": 1}
    )
    waiting = http.post("/predict", json={"model": "kept", "features": xs[1]}).json()
    before = state(http)
    assert before["model"]["version"] > 0 and before["model"]["counters"]["seen"] == 41

    # A second service on the same folder is refused while the first runs.
    other = Serve(checkout)
    assert other.proc is None
    refused = subprocess.run(other.args, env=other.env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "Another process uses" in refused.stderr, refused.stderr
    other.http.close()

    # Ctrl-C: the service stops, then its redis-server; the data stays in data/redis.
    assert first.stop(signal.SIGINT) == 0
    assert store_released(store)
    assert (store / "appendonlydir").is_dir() and not (store / "redis.sock").exists()

    second = Serve(checkout).start()
    assert state(second.http) == before
    # The prediction made before the restart takes its label now; the answered one is a
    # duplicate: exactly once across the restart.
    late = second.http.post(
        "/feedback", json={"prediction_id": waiting["prediction_id"], "label": -1}
    )
    assert late.status_code == 200 and late.json()["duplicate"] is False
    again = second.http.post(
        "/feedback", json={"prediction_id": answered["prediction_id"], "label": 1}
    )
    assert again.json() == {**first_answer.json(), "duplicate": True}
    after = state(second.http)
    assert after["model"]["counters"]["seen"] == 42
    assert second.stop(signal.SIGTERM) == 128 + signal.SIGTERM
    assert store_released(store)

    # Even a service killed outright takes its redis-server down with it (Linux).
    third = Serve(checkout).start()
    assert state(third.http) == after
    third.stop(signal.SIGKILL)
    wait_until(lambda: store_released(store), timeout=30, what="redis-server to stop")
    fourth = Serve(checkout).start()
    assert state(fourth.http) == after
    assert fourth.stop(signal.SIGTERM) == 128 + signal.SIGTERM
