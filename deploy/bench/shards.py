"""8 models learning in parallel: on a 3-master Redis Cluster vs on one Redis, examples/s.

    .venv/bin/python deploy/bench/shards.py                        # about 3 minutes
    .venv/bin/python deploy/bench/shards.py --workers 2 --repeat 1 --seconds 4

For each W in --workers, --repeat rounds of two runs, one on each store, alternated: a fresh
redis-server (one Redis), or three fresh cluster-enabled redis-servers joined with
``redis-cli --cluster create ... --cluster-replicas 0`` (the cluster, three masters), all
without persistence; then ``perceptron serve --workers W`` on it (for the cluster with
PERCEPTRON_REDIS_URL=redis+cluster://), 8 dense binary models (d=100) whose names spread over the
three masters (each model lives whole on the master owning the slot of ``pcp:{name}:meta``),
and --clients writer processes, client i sending packed 1000 x 100 /learn/batch bodies to model
i % 8, back to back on one keep-alive connection, for --seconds (the clock starts once every
client has made its bodies). Reported per run and in a final markdown table: examples learned
per second over the 8 models (from each model's own counter), requests that did not answer 200,
whether each model's version grew by exactly the updates the answers acknowledged, the CPU
Redis used during the load (INFO cpu, user + sys, summed over the cluster's nodes) and the
service's, in cores, to tell whether Redis was the bottleneck, and how busy the machine's CPUs
were (all processes, others' included).
Every process is started here, bound to 127.0.0.1, and stopped by its PID; temp dirs removed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import redis
from harness.client import call, send
from harness.common import BATCH, DIM, ROOT, say
from harness.data import packed_bodies
from harness.packed import ceiling
from harness.servers import ready

from service.cli.loopback import free_port, redis_server_command, wait_until

N_MODELS = 8
MASTERS = 3
SLOTS = 16384
STORES = ("one Redis", "cluster")


def crc16(data: bytes) -> int:
    """CRC16-XMODEM, Redis Cluster's key hash (checked against CLUSTER KEYSLOT in each run)."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def model_names(n: int = N_MODELS) -> list[str]:
    """``n`` names whose slots fall well inside the three equal slot ranges that
    ``redis-cli --cluster create`` gives three masters, as evenly as possible (3, 3, 2)."""
    third = SLOTS // MASTERS
    quota = [n // MASTERS + (i < n % MASTERS) for i in range(MASTERS)]
    taken: list[list[str]] = [[] for _ in range(MASTERS)]
    i = 0
    while sum(map(len, taken)) < n:
        name = f"m{i}"
        i += 1
        slot = crc16(name.encode()) % SLOTS
        shard, offset = divmod(slot, third)
        if shard < MASTERS and 200 <= offset < third - 200 and len(taken[shard]) < quota[shard]:
            taken[shard].append(name)
    order = []  # interleaved, so that any 3 consecutive models sit on 3 masters
    for k in range(max(quota)):
        order += [names[k] for names in taken if k < len(names)]
    return order


def model_writer(port: int, model: str, seed: int, seconds: float, go: Any, out: Any) -> None:
    """``send``, for one named model; its bodies are made before the clock starts (all
    clients pass ``go``, a barrier, together)."""
    batches = packed_bodies(seed, model=model)
    go.wait(120)
    ok, updates, statuses = send(port, batches, time.time() + seconds)
    out.put((model, ok, updates, statuses))


def start_redis(folder: Path, cluster: bool) -> tuple[int, subprocess.Popen[bytes]]:
    port = free_port()
    args = redis_server_command(port, folder)
    if cluster:
        args += ["--cluster-enabled", "yes", "--cluster-port", str(free_port())]
        args += ["--cluster-config-file", str(folder / "nodes.conf")]
        args += ["--cluster-node-timeout", "5000"]
    return port, subprocess.Popen(args, stdout=subprocess.DEVNULL)


def ping(port: int) -> bool:
    with redis.Redis(host="127.0.0.1", port=port) as c:
        return bool(c.ping())


def cluster_ok(ports: list[int]) -> bool:
    for port in ports:
        with redis.Redis(host="127.0.0.1", port=port) as c:
            info = c.execute_command("CLUSTER INFO")
            if (info["cluster_state"], info["cluster_slots_ok"]) != ("ok", str(SLOTS)):
                return False
    return True


def redis_cpu(ports: list[int]) -> float:
    """CPU seconds (user + sys, the whole process) used so far by these redis-servers."""
    total = 0.0
    for port in ports:
        with redis.Redis(host="127.0.0.1", port=port) as c:
            info = c.info("cpu")
            total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


def tree_cpu(pid: int) -> float:
    """CPU seconds used so far by the process ``pid`` and its live descendants."""
    total = 0.0
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def placement(ports: list[int], names: list[str]) -> dict[str, tuple[int, int]]:
    """Each model's (slot, port of the master serving it), from CLUSTER KEYSLOT and SLOTS."""
    with redis.Redis(host="127.0.0.1", port=ports[0]) as c:
        ranges = [
            (int(start), int(end), int(master[1]))
            for start, end, master, *_ in c.execute_command("CLUSTER SLOTS")
        ]
        out = {}
        for name in names:
            slot = int(c.execute_command("CLUSTER KEYSLOT", f"pcp:{{{name}}}:meta"))
            assert slot == crc16(name.encode()) % SLOTS
            owner = next(port for start, end, port in ranges if start <= slot <= end)
            out[name] = (slot, owner)
    return out


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def run(store: str, workers: int, clients: int, seconds: float, names: list[str]) -> dict[str, Any]:
    cluster = store == "cluster"
    base = Path(tempfile.mkdtemp(prefix="pcp-shards-"))
    nodes: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    service: subprocess.Popen[bytes] | None = None
    procs: list[mp.Process] = []
    try:
        for i in range(MASTERS if cluster else 1):
            folder = base / str(i)
            folder.mkdir()
            port, proc = start_redis(folder, cluster)
            nodes.append(proc)
            ports.append(port)
        for port in ports:
            wait_until(partial(ping, port), 30, f"redis-server on {port}")
        if cluster:
            subprocess.run(
                ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports)]
                + ["--cluster-replicas", "0", "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=60,
            )
            wait_until(lambda: cluster_ok(ports), 30, "cluster_state:ok on every node")
            where = placement(ports, names)
            say(f"  masters: {', '.join(f'127.0.0.1:{p}' for p in ports)}")
            say("  " + ", ".join(f"{n} slot {s} on :{p}" for n, (s, p) in where.items()))
            per = {p: sum(1 for _, o in where.values() if o == p) for p in ports}
            say(f"  models per master: {', '.join(f':{p} {k}' for p, k in per.items())}")
            url = f"redis+cluster://127.0.0.1:{ports[0]}"
        else:
            url = f"redis://127.0.0.1:{ports[0]}/0"
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PERCEPTRON_REDIS_URL": url,
            "PERCEPTRON_AUTH": "false",
            "PERCEPTRON_DEFAULT_MODEL": "false",
        }
        service = subprocess.Popen(
            [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)]
            + ["--workers", str(workers)],
            cwd=ROOT,
            env=env,
        )
        wait_until(partial(ready, port), 30, "service")
        for name in names:
            status, text = call(port, "PUT", f"/models/{name}", {"n_features": DIM})
            assert status == 201, (name, status, text)
        for name in names:  # every worker loads every model
            warm = packed_bodies(99, 1, model=name)[0]
            for _ in range(2 * workers):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request(
                    "POST", "/learn/batch", body=warm, headers={"content-type": "application/json"}
                )
                conn.getresponse().read()
                conn.close()
        before = {n: json.loads(call(port, "GET", f"/models/{n}")[1]) for n in names}
        queue: Any = mp.Queue()
        go: Any = mp.Barrier(clients + 1)
        procs = [
            mp.Process(
                target=model_writer,
                args=(port, names[i % len(names)], 1 + i, seconds, go, queue),
            )
            for i in range(clients)
        ]
        for p in procs:
            p.start()
        go.wait(120)
        redis_before, service_before = redis_cpu(ports), tree_cpu(service.pid)
        machine_before = psutil.cpu_times()
        start = time.time()
        results = [queue.get(timeout=seconds + 120) for _ in procs]
        elapsed = time.time() - start
        redis_used, service_used = redis_cpu(ports) - redis_before, tree_cpu(service.pid)
        service_used -= service_before
        machine = psutil.cpu_times()
        idle = sum(getattr(machine, f) - getattr(machine_before, f) for f in ("idle", "iowait"))
        busy = 1 - idle / max(sum(machine) - sum(machine_before), 1e-9)
        for p in procs:
            p.join(30)
        after = {n: json.loads(call(port, "GET", f"/models/{n}")[1]) for n in names}
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(10)
        stop(service)
        for proc in nodes:
            stop(proc)
        shutil.rmtree(base, ignore_errors=True)
    statuses: dict[int, int] = {}
    acked = dict.fromkeys(names, 0)
    for model, _, updates, s in results:
        acked[model] += updates
        for k, v in s.items():
            statuses[k] = statuses.get(k, 0) + v
    learned = {n: after[n]["counters"]["learned"] - before[n]["counters"]["learned"] for n in names}
    return {
        "examples_per_s": sum(learned.values()) / elapsed,
        "per_model": {n: learned[n] / elapsed for n in names},
        "ok": sum(o for _, o, _, _ in results),
        "failed": statuses,
        "exact": {n: after[n]["version"] - before[n]["version"] == acked[n] for n in names},
        "redis_cores": redis_used / elapsed,
        "service_cores": service_used / elapsed,
        "machine_busy": busy,
        "seconds": elapsed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="2,4")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    for exe in ("redis-server", "redis-cli"):
        if shutil.which(exe) is None:
            sys.exit(f"{exe} is needed (deploy/setup.sh test installs it)")
    names = model_names()
    cores = os.cpu_count()
    say(f"machine: {cores} cores ({len(os.sched_getaffinity(0))} usable by this process)")
    say(f"the learner loop alone (run_sequence, d={DIM}): {ceiling():,.0f} examples/s, one core")
    say(f"models: {', '.join(names)}; client i sends to model i % {len(names)}")
    table: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for w in [int(v) for v in args.workers.split(",")]:
        for _ in range(args.repeat):
            for store in STORES:
                say(f"W={w} {store}:")
                r = run(store, w, args.clients, args.seconds, names)
                table.setdefault((store, w), []).append(r)
                bad = [n for n, ok in r["exact"].items() if not ok]
                all_exact = f"yes, all {len(names)}" if not bad else "NO: " + ", ".join(bad)
                say(
                    f"  {r['examples_per_s']:,.0f} examples/s over {len(names)} models "
                    f"({', '.join(f'{n} {v:,.0f}' for n, v in r['per_model'].items())}), "
                    f"{r['ok']} ok, failed {r['failed']}, "
                    f"exact {all_exact}, "
                    f"Redis {r['redis_cores']:.2f} cores, service {r['service_cores']:.2f} cores, "
                    f"machine {r['machine_busy']:.0%} busy (all processes)"
                )
    say(
        f"\n{args.clients} writer processes, {len(names)} models, packed {BATCH} x {DIM} "
        f"batches, {args.seconds:g} s runs, median of {args.repeat}; {cores} cores; "
        "CPU in cores (CPU seconds / run seconds), Redis summed over the cluster's nodes; "
        "machine busy: all processes, this benchmark's clients and others included"
    )
    say(
        "| W | one Redis examples/s | cluster examples/s | cluster / one | "
        "one Redis non-200 | cluster non-200 | exact (one / cluster) | "
        "Redis CPU one / cluster | service CPU one / cluster | machine busy one / cluster |"
    )
    say("|" + "---|" * 10)
    for w in sorted({w for _, w in table}):
        med: dict[str, float] = {}
        fails: dict[str, str] = {}
        exact: dict[str, str] = {}
        rcpu: dict[str, float] = {}
        scpu: dict[str, float] = {}
        busy: dict[str, float] = {}
        for store in STORES:
            runs = table[store, w]
            med[store] = statistics.median(r["examples_per_s"] for r in runs)
            failed = sum(sum(r["failed"].values()) for r in runs)
            fails[store] = f"{failed} of {failed + sum(r['ok'] for r in runs)}"
            bad = sorted({n for r in runs for n, ok in r["exact"].items() if not ok})
            exact[store] = f"yes ({len(names)}/{len(names)})" if not bad else "no: " + " ".join(bad)
            rcpu[store] = statistics.median(r["redis_cores"] for r in runs)
            scpu[store] = statistics.median(r["service_cores"] for r in runs)
            busy[store] = statistics.median(r["machine_busy"] for r in runs)
        one, clu = STORES
        say(
            f"| {w} | {med[one]:,.0f} | {med[clu]:,.0f} | {med[clu] / med[one]:.2f} | "
            f"{fails[one]} | {fails[clu]} | {exact[one]} / {exact[clu]} | "
            f"{rcpu[one]:.2f} / {rcpu[clu]:.2f} | {scpu[one]:.2f} / {scpu[clu]:.2f} | "
            f"{busy[one]:.0%} / {busy[clu]:.0%} |"
        )


if __name__ == "__main__":
    main()
