"""What challengers cost: a model with 0, 1 and 4 challengers, its /predict, /feedback and
packed learning per second.

    .venv/bin/python deploy/bench/challengers.py              # about 4 minutes
    .venv/bin/python deploy/bench/challengers.py --repeat 5 --seconds 5

Each run: a fresh redis-server and ``perceptron serve --workers 2`` on loopback, two dense
binary models (d=100), each given N challengers (of ``LEARNERS``, in turn: averaged
perceptron, PA-I, PA-II, perceptron at learning rate 0.5), then, one after the other:
/predict with wrk (-c16, one example a request, the bodies cycled); /feedback with wrk (-c16),
each for a fresh prediction made before, its label against the prediction, so every one is an
update; and packed learning, --clients processes each sending packed 1000 x 100 batches to
the second model back to back. Reported per N, medians over the rounds (N alternated round by
round, 0 1 4 then 4 1 0): the answers per second of each, their ratio to N = 0, and whether
every challenger was given every label once (its ``seen`` against the model's labels).
Every process is started here, bound to 127.0.0.1, and stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from harness.client import call
from harness.common import DIM, ROOT, say
from harness.data import feedback_bodies, predict_bodies
from harness.load import start_wrk, wrk_summary
from harness.packed import packed_client, round_options
from harness.servers import ready, redis_server, serve, stop
from harness.tools import ensure_debian_tool

from service.cli.loopback import free_port, wait_until

COUNTS = (0, 1, 4)
LEARNERS: list[dict[str, Any]] = [
    {"averaged": True},
    {"algorithm": "pa1", "C": 0.1},
    {"algorithm": "pa2", "C": 1.0},
    {"learning_rate": 0.5},
]


def run(n: int, tmp: Path, seconds: float, clients: int) -> dict[str, Any]:
    port = free_port()
    redis_proc, rport = redis_server(tmp)
    service = serve(ROOT, rport, port, 2, {"PERCEPTRON_MAX_PENDING_BYTES": "0"})
    try:
        wait_until(partial(ready, port), 30, "service")
        for model in ("m", "p"):
            assert call(port, "PUT", f"/models/{model}", {"n_features": DIM})[0] == 201
            for i in range(n):
                path = f"/models/{model}/challengers/c{i}"
                assert call(port, "PUT", path, LEARNERS[i % len(LEARNERS)])[0] == 201
        fb = feedback_bodies(port, tmp / "feedback_0", 1.0)
        got: dict[str, Any] = {}
        w = start_wrk(port, "/predict", predict_bodies(tmp / "predict"), "cycle", 16, seconds, 0)
        got["predict"] = wrk_summary(w)
        w = start_wrk(port, "/feedback", fb.with_name("feedback_%d"), "once", 16, seconds, 0)
        got["feedback"] = wrk_summary(w)
        before = json.loads(call(port, "GET", "/models/p")[1])["counters"]["learned"]
        queue: Any = mp.Queue()
        start = time.time() + 2.0
        procs = [
            mp.Process(target=packed_client, args=(port, 1 + i, start, start + seconds, queue, "p"))
            for i in range(clients)
        ]
        for p in procs:
            p.start()
        results = [queue.get(timeout=seconds + 120) for _ in procs]
        elapsed = time.time() - start
        for p in procs:
            p.join(30)
        learned = json.loads(call(port, "GET", "/models/p")[1])["counters"]["learned"] - before
        exact = True
        for model in ("m", "p"):
            standing = json.loads(call(port, "GET", f"/models/{model}/challengers")[1])
            exact &= all(c["seen"] == standing["labels"] for c in standing["challengers"])
    finally:
        stop(service, redis_proc)
    out: dict[str, Any] = {"exact": exact, "bad": sum(sum(s.values()) for _, _, s in results)}
    for kind, s in got.items():
        out[kind] = (s["requests"] - sum(s["statuses"].values()) - s["timeouts"]) / (
            s["duration_us"] / 1e6
        )
        out["bad"] += sum(s["statuses"].values()) + s["timeouts"]
    out["packed"] = learned / elapsed
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    round_options(ap)
    args = ap.parse_args()
    ensure_debian_tool("wrk", "wrk")
    table: dict[int, list[dict[str, Any]]] = {n: [] for n in COUNTS}
    for r in range(args.repeat):
        for n in COUNTS if r % 2 == 0 else tuple(reversed(COUNTS)):
            with tempfile.TemporaryDirectory(prefix="pcp-challengers-") as folder:
                got = run(n, Path(folder), args.seconds, args.clients)
            table[n].append(got)
            say(
                f"{n} challengers: /predict {got['predict']:,.0f}/s, /feedback "
                f"{got['feedback']:,.0f}/s, packed {got['packed']:,.0f} examples/s; "
                f"non-200 {got['bad']}; every label to every challenger: {got['exact']}"
            )

    def med(n: int, kind: str) -> float:
        return float(statistics.median(r[kind] for r in table[n]))

    say(
        f"\nOne model with N challengers, 2 workers; /predict and /feedback wrk -c16, packed "
        f"{args.clients} clients x 1000 x {DIM}; {args.seconds:g} s each, median of {args.repeat}"
    )
    say(
        "| challengers | /predict per s | /feedback per s | packed examples per s "
        "| non-200 | exact |"
    )
    say("|---:|---:|---:|---:|---:|---|")
    for n in COUNTS:
        ratios = (
            f"{med(n, k):,.0f}" + ("" if n == 0 else f" ({med(n, k) / med(0, k):.2f})")
            for k in ("predict", "feedback", "packed")
        )
        bad = sum(r["bad"] for r in table[n])
        say(f"| {n} | {' | '.join(ratios)} | {bad} | {all(r['exact'] for r in table[n])} |")


if __name__ == "__main__":
    main()
