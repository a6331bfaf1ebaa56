"""A model's writer shedding its connections, against keeping them: one-example /learn a second.

    .venv/bin/python deploy/bench/shed.py                        # about 2 minutes
    .venv/bin/python deploy/bench/shed.py --writer-core 0.3   # as root: the writer capped

With PERCEPTRON_WRITER_SHEDS_FROM_WORKERS (4 by default) or more workers, a worker that writes
a model other workers hand requests to answers its own clients ``Connection: close``, so that
they reconnect to the others and its core goes to learning (service/api/connections.py). For
each W in --workers: a fresh redis-server and ``perceptron serve --workers W`` on loopback,
one dense binary model (d=100), and wrk's --connections keep-alive connections sending
/learn of one example each, for --seconds after a warm-up, with the writer shedding (from W
workers) and keeping its connections (0: never), alternated run by run. Reported: requests a
second, the writer's core, and each worker's. The writer is found as the worker whose
connection to Redis sends its takes (``BLMOVE``, seen with ``MONITOR`` during the warm-up).
With --models N the requests go to N models in turn: their writers may be several workers,
each of which sheds while fed (reported: how many, and the busiest one's core).

With --writer-core F the writer's CPU is capped at F of a core (a cgroup: Linux, root), as a
writer is full on a machine with many cores (docs/performance.md, figure 16), where the other
workers have cores to spare; on two cores, without the cap, everything shares the same two.
A writer sheds only where each worker has a core (``connections.writer_sheds``): a W past the
cores this process may use is left out, and said so.
Every process is started here, bound to 127.0.0.1, and stopped by its PID; the cgroup made
for the cap is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import redis
from harness.client import call
from harness.common import DIM, ROOT, say
from harness.load import start_wrk, wrk_summary
from harness.servers import ready, redis_server, serve, stop
from harness.tools import ensure_debian_tool

from service.api.connections import usable_cores
from service.cli.loopback import free_port, wait_until

MODEL = "m"
PERIOD_US = 10_000  # the cap's period: the writer runs at most F of each 10 ms


def bodies(folder: Path, models: int) -> Path:
    rng = random.Random(7)
    path = folder / "learn.txt"
    with path.open("w") as f:
        for i in range(5000):
            x = [round(rng.gauss(0, 1), 4) for _ in range(DIM)]
            label = 1 if x[0] + 0.3 * x[1] > 0 else -1
            model = model_name(i % models)
            f.write(json.dumps({"model": model, "features": x, "label": label}))
            f.write("\n")
    return path


def learned_per_s(port: int, connections: int, seconds: float, body_file: Path) -> float:
    """wrk's /learn for ``seconds``: requests a second, each answered 200."""
    s = wrk_summary(start_wrk(port, "/learn", body_file, "cycle", connections, seconds, 0))
    if s.get("statuses"):
        raise RuntimeError(f"answers other than 200: {s['statuses']}")
    return float(s["requests"]) / (float(s["duration_us"]) / 1e6)


def model_name(i: int) -> str:
    return MODEL if i == 0 else f"{MODEL}{i}"


def taking_workers(redis_port: int, workers: list[psutil.Process]) -> list[psutil.Process]:
    """The workers whose connections to Redis send BLMOVE (a writer's take), within a second."""
    ports = set()
    with redis.Redis(port=redis_port).monitor() as monitor:  # type: ignore[no-untyped-call]
        until = time.monotonic() + 1.0
        for command in monitor.listen():
            if str(command.get("command", "")).upper().startswith("BLMOVE"):
                ports.add(int(command["client_port"]))
            if time.monotonic() > until:
                break
    owners = {c.laddr.port: w for w in workers for c in w.net_connections(kind="tcp") if c.laddr}
    found = {owners[p].pid: owners[p] for p in ports if p in owners}
    if not found:
        raise RuntimeError("no worker writes a model")
    return list(found.values())


@contextmanager
def capped(share: float | None) -> Iterator[Path | None]:
    """A cgroup that caps its processes at ``share`` of a core (v2 or v1), removed after."""
    if share is None:
        yield None
        return
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    group = Path("/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/cpu") / f"pcp-shed-{os.getpid()}"
    group.mkdir()
    try:
        quota = int(share * PERIOD_US)
        if v2:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        yield group
    finally:
        group.rmdir()  # (empty: its processes were stopped)


def run(
    w: int, shed: bool, a: argparse.Namespace, body_file: Path, group: Path | None
) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="pcp-shed-")
    store, redis_port = redis_server(folder)
    port = free_port()
    env = {"PERCEPTRON_WRITER_SHEDS_FROM_WORKERS": str(w) if shed else "0"}
    service = serve(ROOT, redis_port, port, w, env)
    try:
        wait_until(lambda: ready(port), timeout=60, what="the service")
        for i in range(a.models):
            assert call(port, "PUT", f"/models/{model_name(i)}", {"n_features": DIM})[0] == 201
        workers = [
            p
            for p in psutil.Process(service.pid).children(recursive=True)
            if "resource_tracker" not in " ".join(p.cmdline())
        ]
        warm = threading.Thread(target=learned_per_s, args=(port, a.connections, 3, body_file))
        warm.start()
        time.sleep(1.0)
        writers = taking_workers(redis_port, workers)
        warm.join()
        if group is not None:
            if len(writers) != 1:
                raise RuntimeError(f"the model's writer is not one worker: {writers}")
            (group / "cgroup.procs").write_text(str(writers[0].pid))
        before = {p.pid: sum(p.cpu_times()[:2]) for p in workers}
        rate = learned_per_s(port, a.connections, a.seconds, body_file)
        cores = {p.pid: (sum(p.cpu_times()[:2]) - before[p.pid]) / a.seconds for p in workers}
    finally:
        stop(service, store)
    return {
        "per_s": rate,
        "writer_core": max(cores[w.pid] for w in writers),
        "writers": len(writers),
        "cores": sorted(cores.values(), reverse=True),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="4", help="worker counts (default 4)")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--writer-core", type=float, help="cap the writer at this share of a core")
    ap.add_argument("--models", type=int, default=1, help="models the load is spread over")
    a = ap.parse_args()
    ensure_debian_tool("wrk", "wrk")
    ensure_debian_tool("redis-server", "redis-server")
    cap = f", the writer capped at {a.writer_core:g} of a core" if a.writer_core else ""
    say(
        f"# deploy/bench/shed.py: /learn of one example, wrk -c{a.connections}, "
        f"{a.seconds:g} s runs{cap}"
    )
    cores = usable_cores()
    counts = [int(x) for x in a.workers.split(",")]
    for w in counts:
        if w > cores:
            say(f"W={w}: more workers than the {cores} cores here, so no writer sheds: left out")
    got: dict[tuple[int, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as folder, capped(a.writer_core) as group:
        body_file = bodies(Path(folder), a.models)
        for r in range(a.rounds):
            for w in [w for w in counts if w <= cores]:
                order = (True, False) if r % 2 == 0 else (False, True)
                for shed in order:
                    name = "sheds" if shed else "keeps"
                    res = run(w, shed, a, body_file, group)
                    got.setdefault((w, name), []).append(res)
                    say(
                        f"round {r + 1} W={w} writer {name}: {res['per_s']:,.0f} requests/s, "
                        f"{res['writers']} writer(s), the busiest {res['writer_core']:.2f} core, "
                        "workers " + ", ".join(f"{c:.2f}" for c in res["cores"])
                    )
    say("\n| W | writer | requests/s (median) | writer's core | runs |")
    say("|---:|---|---:|---:|---|")
    for (w, name), runs in got.items():
        rate = statistics.median(r["per_s"] for r in runs)
        core = statistics.median(r["writer_core"] for r in runs)
        each = ", ".join(f"{r['per_s']:,.0f}" for r in runs)
        say(f"| {w} | {name} | {rate:,.0f} | {core:.2f} | {each} |")


if __name__ == "__main__":
    main()
