"""How long the largest batches the limits allow stall the other clients of one worker.

    .venv/bin/python deploy/bench/stall.py                 # every scenario, ~3 min
    .venv/bin/python deploy/bench/stall.py --phases        # where one batch's time goes, ~1 min
    .venv/bin/python deploy/bench/stall.py --max-body 33554432 --max-batch 10000  # the old ones

Scenarios: /learn/batch and /predict/batch with the largest body the limits allow (by
default 4 MiB and 1000 examples), as JSON floats for a dense model, JSON 0/1 for a dense
model of --dense features, JSON named features (300 per example) and packed_features.

Default mode: starts redis-server and ``perceptron serve --workers 1`` on 127.0.0.1 (with
--max-body and --max-batch as its limits), then for each scenario a second process sends
small /predict requests in a loop on one keep-alive connection while this one sends the
scenario's body --repeat times. Prints, per scenario, each big request's time and, for each,
the longest small request that overlapped it (the stall the other clients saw).

--phases: the same bodies through the service's own steps in this process (a real
redis-server, no HTTP): nesting check, orjson, pydantic validation, learning's encoding,
its predict or learn (encoding included, with its Redis commit) and the response;
best of three, in ms.

--tree DIR measures another checkout's ``service/`` (e.g. one exported with ``git archive``).
Every process it starts is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import redis
from harness.common import ROOT, say

MAX_BODY = 4 * 1024 * 1024  # the service's defaults; --max-body and --max-batch change both
MAX_BATCH = 1000
NAMED_PER_EXAMPLE = 300


def floats_per_example() -> int:
    return MAX_BODY // MAX_BATCH // 20  # about 20 bytes per JSON float: 209 by default


def fill(make_example: Callable[[], Any]) -> list[Any]:
    """As many examples as fit in the body limit (with a label each), up to the batch limit."""
    examples: list[Any] = []
    size = 200
    while len(examples) < MAX_BATCH:
        example = make_example()
        size += len(orjson.dumps(example)) + 4
        if size > MAX_BODY:
            break
        examples.append(example)
    return examples


def request_body(model: str, n: int, with_labels: bool, **examples: Any) -> bytes:
    doc: dict[str, Any] = {"model": model, **examples}
    if with_labels:
        doc["labels"] = [1] * n
    return orjson.dumps(doc)


def scenarios(dense: int) -> dict[str, tuple[str, bytes]]:
    """name: (route, body)."""
    rng = random.Random(0)
    nd = floats_per_example()
    floats = [[rng.random() for _ in range(nd)] for _ in range(MAX_BATCH)]
    bits = fill(lambda: [rng.randrange(2) for _ in range(dense)])
    named = fill(lambda: {f"f{rng.randrange(10**6)}": 1 for _ in range(NAMED_PER_EXAMPLE)})
    n_packed = min(MAX_BATCH, (MAX_BODY * 3 // 4 - 1000) // 8 // dense)
    packed = base64.b64encode(np.random.default_rng(0).random(n_packed * dense).tobytes())
    bodies: dict[str, tuple[str, bytes]] = {}
    for route in ("/learn/batch", "/predict/batch"):
        with_labels = route == "/learn/batch"
        bodies[f"{route} dense {len(floats)}x{nd} floats"] = (
            route,
            request_body("floats", len(floats), with_labels, features=floats),
        )
        bodies[f"{route} dense {len(bits)}x{dense} 0/1"] = (
            route,
            request_body("dense", len(bits), with_labels, features=bits),
        )
        bodies[f"{route} named {len(named)}x{NAMED_PER_EXAMPLE}"] = (
            route,
            request_body("named", len(named), with_labels, features=named),
        )
        bodies[f"{route} packed {n_packed}x{dense}"] = (
            route,
            request_body("dense", n_packed, with_labels, packed_features=packed.decode()),
        )
    return bodies


MODELS = {"small": {"n_features": 3}, "named": {"hash_bits": 18}}


def small_client(url: str, stop: Event, results: Queue[list[tuple[float, float]]]) -> None:
    """/predict in a loop: (start, seconds) of each; NaN seconds for a failed one."""
    latencies: list[tuple[float, float]] = []
    body = orjson.dumps({"model": "small", "features": [1.0, 2.0, 3.0]})
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.is_set():
            t = time.perf_counter()
            try:
                ok = client.post("/predict", content=body, headers=headers).status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append((t, time.perf_counter() - t if ok else float("nan")))
    results.put(latencies)


def stalls(args: argparse.Namespace, bodies: dict[str, tuple[str, bytes]]) -> None:
    # (imported here, once --tree's checkout is on the path: the service's code is that tree's)
    from harness.servers import ready, redis_server, serve, stop

    from service.cli.loopback import free_port, wait_until

    env = {
        "PERCEPTRON_MAX_BODY_BYTES": str(MAX_BODY),
        "PERCEPTRON_MAX_BATCH": str(MAX_BATCH),
        # Repeated predict batches would fill a model's pending predictions: no limit here.
        "PERCEPTRON_MAX_PENDING_BYTES": "0",
    }
    redis_proc, redis_port = redis_server(tempfile.mkdtemp(prefix="pcp-stall-"))
    port = free_port()
    service = serve(args.tree.resolve(), redis_port, port, 1, env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(partial(ready, port), 60, "service")
        with httpx.Client(base_url=url, timeout=300) as c:
            models = {
                **MODELS,
                "floats": {"n_features": floats_per_example()},
                "dense": {"n_features": args.dense},
            }
            for name, spec in models.items():
                assert c.put(f"/models/{name}", json=spec).status_code == 201
            say(
                "| scenario | body MiB | status | big request s, each | small p50 ms before "
                "| longest small request ms, during each big one |"
            )
            say("|---|---|---|---|---|---|")
            for name, (route, body) in bodies.items():
                done = mp.Event()
                results: Queue[list[tuple[float, float]]] = mp.Queue()
                client = mp.Process(target=small_client, args=(url, done, results))
                client.start()
                time.sleep(1.5)
                spans, statuses = [], set()
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    r = c.post(route, content=body, headers={"content-type": "application/json"})
                    spans.append((t0, time.perf_counter()))
                    statuses.add(r.status_code)
                    time.sleep(0.5)
                done.set()
                latencies = results.get(timeout=120)
                client.join()
                failed = sum(1 for _, s in latencies if s != s)
                latencies = [(t, s) for t, s in latencies if s == s]
                before = [s for t, s in latencies if t < spans[0][0] - 0.1]
                longest = [
                    max((s for t, s in latencies if a - 0.01 <= t + s and t <= b), default=0.0)
                    for a, b in spans
                ]
                say(
                    f"| {name} | {len(body) / 2**20:.1f} | {sorted(statuses)} | "
                    f"{', '.join(f'{b - a:.2f}' for a, b in spans)} | "
                    f"{statistics.median(before) * 1e3:.1f} | "
                    f"{', '.join(f'{s * 1e3:.0f}' for s in longest)} |"
                    + (f" ({failed} small requests failed)" if failed else "")
                )
    finally:
        stop(service, redis_proc)


def best_ms(f: Callable[[], Any], n: int = 3) -> tuple[Any, float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        value = f()
        times.append(time.perf_counter() - t)
    return value, min(times) * 1e3


async def best_ms_async(f: Callable[[], Awaitable[Any]], n: int = 3) -> tuple[Any, float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        value = await f()
        times.append(time.perf_counter() - t)
    return value, min(times) * 1e3


async def phases(bodies: dict[str, tuple[str, bytes]], dense: int) -> None:
    from pydantic import TypeAdapter

    try:  # (this tree; a baseline's before admin/)
        from service.admin.worker import Worker

    except ImportError:
        from service.engine.worker import Worker  # type: ignore[import-not-found,no-redef]
    try:  # (this tree; a baseline's before json_bodies.py)
        from service.api import json_bodies as routing
    except ImportError:
        from service.api import routing  # type: ignore[attr-defined,no-redef]
    from harness.servers import redis_server, stop

    from service.api.routes.learning_routes import predict_batch_response
    from service.api.schemas.model_schemas import (
        LearnBatchRequest,
        PredictBatchRequest,
        PredictBatchResponse,
    )
    from service.cli.loopback import wait_until
    from service.settings import Settings
    from service.store import open_store

    redis_proc, redis_port = redis_server(tempfile.mkdtemp(prefix="pcp-stall-"))
    try:
        probe = redis.Redis(port=redis_port)
        wait_until(probe.ping, what="redis-server")
        probe.close()
        settings = Settings(
            redis_url=f"redis://127.0.0.1:{redis_port}/0",
            auth=False,
            default_model=False,
            max_body_bytes=MAX_BODY,
            max_batch=MAX_BATCH,
            max_pending_bytes=0,  # repeated predict batches: no limit on pending predictions
        )
        worker = Worker(open_store(settings), settings)
        models = {**MODELS, "floats": {"n_features": floats_per_example()}}
        for name, spec in {**models, "dense": {"n_features": dense}}.items():
            await worker.models.create_model(name, spec)
        check = getattr(routing, "nesting_deeper_than", None)
        say(
            "| scenario | MiB | nesting check | orjson | validation | encoding "
            "| predict or learn, with encoding and commit | response | sum |"
        )
        say("|---|---|---|---|---|---|---|---|---|")

        async def measure(name: str, route: str, body: bytes) -> None:
            t_check = best_ms(lambda: check(body, 32))[1] if check else 0.0
            doc, t_parse = best_ms(lambda: orjson.loads(body))
            model = LearnBatchRequest if route == "/learn/batch" else PredictBatchRequest
            req, t_valid = best_ms(lambda: model.model_validate(doc))
            rep = await worker.replicas.get(req.model)
            _, t_encode = best_ms(lambda: worker.learning.encode_batch(rep.config, req.examples()))
            respond: Callable[[], bytes]
            if isinstance(req, LearnBatchRequest):
                learned, t_run = await best_ms_async(
                    lambda: worker.learning.learn(req.model, req.examples(), req.labels)
                )

                def respond() -> bytes:
                    labels, mistakes, updated, versions = zip(*learned, strict=True)
                    return orjson.dumps(
                        {
                            "labels": labels,
                            "mistakes": mistakes,
                            "updated": updated,
                            "version": versions[-1],
                            "mistake_count": sum(mistakes),
                        }
                    )
            else:
                (config, preds), t_run = await best_ms_async(
                    lambda: worker.learning.predict(req.model, req.examples())
                )

                def respond() -> bytes:
                    answer = predict_batch_response(config, preds)
                    return TypeAdapter(PredictBatchResponse).dump_json(answer)

            _, t_respond = best_ms(respond)
            total = t_check + t_parse + t_valid + t_run + t_respond
            say(
                f"| {name} | {len(body) / 2**20:.1f} | {t_check:.0f} | {t_parse:.0f} | "
                f"{t_valid:.0f} | {t_encode:.0f} | {t_run:.0f} | {t_respond:.0f} | {total:.0f} |"
            )

        for name, (route, body) in bodies.items():
            await measure(name, route, body)
        await worker.close()
        await worker.store.close()
    finally:
        stop(redis_proc)


def main() -> None:
    global MAX_BODY, MAX_BATCH
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phases", action="store_true", help="time each step, in-process")
    ap.add_argument("--repeat", type=int, default=3, help="big requests per scenario")
    ap.add_argument("--dense", type=int, default=1000, help="features of the dense model")
    ap.add_argument("--only", default="", help="scenarios whose name holds one of these (a,b)")
    ap.add_argument("--max-body", type=int, default=MAX_BODY, help="bytes, for both sides")
    ap.add_argument("--max-batch", type=int, default=MAX_BATCH, help="examples, for both sides")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout to measure")
    args = ap.parse_args()
    MAX_BODY, MAX_BATCH = args.max_body, args.max_batch
    sys.path.insert(0, str(args.tree.resolve()))
    bodies = {
        k: v for k, v in scenarios(args.dense).items() if any(o in k for o in args.only.split(","))
    }
    if args.phases:
        asyncio.run(phases(bodies, args.dense))
    else:
        stalls(args, bodies)


if __name__ == "__main__":
    main()
