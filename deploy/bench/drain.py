"""A model's writer at full speed: how fast it learns the requests handed over to it, and its
CPU per request.

    .venv/bin/python deploy/bench/drain.py                     # about 1 minute
    .venv/bin/python deploy/bench/drain.py --baseline REV      # and a checkout of REV

With several workers, each /learn to a model that its worker does not write is a request
handed over to the model's writer (service/engine/writer.py); with many workers and one example a
request, the writer's process is where one model's learning stops growing (figure 14 of
docs/performance.md). This measures that bound alone. For each run: a fresh redis-server,
one dense binary model (d=100), --requests requests of --examples examples each handed over
and queued for it while a lease that no worker holds keeps them waiting, then one process
takes the lease and learns them all, as the model's writer. Reported: requests learned per
second from then until the last is answered, the writer process's CPU (user + sys) per
request, and Redis's. The process collects its garbage as a worker of ``perceptron serve``
does (service/engine/worker_gc.py), and runs on the same event loop (uvloop). This tree and, with
--baseline, a checkout of REV (a git worktree made here, removed at the end) run alternated,
round by round. Every process is started here, bound to 127.0.0.1, and stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness.common import DIM, say
from harness.in_process import child_on_fresh_redis, on_service_loop
from harness.redis_stats import cpu_seconds
from harness.tools import designs

HELD = "nobody"  # the lease's holder while the requests are queued, then the writer's id


async def drain(url: str, requests: int, examples: int) -> dict[str, float]:
    """Queue the requests, then learn them as the model's writer (run in the tree measured)."""
    import redis
    import redis.asyncio as aioredis

    try:  # (this tree; a baseline's before admin/)
        from service.admin.worker import Worker

    except ImportError:
        from service.engine.worker import Worker  # type: ignore[import-not-found,no-redef]
    from service.contract.learn_wire import NOT_QUEUED_ANSWER, new_token, pack_request
    from service.contract.store_protocol import Meta
    from service.contract.store_values import Lease

    try:  # (a tree from before a request's examples were columns sends them as tuples)
        from service.contract.learn_wire import Labelled

        def as_sent(batch: list[Any]) -> Any:
            xs, ts, srcs = zip(*batch, strict=True)
            return Labelled(list(xs), list(ts), list(srcs))
    except ImportError:

        def as_sent(batch: list[Any]) -> Any:
            return batch

    from service.engine import worker_gc
    from service.engine import writer as writers
    from service.learner.features import encode
    from service.settings import Settings
    from service.store import open_store
    from service.store.keys import ModelKeys

    os.environ.update(PERCEPTRON_REDIS_URL=url, PERCEPTRON_LEARN_WAIT_S="600")
    settings = Settings()
    worker = Worker(open_store(settings), settings)
    worker_gc.settle()  # as a worker of perceptron serve does once its app is built
    stats = aioredis.Redis.from_url(url)
    cpu_meter = redis.Redis.from_url(url)  # (a plain client, as the harness reads CPU with)
    try:
        await worker.models.create_model("m", {"n_features": DIM})
        rep = await worker.replicas.get("m")
        keys = ModelKeys("m")
        await stats.set(keys.writer, HELD, px=600_000)  # requests wait for this holder
        rng = np.random.default_rng(7)
        xs = rng.normal(size=(requests * examples, DIM))
        ys = np.where(xs[:, 0] + 0.3 * xs[:, 1] > 0, 1, 0).tolist()
        deadline_ms = int((time.time() + 600) * 1000)

        async def hand_over(i: int) -> None:
            rows = range(i * examples, (i + 1) * examples)
            batch = [(encode(rep.config, xs[r].tolist()), ys[r], "bench") for r in rows]
            token = new_token()
            request = pack_request(token, deadline_ms, rep.epoch, as_sent(batch))
            await worker.store.hand_off(
                "m",
                me="requester",
                lease_ms=400,
                token=token,
                request=request,
                wait_ms=600_000,
                not_queued=NOT_QUEUED_ANSWER,
            )

        for start in range(0, requests, 20):  # (20 connections at a time)
            await asyncio.gather(*(hand_over(i) for i in range(start, min(requests, start + 20))))

        queued = await stats.llen(keys.learns)
        # This worker becomes the lease's holder, then the writer: it takes them all.
        writer = worker.learning.writers
        writer.me = HELD
        writer.commits.lease = Lease(HELD, writers.LEASE_MS)
        redis_before = cpu_seconds(cpu_meter)
        cpu, wall = time.process_time(), time.perf_counter()
        writer._start("m")
        while await stats.llen(keys.learns) or await stats.hlen(keys.reqs):
            await asyncio.sleep(0.002)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        redis_s = cpu_seconds(cpu_meter) - redis_before
        learned = int(await stats.hget(keys.meta, Meta.SEEN) or 0)
    finally:
        await worker.close()
        await worker.store.close()
        await stats.aclose()
        cpu_meter.close()
    return {
        "queued": queued,
        "learned": learned,
        "per_s": requests / wall,
        "cpu_us": cpu / requests * 1e6,
        "redis_us": redis_s / requests * 1e6,
    }


def run(tree: Path, requests: int, examples: int) -> dict[str, float]:
    """One drain of ``tree``'s writer on a fresh redis-server."""
    args = ["--requests", str(requests), "--examples", str(examples)]
    result: dict[str, float] = child_on_fresh_redis(__file__, tree, args)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--examples", type=int, default=1, help="examples a request (default 1)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--baseline", help="also a checkout of this revision, alternated")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        say(json.dumps(on_service_loop(drain(a.child, a.requests, a.examples))))
        return
    say(f"# deploy/bench/drain.py: {a.requests:,} requests of {a.examples} example(s), d={DIM}")
    with designs(a.baseline) as trees:
        chosen = {name: tree for name, (tree, env) in trees.items() if name != "each commits"}
        got: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
        for r in range(a.rounds):
            names = list(chosen) if r % 2 == 0 else list(reversed(chosen))
            for name in names:
                res = run(chosen[name], a.requests, a.examples)
                got[name].append(res)
                say(
                    f"round {r + 1} {name}: {res['per_s']:,.0f} requests/s, writer "
                    f"{res['cpu_us']:.1f} us/request, Redis {res['redis_us']:.1f} us/request "
                    f"(queued {res['queued']:,}, learned {res['learned']:,} examples)"
                )
    say("\n| tree | requests/s (median) | writer CPU us/request | Redis CPU us/request |")
    say("|---|---:|---:|---:|")
    for name, runs in got.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("per_s", "cpu_us", "redis_us")}
        say(f"| {name} | {med['per_s']:,.0f} | {med['cpu_us']:.1f} | {med['redis_us']:.1f} |")


if __name__ == "__main__":
    main()
