"""Each route against the floor as a user measures it: a fresh Redis and a fresh server for
every design in every round, alone on the machine while it is measured.

    .venv/bin/python deploy/bench/fresh.py                   # about 3 minutes
    .venv/bin/python deploy/bench/fresh.py --repeat 5 --seconds 6 --workers 2

Designs: the floor (``baseline_app.py``: a bare FastAPI app that parses the same body and makes
one Redis round trip), ``/predict`` of the service, ``/learn`` one example a request with one
writer (the default) and with each worker committing its own (PERCEPTRON_ONE_WRITER=false).
Each round runs every design once, in one order on even rounds and the reverse on odd ones:
a fresh redis-server (no persistence) and the server with --workers uvicorn workers, a dense
binary model (d=100) made, 1 s of warm-up, then ``wrk -t2 -c64`` for --seconds on d=100
bodies (wrk_bodies.lua), then both stopped by their PIDs; nothing else of the benchmark runs
meanwhile. Reported per design, medians over the rounds: answers (200) per second, the ratio
to the floor of the same round, and the CPU (user + sys) per answer of the server's
processes and of Redis. ``deploy/bench/scale.py`` keeps its servers up across rounds, all at
once (docs/performance.md says what that changes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import mixed
import psutil
from challengers import predict_bodies
from harness.cpu import process_cpu, tree_cpu, tree_delta
from harness.tools import ensure_debian_tool
from mixed import learn_bodies, summary
from writers import call, ready, redis_server, say, serve, stop

from service.cli.loopback import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DESIGNS = ("floor", "predict", "learn one writer", "learn each commits")


def start_floor(redis_port: int, port: int, workers: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "baseline_app:app", "--app-dir", str(HERE)]
        + ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
        + ["--log-level", "warning", "--no-access-log"],
        env={**os.environ, "BENCH_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def floor_ready(port: int) -> bool:
    try:
        status: int = call(port, "POST", "/floor", {"features": [0.5] * 100})[0]
    except OSError:
        return False
    return status == 200


def wrk(port: int, path: str, bodies: Path, seconds: float) -> dict[str, Any]:
    """wrk -t2 -c64 on ``path`` for ``seconds``, its bodies from ``bodies`` in turn."""
    return summary(mixed.wrk(port, path, bodies, "cycle", 64, seconds, 0, 2, timeout_s=10))


def run(design: str, tmp: Path, workers: int, seconds: float) -> dict[str, Any]:
    redis_proc, rport = redis_server(tmp)
    port = free_port()
    if design == "floor":
        server = start_floor(rport, port, workers)
        wait_until(partial(floor_ready, port), 30, "floor")
        path, bodies = "/floor", predict_bodies(tmp / "predict")
    else:
        env = {"PERCEPTRON_ONE_WRITER": "false"} if design.endswith("each commits") else {}
        server = serve(ROOT, rport, port, workers, env)
        wait_until(partial(ready, port), 30, "service")
        assert call(port, "PUT", "/models/m", {"n_features": 100})[0] == 201
        if design == "predict":
            path, bodies = "/predict", predict_bodies(tmp / "predict")
        else:
            path, bodies = "/learn", learn_bodies(tmp / "learn")
    try:
        wrk(port, path, bodies, 1)  # warm-up: every worker's first requests
        proc, rproc = psutil.Process(server.pid), psutil.Process(redis_proc.pid)
        cpu0, r0 = tree_cpu(server.pid), process_cpu(rproc)
        s = wrk(port, path, bodies, seconds)
        cpu1, r1 = tree_cpu(proc.pid), process_cpu(rproc)
    finally:
        stop(server, redis_proc)
    bad = sum(s["statuses"].values()) + s["timeouts"]
    ok = s["requests"] - bad
    return {
        "per_s": ok / (s["duration_us"] / 1e6),
        "server_us": 1e6 * tree_delta(cpu0, cpu1) / max(1, ok),
        "redis_us": 1e6 * (r1 - r0) / max(1, ok),
        "bad": bad,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    ensure_debian_tool("wrk", "wrk")
    table: dict[str, list[dict[str, Any]]] = {d: [] for d in DESIGNS}
    for r in range(args.repeat):
        for design in DESIGNS if r % 2 == 0 else DESIGNS[::-1]:
            with tempfile.TemporaryDirectory(prefix="pcp-fresh-") as folder:
                got = run(design, Path(folder), args.workers, args.seconds)
            table[design].append(got)
            say(
                f"round {r + 1} {design}: {got['per_s']:,.0f}/s, server "
                f"{got['server_us']:.0f} us, Redis {got['redis_us']:.1f} us per answer"
            )
            time.sleep(0.5)
    say(
        f"\nA fresh Redis and server per design and round, {args.workers} workers, wrk -t2 -c64 "
        f"{args.seconds:g} s, d=100; median of {args.repeat} (ratio: each round's own floor)"
    )
    say("| design | per s | ÷ the floor | server µs per answer | Redis µs per answer | non-200 |")
    say("|---|---:|---:|---:|---:|---:|")
    for design in DESIGNS:
        runs = table[design]
        ratios = [g["per_s"] / f["per_s"] for g, f in zip(runs, table["floor"], strict=True)]
        say(
            f"| {design} | {statistics.median(g['per_s'] for g in runs):,.0f} "
            f"| {statistics.median(ratios):.2f} "
            f"| {statistics.median(g['server_us'] for g in runs):.0f} "
            f"| {statistics.median(g['redis_us'] for g in runs):.1f} "
            f"| {sum(g['bad'] for g in runs)} |"
        )


if __name__ == "__main__":
    main()
