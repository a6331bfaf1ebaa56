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
import statistics
from typing import Any

from harness.common import BATCH, DIM, say
from harness.packed import PackedRun, ceiling
from harness.tools import designs


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
                    r = PackedRun(tree, env, w, args.clients, args.seconds)()
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
