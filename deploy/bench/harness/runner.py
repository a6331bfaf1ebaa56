"""The runner: one benchmark's temporary directory, servers, load and results."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from harness import redis_stats
from harness.client import predict_batches
from harness.common import ROOT, log
from harness.cpu import CpuMeter
from harness.data import feedback_files
from harness.load import Wrk
from harness.results import Results, Run
from harness.servers import Servers
from harness.tools import ensure_debian_tool, export_head, git_state


class Bench:
    """Runs loads against servers it starts, records every run in ``results``, cleans up.

    ``quick``: one 3 s run per figure instead of three 5 s runs; ``settings``: NAME=VALUE
    PERCEPTRON_ settings for every service started."""

    def __init__(self, quick: bool, settings: Sequence[str] = ()) -> None:
        self.quick = quick
        self.runs = 1 if quick else 3
        self.dur = 3 if quick else 5
        self.threads = 2
        self.conns = 64
        self.tmp = Path(tempfile.mkdtemp(prefix="perceptron-bench-"))
        self.servers = Servers(self.tmp, ROOT, settings)
        self.meter = CpuMeter(self.servers.pids)
        self.results = Results(quick=quick, threads=self.threads, conns=self.conns)

    @property
    def r(self) -> redis.Redis:
        """A client of the benchmark's redis-server."""
        return self.servers.r

    def prepare(self, tree: str = "work") -> None:
        """Note the load average and the code under test (``tree``: "work" or "head"), install
        the tools missing, start redis-server."""
        self.results.load_before = os.getloadavg()
        if tree == "head":
            self.servers.tree = export_head(self.tmp)
        self.results.git = git_state(self.servers.tree)
        wrk = ensure_debian_tool("wrk", "wrk")
        ensure_debian_tool("redis-server", "redis-server")
        ensure_debian_tool("ss", "iproute2")
        log(f"temp dir {self.tmp}; load average {self.results.load_before}")
        self.servers.start_redis()
        self.wrk = Wrk(wrk, self.meter, self.servers.redis_proc.pid, self.threads)

    def wrk_run(
        self,
        key: str,
        port: int,
        path: str,
        body_file: str,
        mode: str = "cycle",
        dur: float | None = None,
        conns: int | None = None,
        workers: list[int] | None = None,
        record: bool = True,
    ) -> Run:
        """One wrk run (the default length and connections unless given), recorded under
        ``key`` unless it is a warm-up (``record=False``)."""
        run = self.wrk.run(
            key,
            port,
            path,
            body_file,
            mode,
            dur or self.dur,
            conns or self.conns,
            workers,
            warmup=not record,
        )
        if record:
            self.results.add(run)
        return run

    def feedback_bodies(
        self,
        tag: str,
        port: int,
        model: str,
        rows: Sequence[Any],
        n: int,
        against: Callable[[Any], Any],
    ) -> str:
        """``n`` fresh predictions of ``model``, and a feedback body for each (the label chosen
        by ``against`` the prediction's) in one file per wrk thread: their path pattern."""
        preds = predict_batches(port, model, rows, n)
        return feedback_files(self.tmp, self.threads, tag, preds, against)

    def meta(self, model: str) -> dict[str, int]:
        return redis_stats.meta(self.r, model)

    def redis_before(self, model: str) -> dict[str, Any]:
        return redis_stats.before(self.r, model)

    def redis_after(
        self, model: str, before: dict[str, Any], counter: str = "feedback"
    ) -> dict[str, float]:
        return redis_stats.after(self.r, model, before, counter)

    def cleanup(self) -> None:
        """Note the load average, stop every server by PID, remove the temporary directory."""
        self.results.load_after = os.getloadavg()
        for name, e in self.servers.stop_all():
            log(f"stopping {name}: {e!r}")
        shutil.rmtree(self.tmp, ignore_errors=True)
