"""Each route against the floor as a user measures it: a fresh Redis and a fresh server for
every design in every round, alone on the machine while it is measured.

    .venv/bin/python deploy/bench/fresh.py                   # about 13 minutes
    .venv/bin/python deploy/bench/fresh.py --repeat 5 --seconds 6 --workers 2 --connections 64

Designs: the floor (``baseline_app.py``: a bare FastAPI app that parses the same body and makes
one Redis round trip), ``/predict`` of the service, ``/learn`` one example a request with one
writer (the default) and with each worker committing its own (PERCEPTRON_ONE_WRITER=false),
and ``/feedback`` on fresh predictions (a fifth of its labels against the prediction).
Each round runs every design once at each count of connections, in one order on even rounds and
the reverse on odd ones: a fresh redis-server (no persistence) and the server with --workers
uvicorn workers and every setting at its default, a dense binary model (d=100) made, 1 s of
warm-up, then ``wrk -t2 -cN`` on d=100 bodies (wrk_bodies.lua) for --seconds (6 s at 64
connections, 30 s at 512: each run opens its connections at once, and the burst of its first
second, up to 1.2 s for a few requests, would be a large part of a short run's slowest 1%), then
both stopped by their PIDs; nothing else of the benchmark runs meanwhile. Reported per design
and count of connections, medians over the rounds: answers (200) per second, the ratio to the
floor of the same round, wrk's p50 and p99 latency and their ratio, and the CPU (user + sys) per
answer of the server's processes and of Redis. ``deploy/bench/scale.py`` keeps its servers up
across rounds, all at once (docs/performance.md says what that changes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from harness.client import call
from harness.common import HERE, ROOT, say
from harness.cpu import process_cpu, tree_cpu, tree_delta
from harness.data import learn_bodies, predict_bodies
from harness.load import start_wrk, wrk_summary
from harness.servers import ready, redis_server, serve, stop
from harness.tools import ensure_debian_tool

from service.cli.loopback import free_port, wait_until

DESIGNS = ("floor", "predict", "learn one writer", "learn each commits", "feedback")


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


def wrk(
    port: int, path: str, bodies: Path, seconds: float, conns: int, mode: str = "cycle"
) -> dict[str, Any]:
    """wrk -t2 -c``conns`` on ``path`` for ``seconds``, its bodies from ``bodies`` in turn
    (``once``: each sent once, a file per thread)."""
    return wrk_summary(start_wrk(port, path, bodies, mode, conns, seconds, 0, 2, timeout_s=10))


def fresh_feedback(port: int, tmp: Path, n: float, threads: int) -> Path:
    """/feedback bodies for at least ``n`` fresh predictions of model ``m``, one file per wrk
    thread (``feedback_%d``), a fifth of their labels against the prediction (each an update:
    the labels of a quiet stream, mostly right)."""
    rng = np.random.default_rng(2)
    files = [(tmp / f"feedback_{i}").open("w") for i in range(threads)]
    made = 0
    while made < n:
        xs = rng.normal(size=(1000, 100)).round(4).tolist()
        status, data = call(port, "POST", "/predict/batch", {"model": "m", "features": xs})
        assert status == 200, data
        for i, p in enumerate(json.loads(data)["predictions"]):
            label = -p["label"] if rng.random() < 0.2 else p["label"]
            body = {"prediction_id": p["prediction_id"], "label": label}
            files[i % threads].write(json.dumps(body) + "\n")
        made += len(xs)
    for f in files:
        f.close()
    return tmp / "feedback_%d"


def run(design: str, tmp: Path, workers: int, seconds: float, conns: int) -> dict[str, Any]:
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
        if design in ("predict", "feedback"):
            path, bodies = "/predict", predict_bodies(tmp / "predict")
        else:
            path, bodies = "/learn", learn_bodies(tmp / "learn")
    try:
        wrk(port, path, bodies, 1, conns)  # warm-up: every worker's first requests
        mode = "cycle"
        if design == "feedback":  # (ids enough for 7,000 answers a second)
            path, mode = "/feedback", "once"
            bodies = fresh_feedback(port, tmp, 7_000 * seconds, threads=2)
        proc, rproc = psutil.Process(server.pid), psutil.Process(redis_proc.pid)
        cpu0, r0 = tree_cpu(server.pid), process_cpu(rproc)
        s = wrk(port, path, bodies, seconds, conns, mode)
        cpu1, r1 = tree_cpu(proc.pid), process_cpu(rproc)
    finally:
        stop(server, redis_proc)
    bad = sum(s["statuses"].values()) + s["timeouts"]
    ok = s["requests"] - bad
    return {
        "per_s": ok / (s["duration_us"] / 1e6),
        "server_us": 1e6 * tree_delta(cpu0, cpu1) / max(1, ok),
        "redis_us": 1e6 * (r1 - r0) / max(1, ok),
        "p50_ms": s["p50_us"] / 1000,
        "p99_ms": s["p99_us"] / 1000,
        "bad": bad,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", default="6,30", help="each run's length, by --connections")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--connections", default="64,512", help="wrk's -c, each in turn")
    args = ap.parse_args()
    ensure_debian_tool("wrk", "wrk")
    conns = [int(c) for c in args.connections.split(",")]
    lengths = dict(zip(conns, (float(s) for s in args.seconds.split(",")), strict=True))
    table: dict[tuple[str, int], list[dict[str, Any]]] = {
        (d, c): [] for c in conns for d in DESIGNS
    }
    for r in range(args.repeat):
        for c in conns:
            for design in DESIGNS if r % 2 == 0 else DESIGNS[::-1]:
                with tempfile.TemporaryDirectory(prefix="pcp-fresh-") as folder:
                    got = run(design, Path(folder), args.workers, lengths[c], c)
                table[design, c].append(got)
                say(
                    f"round {r + 1} -c{c} {design}: {got['per_s']:,.0f}/s, p50 "
                    f"{got['p50_ms']:.1f} p99 {got['p99_ms']:.1f} ms, server "
                    f"{got['server_us']:.0f} us, Redis {got['redis_us']:.1f} us per answer"
                )
                time.sleep(0.5)
    say(
        f"\nA fresh Redis and server per design and round, {args.workers} workers, wrk -t2 "
        f"(-c, s: {lengths}), d=100; median of {args.repeat} (ratio: each round's own floor)"
    )
    say(
        "| -c | design | per s | ÷ the floor | p50 ms | p99 ms | p99 ÷ p50 "
        "| server µs per answer | Redis µs per answer | non-200 |"
    )
    say("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (design, c), runs in sorted(table.items(), key=lambda kv: kv[0][1]):
        floors = table["floor", c]
        ratios = [g["per_s"] / f["per_s"] for g, f in zip(runs, floors, strict=True)]
        tails = [g["p99_ms"] / g["p50_ms"] for g in runs if g["p50_ms"] > 0]
        say(
            f"| {c} | {design} | {statistics.median(g['per_s'] for g in runs):,.0f} "
            f"| {statistics.median(ratios):.2f} "
            f"| {statistics.median(g['p50_ms'] for g in runs):.1f} "
            f"| {statistics.median(g['p99_ms'] for g in runs):.1f} "
            f"| {statistics.median(tails) if tails else float('nan'):.1f} "
            f"| {statistics.median(g['server_us'] for g in runs):.0f} "
            f"| {statistics.median(g['redis_us'] for g in runs):.1f} "
            f"| {sum(g['bad'] for g in runs)} |"
        )


if __name__ == "__main__":
    main()
