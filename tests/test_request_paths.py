"""One readable path per request: the project's files that one request of each kind runs, in
every process of ``perceptron serve --workers 2`` (its own files only: service/, not the
libraries), while four requests of that kind are served, each on a new connection so that
either worker may take it. A profile hook in each process (``request_probe/``) notes them.

What runs in the background within the window counts too (a compaction, a replica loaded by
a worker that had not served the model yet), but for the rounds that come every few seconds
whatever is asked (the store's watch, the default-label sweep): a slow machine's longer window
met one in every run: each kind is measured three times and the
fewest files it ran is held to its limit, every run to the limit and a few more
(``--log-cli-level=INFO`` shows the counts)."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest

from service.admin.models import WATCH_TASK
from service.admin.worker import SWEEP_TASK

from .servers import ServiceProcess, running

pytestmark = pytest.mark.servers

PROBE = Path(__file__).with_name("request_probe")
# The most files a request of each kind may run (docs/architecture.md draws each path).
MOST = {"predict": 22, "feedback": 20, "learn": 24}
BACKGROUND = 5  # files that work in the background (a catch-up, a cold replica) may add to one run
RUNS = 3


def _requests(url: str, route: str, ids: list[str]) -> None:
    for i in range(4):
        with httpx.Client(base_url=url, timeout=30) as c:  # a new connection each
            x = [0.5, 1.0, -1.0, float(i)]
            if route == "predict":
                r = c.post("/predict", json={"model": "probe", "features": x})
            elif route == "feedback":
                r = c.post("/feedback", json={"prediction_id": ids[i], "label": i % 2 * 2 - 1})
            else:
                r = c.post("/learn", json={"model": "probe", "features": x, "label": 1})
            assert r.status_code == 200, r.text


def _files_run(service: ServiceProcess, out: Path, route: str) -> set[str]:
    with httpx.Client(base_url=service.url, timeout=30) as c:
        ids = [
            c.post("/predict", json={"model": "probe", "features": [1.0, 0, -1, i]}).json()[
                "prediction_id"
            ]
            for i in range(4)
        ]
    assert service.proc is not None
    processes = [psutil.Process(service.proc.pid), *psutil.Process(service.proc.pid).children(True)]
    for f in out.glob("*.txt"):
        f.unlink()
    for p in processes:
        p.send_signal(signal.SIGUSR1)
    time.sleep(0.2)
    _requests(service.url, route, ids)
    for p in processes:
        p.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while len(list(out.glob("*.txt"))) < len(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {line for f in out.glob("*.txt") for line in f.read_text().split()}


def test_each_request_runs_few_of_the_projects_files(redis_url: str, tmp_path: Path) -> None:
    service = ServiceProcess(
        redis_url,
        workers=2,
        PYTHONPATH=str(PROBE),
        REQUEST_PROBE_DIR=str(tmp_path),
        REQUEST_PROBE_SKIP_TASKS=f"{WATCH_TASK},{SWEEP_TASK}",
    )
    with running(service), httpx.Client(base_url=service.url, timeout=30) as c:
        c.put("/models/probe", json={"classes": [-1, 1], "n_features": 4}).raise_for_status()
        for i in range(24):  # both workers serve the model (a new connection each time)
            x = [1.0, -1.0, 0.5, float(i % 3)]
            with httpx.Client(base_url=service.url, timeout=30) as one:
                one.post("/learn", json={"model": "probe", "features": x, "label": i % 2 * 2 - 1})
                p = one.post("/predict", json={"model": "probe", "features": x}).json()
                one.post("/feedback", json={"prediction_id": p["prediction_id"], "label": 1})
        runs = {r: [_files_run(service, tmp_path, r) for _ in range(RUNS)] for r in MOST}
    counts = {r: sorted(len(files) for files in runs[r]) for r in MOST}
    logging.getLogger(__name__).info("files each request ran, per run: %s", counts)
    for route, most in MOST.items():
        files = min(runs[route], key=len)
        assert "service/api/routes/learning_routes.py" in files  # the probe saw the request
        assert counts[route][0] <= most, (route, counts, sorted(files))
        extra = sorted(max(runs[route], key=len) - files)  # what the busiest run added
        assert counts[route][-1] <= most + BACKGROUND, (route, counts, extra)
