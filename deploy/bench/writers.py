"""One model, many writers: packed /learn/batch throughput as workers are added.

    .venv/bin/python deploy/bench/writers.py                       # about 4 minutes
    .venv/bin/python deploy/bench/writers.py --baseline REV        # and a checkout of REV

For each W in --workers: a fresh redis-server and ``perceptron serve --workers W`` on
loopback, one dense binary model (d=100), and --clients writer processes that each send
packed 1000 x 100 batches to that model, back to back on one keep-alive connection, for
--seconds. Reported: examples learned per second (from the model's own counter), the CPU
(user + sys) per learned example of the service's processes and of Redis, requests that did
not answer 200, and the model's version against the updates the answers
acknowledged (they must be equal), and first the ceiling: the learner loop alone on one core.
Each W runs this tree with PERCEPTRON_ONE_WRITER=true and with it false (each worker commits
its own), alternated run by run, and their ratio; with --baseline, a checkout of REV too (a git
worktree made here, removed at the end). Every process is started here, bound to 127.0.0.1,
and stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import psutil
from harness.cpu import process_cpu, tree_cpu, tree_delta

from service.cli.loopback import free_port, redis_server_command, wait_until

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
DIM, BATCH = 100, 1000


def say(*parts: Any, flush: bool = True) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    if flush:
        sys.stdout.flush()


def on_service_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on the event loop a worker of ``perceptron serve`` runs on: uvloop where
    it is installed (it is a dependency), as uvicorn picks it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def redis_server(folder: str | Path) -> tuple[subprocess.Popen[bytes], int]:
    """A redis-server on a free loopback port, without persistence, its files in ``folder``;
    stop it by its PID."""
    port = free_port()
    return subprocess.Popen(redis_server_command(port, folder), stdout=subprocess.DEVNULL), port


@contextmanager
def fresh_redis(cpu: int | None = None) -> Iterator[str]:
    """The URL of a redis-server started for the block (pinned to ``cpu``, if given), stopped
    by its PID after it."""
    redis, port = redis_server(tempfile.mkdtemp(prefix="pcp-child-"))
    if cpu is not None:
        os.sched_setaffinity(redis.pid, {cpu})
    try:
        time.sleep(0.3)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop(redis)


def child_env(tree: Path) -> dict[str, str]:
    """The environment of a benchmark's child process that runs ``tree``'s service."""
    return {**os.environ, "PYTHONPATH": str(tree)}


def child_on_fresh_redis(
    script: str, tree: Path, args: list[str], redis_cpu: int | None = None
) -> Any:
    """``script --child URL *args`` run in ``tree`` (its service on the path) against a fresh
    redis-server (pinned to ``redis_cpu``, if given): the JSON of its output's last line."""
    with fresh_redis(redis_cpu) as url:
        out = subprocess.run(
            [sys.executable, script, "--child", url, *args],
            cwd=tree,
            env=child_env(tree),
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def serve(
    tree: Path, redis_port: int, port: int, workers: int, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``perceptron serve`` of ``tree`` started on loopback ``port`` (auth off, no default
    model, its output dropped), on the Redis at ``redis_port``, with ``env`` on top; it
    answers once its /readyz does. Stop it with ``stop``."""
    service = subprocess.Popen(
        [sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)]
        + ["--workers", str(workers)],
        cwd=tree,
        env={
            **os.environ,
            "PYTHONPATH": str(tree),
            "PERCEPTRON_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "PERCEPTRON_AUTH": "false",
            "PERCEPTRON_DEFAULT_MODEL": "false",
            **env,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return service


def stop(*procs: subprocess.Popen[bytes]) -> None:
    """Stop the processes started here, by their PIDs (one stopped with SIGSTOP too)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


@contextmanager
def designs(baseline: str | None) -> Iterator[dict[str, tuple[Path, dict[str, str]]]]:
    """Where and how each design runs, by its name: this tree with one writer per model and
    with each worker committing its own, and with ``baseline`` a checkout of that revision with
    one writer (a git worktree made here, removed at the end)."""
    trees: dict[str, tuple[Path, dict[str, str]]] = {
        "one writer": (ROOT, {"PERCEPTRON_ONE_WRITER": "true"}),
        "each commits": (ROOT, {"PERCEPTRON_ONE_WRITER": "false"}),
    }
    made = None
    try:
        if baseline:
            made = Path(tempfile.mkdtemp(prefix="pcp-baseline-")) / "tree"
            subprocess.run(
                ["git", "worktree", "add", "-q", "--detach", str(made), baseline],
                cwd=ROOT,
                check=True,
            )
            trees[f"one writer at {baseline}"] = (made, {"PERCEPTRON_ONE_WRITER": "true"})
        yield trees
    finally:
        if made is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(made)], cwd=ROOT)


def ready(port: int) -> bool:
    """Whether the service on ``port`` answers /readyz with 200."""
    return bool(call(port, "GET", "/readyz")[0] == 200)


def call(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"content-type": "application/json"})
    r = conn.getresponse()
    out = r.status, r.read()
    conn.close()
    return out


def bodies(seed: int, n: int = 8) -> list[bytes]:
    """Packed batches of a linearly separable problem with some noise (updates throughout)."""
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(0).normal(size=DIM)
    out = []
    for _ in range(n):
        x = rng.normal(size=(BATCH, DIM))
        y = np.where(x @ truth + rng.normal(scale=2.0, size=BATCH) > 0, 1, -1)
        packed = base64.b64encode(x.astype("<f8").tobytes()).decode()
        out.append(
            json.dumps({"model": "w", "packed_features": packed, "labels": y.tolist()}).encode()
        )
    return out


def writer(port: int, seed: int, start: float, until: float, out: Any) -> None:
    batches = bodies(seed)  # made before the clock starts: every client starts at ``start``
    time.sleep(max(0.0, start - time.time()))
    out.put(send(port, batches, until))


def send(port: int, batches: list[bytes], until: float) -> tuple[int, int, dict[int, int]]:
    """POST the batches to /learn/batch in turn, back to back on one keep-alive connection,
    until ``until``: (answers 200, updates they acknowledged, other statuses by count)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"content-type": "application/json"}
    sent = ok = updates = 0
    statuses: dict[int, int] = {}
    while time.time() < until:
        conn.request("POST", "/learn/batch", body=batches[sent % len(batches)], headers=headers)
        r = conn.getresponse()
        data = r.read()
        sent += 1
        if r.status == 200:
            ok += 1
            updates += sum(json.loads(data)["updated"])
        else:
            statuses[r.status] = statuses.get(r.status, 0) + 1
    conn.close()
    return ok, updates, statuses


class Run:
    def __init__(
        self, tree: Path, env: dict[str, str], workers: int, clients: int, seconds: float
    ) -> None:
        self.tree, self.extra, self.workers = tree, env, workers
        self.clients, self.seconds = clients, seconds

    def __call__(self) -> dict[str, Any]:
        port = free_port()
        redis_proc, rport = redis_server(tempfile.mkdtemp(prefix="pcp-writers-"))
        redis = psutil.Process(redis_proc.pid)
        service = serve(self.tree, rport, port, self.workers, self.extra)
        try:
            wait_until(partial(ready, port), 30, "service")
            assert call(port, "PUT", "/models/w", {"n_features": DIM})[0] == 201
            warm = bodies(99, 2)
            for _ in range(2 * self.workers):  # every worker loads the model
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request(
                    "POST",
                    "/learn/batch",
                    body=warm[0],
                    headers={"content-type": "application/json"},
                )
                conn.getresponse().read()
                conn.close()
            before = json.loads(call(port, "GET", "/models/w")[1])
            queue: Any = mp.Queue()
            start = time.time() + 2.0
            until = start + self.seconds
            procs = [
                mp.Process(target=writer, args=(port, 1 + i, start, until, queue))
                for i in range(self.clients)
            ]
            for p in procs:
                p.start()
            time.sleep(max(0.0, start - time.time()))
            cpu0, redis0 = tree_cpu(service.pid), process_cpu(redis)
            results = [queue.get(timeout=self.seconds + 120) for _ in procs]
            elapsed = time.time() - start
            cpu1, redis1 = tree_cpu(service.pid), process_cpu(redis)
            for p in procs:
                p.join(30)
            after = json.loads(call(port, "GET", "/models/w")[1])
        finally:
            stop(service, redis_proc)
        statuses: dict[int, int] = {}
        for _, _, s in results:
            for k, v in s.items():
                statuses[k] = statuses.get(k, 0) + v
        learned = after["counters"]["learned"] - before["counters"]["learned"]
        acknowledged = sum(u for _, u, _ in results)
        return {
            "examples_per_s": learned / elapsed,
            # CPU (user + sys) per learned example while the clients sent: the service's
            # processes (its workers), and Redis
            "worker_us": 1e6 * tree_delta(cpu0, cpu1) / learned,
            "redis_us": 1e6 * (redis1 - redis0) / learned,
            "ok": sum(o for o, _, _ in results),
            "failed": statuses,
            "exact": after["version"] - before["version"] == acknowledged,
        }


def ceiling() -> float:
    """The learner loop alone: examples/s of run_sequence on packed 1000 x 100 batches, the
    best of 30 (one core, no HTTP, no Redis): what one model's writer can at most learn."""
    sys.path.insert(0, str(ROOT))
    from service.engine.sequence import run_sequence
    from service.learner import ModelConfig, Weights
    from service.learner.features import encode_matrix

    cfg = ModelConfig(n_features=DIM)
    body = json.loads(bodies(5, 1)[0])
    x = np.frombuffer(base64.b64decode(body["packed_features"]), dtype="<f8")
    xs, ts = encode_matrix(cfg, x), [1 if y == 1 else 0 for y in body["labels"]]
    best = float("inf")
    for _ in range(30):
        start = time.perf_counter()
        run_sequence(cfg, "e" * 16, Weights.zeros(cfg), xs=xs, ts=ts)
        best = min(best, time.perf_counter() - start)
    return BATCH / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2,4,6")
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--baseline", default=None, help="a git revision to compare with")
    args = ap.parse_args()
    say(f"the learner loop alone (run_sequence, d={DIM}): {ceiling():,.0f} examples/s")
    table: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with designs(args.baseline) as trees:
        for w in [int(v) for v in args.workers.split(",")]:
            for _ in range(args.repeat):
                for name, (tree, env) in trees.items():
                    r = Run(tree, env, w, args.clients, args.seconds)()
                    table.setdefault((name, w), []).append(r)
                    say(
                        f"W={w} {name}: {r['examples_per_s']:,.0f} examples/s, "
                        f"CPU per example {r['worker_us']:.2f} us workers, "
                        f"{r['redis_us']:.2f} us Redis, "
                        f"{r['ok']} ok, failed {r['failed']}, exact {r['exact']}",
                        flush=True,
                    )
    say(
        f"\n{args.clients} writer processes, packed {BATCH} x {DIM} batches, one model, "
        f"{args.seconds:g} s runs, median of {args.repeat}"
    )
    head = "| W | " + " | ".join(
        f"{n} examples/s | {n} worker CPU per example | {n} non-200" for n in trees
    )
    say(head + (" | ratio |" if len(trees) > 1 else " |"))
    say("|" + "---|" * (1 + 3 * len(trees) + (len(trees) > 1)))
    for w in sorted({w for _, w in table}):
        cells, meds = [], []
        for n in trees:
            runs = table[n, w]
            med = statistics.median(r["examples_per_s"] for r in runs)
            meds.append(med)
            failed = sum(sum(r["failed"].values()) for r in runs)
            total = failed + sum(r["ok"] for r in runs)
            cpu = statistics.median(r["worker_us"] for r in runs)
            cells += [f"{med:,.0f}", f"{cpu:.2f} µs", f"{failed} of {total}"]
        ratio = f" {meds[0] / meds[1]:.2f} |" if len(meds) > 1 else ""
        say(f"| {w} | " + " | ".join(cells) + " |" + ratio)


if __name__ == "__main__":
    main()
