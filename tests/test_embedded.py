"""The embedded store: one process, no Redis to set up."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from .servers import ServiceProcess, running

pytestmark = pytest.mark.servers  # the service as a process


def test_service_runs_on_the_embedded_store_without_redis() -> None:
    with running(ServiceProcess(redis_url=None)) as server, httpx.Client(base_url=server.url) as c:
        p = c.post("/predict", json={"features": {"word=free": 1.0}}).json()
        f = c.post("/feedback", json={"prediction_id": p["prediction_id"], "label": 1}).json()
        assert f == {"mistake": True, "updated": True, "version": 1, "duplicate": False}
        again = c.post("/predict", json={"features": {"word=free": 1.0}}).json()
        assert again["label"] == 1 and again["version"] == 1


def test_embedded_store_refuses_several_workers() -> None:
    env = {"PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-m", "service.cli.main", "serve", "--workers", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "PERCEPTRON_REDIS_URL" in r.stderr
