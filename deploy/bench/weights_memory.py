"""What concurrent GET /models/{name}/weights of a large model cost a worker in memory.

Starts redis-server and ``perceptron serve --workers 1`` on 127.0.0.1 from ``--tree``, makes a
dense ``ovr`` model of ``--classes`` x ``--features`` weights (non-zero: learned from one
example per class), sends ``--clients`` GET /weights at once, and prints the worker's resident
memory before and at its peak (sampled every 10 ms), the seconds until every answer arrived,
and whether every answer equals the first. Run it on two checkouts to compare:

    .venv/bin/python deploy/bench/weights_memory.py --tree /path/to/other/checkout
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import httpx
import psutil
from harness.common import ROOT


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--features", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout to measure")
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    # (imported here, once --tree's checkout is on the path: the service's code is that tree's)
    from harness.servers import ready, redis_server, serve, stop

    from service.cli.loopback import free_port, wait_until

    redis_proc, redis_port = redis_server(tempfile.mkdtemp(prefix="pcp-weights-"))
    port = free_port()
    service = serve(args.tree.resolve(), redis_port, port, 1, {})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(partial(ready, port), 60, "service")
        serve_proc = psutil.Process(service.pid)
        worker = (serve_proc.children() or [serve_proc])[-1]  # (one worker: serve itself)
        with httpx.Client(base_url=url, timeout=600) as c:
            spec = {"n_features": args.features, "classes": list(range(args.classes))}
            assert c.put("/models/big", json=spec).status_code == 201
            for k in range(args.classes):  # every row learns: weights that are not all zeros
                x = [((i * 7 + k) % 13) / 13 for i in range(args.features)]
                assert c.post("/learn", json={"model": "big", "features": x, "label": k}).is_success
            assert c.get("/models/big/weights").is_success  # the worker's copy is current
            before = worker.memory_info().rss
            peak, done = before, threading.Event()

            def sample() -> None:
                nonlocal peak
                while not done.is_set():
                    peak = max(peak, worker.memory_info().rss)
                    time.sleep(0.01)

            sampler = threading.Thread(target=sample)
            sampler.start()
            started = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                bodies = list(
                    pool.map(lambda _: c.get("/models/big/weights").content, range(args.clients))
                )
            took = time.perf_counter() - started
            done.set()
            sampler.join()
        mib = 1 << 20
        sys.stdout.write(
            f"{args.clients} x GET /weights of {args.classes} x {args.features}: worker RSS "
            f"{before / mib:.0f} MiB before, {peak / mib:.0f} MiB at peak "
            f"(+{(peak - before) / mib:.0f}); {took:.1f} s; body {len(bodies[0]) / mib:.0f} MiB; "
            f"answers equal: {all(b == bodies[0] for b in bodies)}\n"
        )
    finally:
        stop(service, redis_proc)


if __name__ == "__main__":
    main()
