"""One model's packed learning: client processes that send packed BATCH x DIM batches back to
back, one run of them against a fresh service (``PackedRun``; ``challenged_run``, a model with
challengers and settings of its own), and the ceiling, the learner loop alone."""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import multiprocessing as mp
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from harness.client import call, send
from harness.common import BATCH, DIM, ROOT
from harness.cpu import process_cpu, tree_cpu, tree_delta
from harness.data import packed_bodies
from harness.servers import ready, redis_server, serve, stop
from service.cli.loopback import free_port, wait_until


def round_options(ap: argparse.ArgumentParser) -> None:
    """The options of a command that alternates packed-learning runs: its rounds, each run's
    seconds, and its client processes."""
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--clients", type=int, default=4, help="packed learning processes")


def packed_client(
    port: int, seed: int, start: float, until: float, out: Any, model: str = "w"
) -> None:
    """A client process: from ``start`` to ``until``, ``packed_bodies(seed)`` sent to ``model``
    (``send``); what it got is put on ``out``."""
    batches = packed_bodies(seed, model=model)  # made before the clock starts
    time.sleep(max(0.0, start - time.time()))
    out.put(send(port, batches, until))


class PackedRun:
    """One run: a fresh redis-server and ``perceptron serve --workers W`` of ``tree`` (with
    ``env``), model ``w`` (d=DIM) warmed on every worker, then ``clients`` processes sending
    packed batches for ``seconds``; calling it gives examples/s, CPU per example, answers and
    whether the model's version equals the updates acknowledged."""

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
            warm = packed_bodies(99, 2)
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
                mp.Process(target=packed_client, args=(port, 1 + i, start, until, queue))
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
    """The learner loop alone: examples/s of run_sequence on packed BATCH x DIM batches, the
    best of 30 (one core, no HTTP, no Redis): what one model's writer can at most learn."""
    sys.path.insert(0, str(ROOT))
    from service.engine.sequence import run_sequence
    from service.learner import ModelConfig, Weights
    from service.learner.features import encode_matrix

    cfg = ModelConfig(n_features=DIM)
    body = json.loads(packed_bodies(5, 1)[0])
    x = np.frombuffer(base64.b64decode(body["packed_features"]), dtype="<f8")
    xs, ts = encode_matrix(cfg, x), [1 if y == 1 else 0 for y in body["labels"]]
    best = float("inf")
    for _ in range(30):
        start = time.perf_counter()
        run_sequence(cfg, "e" * 16, Weights.zeros(cfg), xs=xs, ts=ts)
        best = min(best, time.perf_counter() - start)
    return BATCH / best


def challenged_run(
    tree: Path,
    n: int,
    tmp: Path,
    seconds: float,
    clients: int,
    *,
    challenger: dict[str, Any],
    model: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One run of ``tree`` on a fresh Redis (its files in ``tmp``) and ``perceptron serve
    --workers 2``: model ``p`` (d=DIM, ``model`` on top) with ``n`` challengers of settings
    ``challenger``, packed learning by ``clients`` processes for ``seconds`` after one not
    counted. Examples learned per second, whether every challenger was given every label, the
    answers not 200, and the drift detectors' events listed."""
    port = free_port()
    redis_proc, rport = redis_server(tmp)
    service = serve(tree, rport, port, 2, {})
    try:
        wait_until(partial(ready, port), 60, "service")
        assert call(port, "PUT", "/models/p", {"n_features": DIM, **(model or {})})[0] == 201
        for i in range(n):
            assert call(port, "PUT", f"/models/p/challengers/c{i}", challenger)[0] == 201
        queue: Any = mp.Queue()
        warm = time.time() + 1.0
        start, until = warm + 1.0, warm + 1.0 + seconds
        procs = [
            mp.Process(target=packed_client, args=(port, 1 + i, warm, until, queue, "p"))
            for i in range(clients)
        ]
        for p in procs:
            p.start()
        time.sleep(max(0.0, start - time.time()))
        before = json.loads(call(port, "GET", "/models/p")[1])["counters"]["learned"]
        results = [queue.get(timeout=seconds + 120) for _ in procs]
        learned = json.loads(call(port, "GET", "/models/p")[1])["counters"]["learned"] - before
        elapsed = max(time.time(), until) - start
        for p in procs:
            p.join(30)
        standing = json.loads(call(port, "GET", "/models/p/challengers")[1])
        exact = all(c["seen"] == standing["labels"] for c in standing["challengers"])
        events = len(json.loads(call(port, "GET", "/models/p/drift")[1])["events"])
    finally:
        stop(service, redis_proc)
    bad = sum(sum(s.values()) for _, _, s in results)
    return {"packed": learned / elapsed, "exact": exact, "bad": bad, "drift_events": events}
