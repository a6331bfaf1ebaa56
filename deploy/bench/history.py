"""What a model's history costs: Redis memory per checkpoint and per kept update, and packed
/learn/batch throughput with the history kept and without.

    .venv/bin/python deploy/bench/history.py                 # about 3 minutes

Memory: for each dimension in --dims, a fresh redis-server and ``perceptron serve`` (one
worker) on loopback, one dense binary model learning packed batches (1000 x d; fewer rows
past d=300) until it has made --updates updates; then Redis's own MEMORY USAGE of the kept
log (``past``) over its entries, and of the checkpoints' weights and records over their
count. Speed: writers.py's run (``harness.packed.PackedRun``: 6 writer processes, one model,
d=100, --workers workers), with the history kept (the defaults) and with
PERCEPTRON_HISTORY_KEEP_UPDATES=0 (none kept, no scheduled checkpoint), alternated run by run,
and their ratio. Every process is started here, bound to 127.0.0.1, and stopped by its PID.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import statistics
import tempfile
import time
from functools import partial
from typing import Any

import numpy as np
import redis
from harness.client import call
from harness.common import ROOT, say
from harness.packed import PackedRun
from harness.servers import ready, redis_server, serve, stop

from service.cli.loopback import free_port, wait_until
from service.store import ModelKeys


def memory(dim: int, updates: int) -> dict[str, float]:
    port = free_port()
    redis_proc, rport = redis_server(tempfile.mkdtemp(prefix="pcp-history-"))
    env = {"PERCEPTRON_CHECKPOINT_EVERY": "2000"}
    service = serve(ROOT, rport, port, 1, env)
    try:
        wait_until(partial(ready, port), 30, "service")
        assert call(port, "PUT", "/models/h", {"n_features": dim})[0] == 201
        rng = np.random.default_rng(0)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        version = 0
        while version < updates:
            rows = min(1000, 300_000 // dim)  # within the service's largest body
            x = rng.normal(size=(rows, dim))
            y = rng.choice([-1, 1], size=rows).tolist()  # random labels: about half update
            body = {"model": "h", "packed_features": base64.b64encode(x.tobytes()).decode()}
            conn.request(
                "POST",
                "/learn/batch",
                json.dumps({**body, "labels": y}),
                {"content-type": "application/json"},
            )
            r = conn.getresponse()
            answer = json.loads(r.read())
            assert r.status == 200, answer
            version = answer["version"]
        conn.close()
        time.sleep(1.0)  # the last compaction
        keys = ModelKeys("h")
        with redis.Redis(port=rport) as r:
            kept = int(r.llen(keys.past))
            ids = [int(i) for i in r.hkeys(keys.checkpoint_info)]
            checkpoints = len(ids)
            past_bytes = int(r.memory_usage(keys.past, samples=0) or 0)
            ck_bytes = sum(  # (each checkpoint's weights: a key of their own)
                int(r.memory_usage(keys.checkpoint_weights(i), samples=0) or 0) for i in ids
            )
            info_bytes = int(r.memory_usage(keys.checkpoint_info, samples=0) or 0)
        return {
            "dim": dim,
            "updates": version,
            "kept": kept,
            "per_update": past_bytes / max(kept, 1),
            "checkpoints": checkpoints,
            "per_checkpoint": (ck_bytes + info_bytes) / max(checkpoints, 1),
            "weights_bytes": 8 * (dim + 1),
        }
    finally:
        stop(service, redis_proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", default="10,100,1000")
    ap.add_argument("--updates", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = [memory(int(d), args.updates) for d in args.dims.split(",")]
    say("\nRedis memory (MEMORY USAGE, samples=0) of one dense binary model's history:")
    say("| d | updates | kept updates | bytes per kept update | checkpoints | bytes per checkpoint "
        "| its weights alone |")  # fmt: skip
    say("|---|---|---|---|---|---|---|")
    for m in rows:
        say(
            f"| {m['dim']} | {m['updates']:,} | {m['kept']:,} | {m['per_update']:,.0f} | "
            f"{m['checkpoints']} | {m['per_checkpoint']:,.0f} | {m['weights_bytes']:,} |"
        )
    designs = {
        "history kept": {},
        "none kept": {"PERCEPTRON_HISTORY_KEEP_UPDATES": "0"},
    }
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in designs}
    for i in range(args.repeat):
        order = list(designs) if i % 2 == 0 else list(reversed(designs))
        for name in order:
            r = PackedRun(ROOT, designs[name], args.workers, 6, args.seconds)()
            runs[name].append(r)
            say(f"{name}: {r['examples_per_s']:,.0f} examples/s, exact {r['exact']}")
    med = {n: statistics.median(r["examples_per_s"] for r in rs) for n, rs in runs.items()}
    say(
        f"\npacked /learn/batch, 1000 x 100, one model, W={args.workers}, 6 clients, "
        f"{args.seconds:g} s runs, median of {args.repeat} (alternated):"
    )
    say("| history kept | none kept | ratio |\n|---|---|---|")
    say(
        f"| {med['history kept']:,.0f} | {med['none kept']:,.0f} | "
        f"{med['history kept'] / med['none kept']:.2f} |"
    )


if __name__ == "__main__":
    main()
