"""Where `/predict`'s tail at 512 connections comes from: the same server measured by runs one
after another, and each worker's full garbage collections meanwhile.

    .venv/bin/python deploy/bench/tail.py                  # about 1.5 minutes
    .venv/bin/python deploy/bench/tail.py --runs 12,12,40 --connections 512

A fresh redis-server and the service as a user starts it (2 workers, every setting at its
default), a dense binary model (d=100); then wrk -t2 on `/predict` for each of --runs seconds in
turn, each run opening its connections anew: the first run meets the workers cold, the later
ones warm. Each of the service's processes records every collection of 2 ms or more
(``gc.callbacks``, from a ``sitecustomize`` put on its path for this run only: the service's
code is not changed).
Reported: each run's answers per second, p50, p99 and their ratio; and per process (the two
workers, and the supervisor, which collects little), its
collections by generation, the longest, and how often a full one came.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

from harness.client import call
from harness.common import ROOT, say
from harness.data import predict_bodies
from harness.load import start_wrk, wrk_summary
from harness.servers import ready, redis_server, serve, stop
from harness.tools import ensure_debian_tool

from service.cli.loopback import free_port, wait_until

RECORDER = """\
import gc, os, time
_started = [0.0]
def _timed(phase, info):
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    took = time.perf_counter() - _started[0]
    if took >= 0.002:
        with open(os.path.join({folder!r}, f"gc.{{os.getpid()}}"), "a") as f:
            f.write(f"{{info['generation']}} {{took * 1000:.1f}}\\n")
gc.callbacks.append(_timed)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--runs", default="12,12,40", help="each run's seconds, in turn")
    ap.add_argument("--connections", type=int, default=512)
    args = ap.parse_args()
    ensure_debian_tool("wrk", "wrk")
    runs = [float(s) for s in args.runs.split(",")]
    with tempfile.TemporaryDirectory(prefix="pcp-tail-") as folder:
        tmp = Path(folder)
        (tmp / "site").mkdir()
        (tmp / "site" / "sitecustomize.py").write_text(RECORDER.format(folder=str(tmp)))
        redis_proc, rport = redis_server(tmp)
        port = free_port()
        path = os.pathsep.join([str(ROOT), str(tmp / "site")])
        server = serve(ROOT, rport, port, 2, {"PYTHONPATH": path})
        try:
            wait_until(partial(ready, port), 30, "service")
            assert call(port, "PUT", "/models/m", {"n_features": 100})[0] == 201
            bodies = predict_bodies(tmp / "predict")
            started = time.monotonic()
            for i, seconds in enumerate(runs, 1):
                load = start_wrk(
                    port, "/predict", bodies, "cycle", args.connections, seconds,
                    pause_ms=0, threads=2, timeout_s=10,
                )  # fmt: skip
                s = wrk_summary(load)
                p50, p99 = s["p50_us"] / 1000, s["p99_us"] / 1000
                say(
                    f"run {i} ({seconds:g} s, -c{args.connections}): "
                    f"{s['requests'] / (s['duration_us'] / 1e6):,.0f}/s, p50 {p50:.1f} ms, "
                    f"p99 {p99:.1f} ms ({p99 / p50:.2f} x), max {s['max_us'] / 1000:.0f} ms"
                )
            loaded = time.monotonic() - started
        finally:
            stop(server, redis_proc)
        for record in sorted(tmp.glob("gc.*")):
            pauses = [line.split() for line in record.read_text().splitlines()]
            full = [float(ms) for gen, ms in pauses if gen == "2"]
            young = [float(ms) for gen, ms in pauses if gen != "2"]
            say(
                f"process {record.suffix[1:]}: {len(full)} full collections of 2 ms or more "
                f"(longest {max(full, default=0):.0f} ms, median "
                f"{statistics.median(full) if full else 0:.0f} ms, one every "
                f"{loaded / len(full) if full else float('inf'):.0f} s of load), "
                f"{len(young)} younger ones (longest {max(young, default=0):.1f} ms)"
            )


if __name__ == "__main__":
    main()
