"""A model's writer under live hand-overs: its CPU per example as the workers handing over grow.

    .venv/bin/python deploy/bench/writer_live.py                    # about 2 minutes
    .venv/bin/python deploy/bench/writer_live.py --baseline REV     # and a checkout of REV

With many workers, one model's learning of one example a request is bound by its writer's
process (figure 16 of docs/performance.md), and that bound is measured on many cores. This
shows it on two: the writer alone on the first CPU, while everything that feeds it shares the
second, so that its CPU is its own. For each run: a fresh redis-server, one dense binary model
(d=100); one process takes the model's lease and is its writer, as a worker of ``perceptron
serve`` would be (it never gives the lease up here); another process holds K workers of the
service (each with its own hand-overs, as K worker processes would have) and --clients
requests in flight at all times, one example each, learned through the service's own
``Learning.learn``, spread evenly over the K workers. With --own N, the writer's process also
learns N requests of its own at all times, as a writer does for the HTTP requests it answers
itself (without their HTTP). After a warm-up, for --seconds: the examples learned a second,
the writer's core and its CPU (user + sys) per example, Redis's CPU per example, and per 1,000
examples the writer's commits, its takes, and the hand-overs it learned (from Redis's command
counts: a commit's check of the log's length, a take's ``LPOP``, a hand-over's
``SISMEMBER``). Before that, in each round, a writer's commits alone: its CPU per commit of
1, 10 and 100 examples committed one after another (what a commit costs whatever it holds,
and what each example adds). With fewer than two CPUs nothing is pinned and the writer's core
is shared. This tree and, with --baseline, a checkout of REV (a git worktree made here, removed
at the end) run alternated, round by round. Every process is started here, bound to 127.0.0.1, and
stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from harness.common import DIM, say
from harness.in_process import child_env, child_on_fresh_redis, on_service_loop
from harness.redis_stats import cpu_seconds
from harness.servers import fresh_redis, stop
from harness.tools import designs

MODEL = "m"
# Redis's commands that count the writer's work (run inside its scripts): a commit checks the
# log's length once, a take pops the queue once, a learned hand-over is looked for once.
COUNTED = {"commits": "llen", "takes": "lpop", "hand-overs": "sismember"}
COMMIT_SIZES = (1, 10, 100)  # examples a commit, for a writer's commits alone
PINNED = len(os.sched_getaffinity(0)) >= 2 if hasattr(os, "sched_getaffinity") else False


def pin(cpu: int) -> None:
    if PINNED:
        os.sched_setaffinity(0, {cpu})


async def the_writer(url: str, lease_ms: int) -> Any:
    """A worker of the service on CPU 0 (its garbage collected as ``perceptron serve``'s are),
    holding the lease of a new model, ``MODEL``, for ``lease_ms`` (run in the tree measured)."""
    try:  # (this tree; a baseline's before admin/)
        from service.admin.worker import Worker
    except ImportError:
        from service.engine.worker import Worker  # type: ignore[import-not-found,no-redef]
    from service.contract.store_values import Lease
    from service.engine import worker_gc
    from service.settings import Settings
    from service.store import open_store
    from service.store.keys import ModelKeys

    pin(0)
    os.environ.update(PERCEPTRON_REDIS_URL=url)
    settings = Settings()
    worker = Worker(open_store(settings), settings)
    worker_gc.settle()
    await worker.models.create_model(MODEL, {"n_features": DIM})
    await worker.replicas.get(MODEL)
    writer = worker.learning.writers
    writer.commits.lease = Lease(writer.me, lease_ms)
    await worker.store.client.set(ModelKeys(MODEL).writer, writer.me, px=lease_ms)
    return worker


def labelled(n: int, seed: int) -> tuple[list[list[float]], list[int]]:
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, DIM))
    ys = np.where(xs[:, 0] + 0.3 * xs[:, 1] > 0, 1, -1)
    return xs.tolist(), ys.tolist()


async def write(url: str, own: int) -> None:
    """The writer's process (run in the tree measured): take the lease, write the model until
    stopped; ``own`` requests of its own in flight meanwhile."""
    from service.engine import writer as writers

    writers.IDLE_S = float("inf")  # a writer of this bench keeps its lease while idle
    worker = await the_writer(url, writers.LEASE_MS)
    writer = worker.learning.writers
    writer._start(MODEL)
    xs, ys = labelled(1024, 2)

    async def own_requests(i: int) -> None:
        while True:
            i = (i + 1) % len(xs)
            await worker.learning.learn(MODEL, [xs[i]], [ys[i]], "own")

    tasks = [asyncio.create_task(own_requests(i * 97)) for i in range(own)]
    say("ready")
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # until told
    if not writer.writes(MODEL):
        say("the writer lost its lease")
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    # As a worker stops: no writer starts again (an own request cancelled as its writer
    # stopped would otherwise take the lease back), and the lease is given up.
    await worker.close()
    await worker.store.close()


async def hand_over(url: str, writer_pid: int, workers: int, clients: int, seconds: float) -> Any:
    """The workers handing over (run in the tree measured): ``clients`` requests in flight;
    returns what was measured."""
    import redis
    import redis.asyncio as aioredis

    try:  # (this tree; a baseline's before admin/)
        from service.admin.worker import Worker

    except ImportError:
        from service.engine.worker import Worker  # type: ignore[no-redef]
    from service.contract.store_protocol import Meta
    from service.settings import Settings
    from service.store import open_store
    from service.store.keys import ModelKeys

    pin(1)
    os.environ.update(PERCEPTRON_REDIS_URL=url)
    settings = Settings()
    handing = [Worker(open_store(settings), settings) for _ in range(workers)]
    for worker in handing:
        worker.learning.writers._closing = True  # never takes the lease: hands every one over
    xs, ys = labelled(4096, 7)
    done = False
    failed = 0

    async def client(i: int) -> None:
        nonlocal failed
        learning = handing[i % workers].learning
        while not done:
            i = (i + 1) % len(xs)
            try:
                await learning.learn(MODEL, [xs[i]], [ys[i]], "bench")
            except Exception:
                failed += 1

    stats = aioredis.Redis.from_url(url)
    meter = redis.Redis.from_url(url)
    writer = psutil.Process(writer_pid)
    meta = ModelKeys(MODEL).meta

    async def snapshot() -> tuple[float, float, float, int, dict[str, Any]]:
        cpu = writer.cpu_times()
        seen = int(await stats.hget(meta, Meta.SEEN) or 0)
        commands = await stats.info("commandstats")
        return time.perf_counter(), cpu.user + cpu.system, cpu_seconds(meter), seen, commands

    tasks = [asyncio.create_task(client(i)) for i in range(clients)]
    try:
        await asyncio.sleep(2.0)  # warm-up
        t0, cpu0, redis0, seen0, cmd0 = await snapshot()
        await asyncio.sleep(seconds)
        t1, cpu1, redis1, seen1, cmd1 = await snapshot()
        done = True
        await asyncio.gather(*tasks)
    finally:
        await stats.aclose()
        meter.close()
        for worker in handing:
            await worker.store.close()
    learned = seen1 - seen0

    def calls(command: str) -> int:
        key = f"cmdstat_{command}"
        return int(cmd1.get(key, {}).get("calls", 0)) - int(cmd0.get(key, {}).get("calls", 0))

    return {
        "per_s": learned / (t1 - t0),
        "writer_core": (cpu1 - cpu0) / (t1 - t0),
        "writer_us": (cpu1 - cpu0) / learned * 1e6,
        "redis_us": (redis1 - redis0) / learned * 1e6,
        **{name: calls(c) / learned * 1000 for name, c in COUNTED.items()},
        "failed": failed,
    }


async def commit_alone(url: str, sizes: list[int]) -> dict[int, float]:
    """A writer's CPU per commit of each of ``sizes`` examples, one commit after another (run
    in the tree measured)."""
    from service.learner.features import encode

    worker = await the_writer(url, 600_000)
    try:
        rep = await worker.replicas.get(MODEL)
        writer = worker.learning.writers
        xs, ys = labelled(4096, 3)
        classes = rep.config.classes
        examples = [
            (encode(rep.config, x), classes.index(y), "bench") for x, y in zip(xs, ys, strict=True)
        ]
        found = {}
        for n in sizes:
            commits = max(100, 5000 // n)
            cpu = time.process_time()
            for i in range(commits):
                at = i * n % (len(examples) - n)
                await writer.commits.queue(rep, examples[at : at + n])
            found[n] = (time.process_time() - cpu) / commits * 1e6
    finally:
        await worker.close()
        await worker.store.close()
    return found


def commits_run(tree: Path) -> dict[int, float]:
    """A writer's commits alone, in ``tree``, on a fresh redis-server."""
    found = child_on_fresh_redis(__file__, tree, ["--commits"], 1 if PINNED else None)
    return {int(n): us for n, us in found.items()}


def run(tree: Path, workers: int, clients: int, own: int, seconds: float) -> dict[str, float]:
    """One run of ``tree``: a fresh redis-server, the writer, the workers handing over."""
    env = child_env(tree)
    writer = None
    with fresh_redis(1 if PINNED else None) as url:
        me = [sys.executable, __file__, "--child", url]
        try:
            writer = subprocess.Popen(
                [*me, "--own", str(own)],
                cwd=tree,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert writer.stdin is not None and writer.stdout is not None
            if writer.stdout.readline().strip() != b"ready":
                raise RuntimeError("the writer did not start")
            out = subprocess.run(
                [*me, "--writer-pid", str(writer.pid), "--workers", str(workers)]
                + ["--clients", str(clients), "--seconds", str(seconds)],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            lost, _ = writer.communicate(b"stop\n", timeout=60)
            if lost.strip():
                raise RuntimeError(lost.decode().strip())
        finally:
            if writer is not None:
                stop(writer)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,3,11", help="workers handing over (default 1,3,11)")
    ap.add_argument("--clients", type=int, default=220, help="requests in flight (default 220)")
    ap.add_argument("--own", type=int, default=0, help="the writer's own requests in flight")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", help="also a checkout of this revision, alternated")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--writer-pid", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--commits", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child and a.commits:
        say(json.dumps(on_service_loop(commit_alone(a.child, list(COMMIT_SIZES)))))
        return
    if a.child and a.writer_pid is None:
        on_service_loop(write(a.child, a.own))
        return
    if a.child:
        measured = hand_over(a.child, a.writer_pid, int(a.workers), a.clients, a.seconds)
        say(json.dumps(on_service_loop(measured)))
        return
    ws = [int(w) for w in a.workers.split(",")]
    say(
        f"# deploy/bench/writer_live.py: {a.clients} one-example requests in flight, "
        f"{a.own} of the writer's own, d={DIM}, {a.seconds:g} s a run, "
        + ("the writer on CPU 0, the rest on CPU 1" if PINNED else "nothing pinned")
    )
    keys = ("per_s", "writer_core", "writer_us", "redis_us", *COUNTED)
    with designs(a.baseline) as trees:
        chosen = {name: tree for name, (tree, _) in trees.items() if name != "each commits"}
        got: dict[tuple[str, int], list[dict[str, float]]] = {}
        alone: dict[str, list[dict[int, float]]] = {name: [] for name in chosen}
        for r in range(a.rounds):
            for name in list(chosen) if r % 2 == 0 else list(reversed(chosen)):
                alone[name].append(commits_run(chosen[name]))
                say(
                    f"round {r + 1} {name}: a commit alone, us of the writer's CPU: "
                    + ", ".join(f"{us:,.0f} ({n} examples)" for n, us in alone[name][-1].items())
                )
            for w in ws:
                names = list(chosen) if r % 2 == 0 else list(reversed(chosen))
                for name in names:
                    res = run(chosen[name], w, a.clients, a.own, a.seconds)
                    got.setdefault((name, w), []).append(res)
                    say(
                        f"round {r + 1} K={w} {name}: {res['per_s']:,.0f} examples/s, writer "
                        f"{res['writer_core']:.2f} core, {res['writer_us']:.1f} us/example; "
                        f"per 1,000 examples {res['commits']:.0f} commits, {res['takes']:.0f} "
                        f"takes, {res['hand-overs']:.0f} hand-overs; failed {res['failed']:.0f}"
                    )
    say("\n| tree | " + " | ".join(f"µs per commit of {n}" for n in COMMIT_SIZES) + " |")
    say("|---|" + "---:|" * len(COMMIT_SIZES))
    for name, commits in alone.items():
        per = [statistics.median(c[n] for c in commits) for n in COMMIT_SIZES]
        say(f"| {name} | " + " | ".join(f"{us:,.0f}" for us in per) + " |")
    say(
        "\n| tree | K | examples/s | writer's core | writer µs/example | Redis µs/example "
        "| commits | takes | hand-overs (per 1,000 examples) |"
    )
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (name, w), runs in got.items():
        m = {k: statistics.median(r[k] for r in runs) for k in keys}
        say(
            f"| {name} | {w} | {m['per_s']:,.0f} | {m['writer_core']:.2f} | "
            f"{m['writer_us']:.1f} | {m['redis_us']:.1f} | {m['commits']:.1f} | "
            f"{m['takes']:.1f} | {m['hand-overs']:.1f} |"
        )


if __name__ == "__main__":
    main()
