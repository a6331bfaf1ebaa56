"""The learners' kernel: one model's packed learning with no challenger and with one PA-I
challenger, against a baseline tree in the same run; and each learner's cost per example.

    .venv/bin/python deploy/bench/learners.py                      # about 4 minutes
    .venv/bin/python deploy/bench/learners.py --baseline 26cbe75 --repeat 3 --seconds 5

Each run: a fresh redis-server and ``perceptron serve --workers 2`` of one tree on loopback,
every setting at its default; a dense binary perceptron (d=100) given N challengers (0, or one
PA-I with C = 0.1); --clients processes each sending packed 1000 x 100 batches back to back,
one second not counted (each worker's first batches load the kernel), then --seconds counted.
The trees and counts alternate round by round (this tree first, then the baseline; reversed
the next round). Reported: examples learned per second, medians; each against the baseline's
at the same count and against the same tree without a challenger; and whether the challenger
was given every label once. Then, in this process, microseconds per example at d=100 of each
learner (binary, 20,000 examples, best of 5): through its update plans (what every learner ran
before the kernel: a batch's own loop for the perceptron, ``ChallengerState.learn`` for a
challenger) and through the kernel. Every process is started here, bound to 127.0.0.1, and
stopped by its PID.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from harness.common import DIM, ROOT, say
from harness.packed import challenged_run, round_options
from harness.tools import worktree

from service.engine.sequence import run_sequence
from service.learner import Example, ModelConfig, Weights
from service.learner.challenger import start_state
from service.learner.kernel import KernelRule, learn_sequence

PA1 = {"algorithm": "pa1", "C": 0.1}
COUNTS = (0, 1)


def per_example() -> list[tuple[str, float | None, float | None]]:
    """Microseconds per example at d=100, binary: through the plans, through the kernel."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, DIM))
    truth = rng.normal(size=DIM)
    ts = (X @ truth + rng.normal(size=len(X)) > 0).astype(int).tolist()
    xs = [Example(x) for x in X]
    out: list[tuple[str, float | None, float | None]] = []

    def best(f: Callable[[], object]) -> float:
        times = []
        for _ in range(5):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        return min(times) / len(xs) * 1e6

    learners: list[tuple[str, dict[str, Any]]] = [
        ("perceptron", {}),
        ("perceptron averaged", {"averaged": True}),
        ("PA-I", PA1),
        ("PA-II", {"algorithm": "pa2"}),
        ("logistic", {"algorithm": "logistic"}),
        ("AROW", {"algorithm": "arow"}),
    ]
    for name, params in learners:
        cfg = ModelConfig(n_features=DIM, **params)

        def plans(cfg: ModelConfig = cfg) -> None:
            state = start_state(cfg, None)
            for x, t in zip(xs, ts, strict=True):
                state.learn(x, t, False, 0)

        slow = best(plans)
        if name == "perceptron":  # the served perceptron's own loop (engine/sequence.py)
            served = partial(run_sequence, cfg, "0" * 16, Weights.zeros(cfg), xs=xs, ts=ts)
            slow = min(slow, best(served))
        rule = cfg.learner.kernel(cfg)
        fast = None
        if rule is not None:
            learn_sequence(
                rule, cfg.fit_bias, Weights.zeros(cfg), xs=xs[:10], ts=ts[:10]
            )  # (loaded)

            def kernel(rule: KernelRule = rule, cfg: ModelConfig = cfg) -> None:
                learn_sequence(rule, cfg.fit_bias, Weights.zeros(cfg), xs=xs, ts=ts)

            fast = best(kernel)
        out.append((name, slow, fast))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--baseline", default="26cbe75", help="a git revision to compare with")
    round_options(ap)
    args = ap.parse_args()
    table: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with worktree(args.baseline) as made:
        assert made is not None
        trees = {"this tree": ROOT, args.baseline: made}
        for r in range(args.repeat):
            order = [(t, n) for t in trees for n in COUNTS]
            for name, n in order if r % 2 == 0 else reversed(order):
                with tempfile.TemporaryDirectory(prefix="pcp-learners-") as folder:
                    got = challenged_run(
                        trees[name], n, Path(folder), args.seconds, args.clients, challenger=PA1
                    )
                table.setdefault((name, n), []).append(got)
                say(f"{name}, {n} challengers: {got['packed']:,.0f} examples/s; {got}")

    def med(name: str, n: int) -> float:
        return float(statistics.median(g["packed"] for g in table[(name, n)]))

    say(
        f"\nPacked learning, one dense binary perceptron (d={DIM}), 2 workers, {args.clients} "
        f"clients x 1000 x {DIM}, {args.seconds:g} s each, median of {args.repeat}"
    )
    say("| tree | challengers | examples per s | vs the baseline | vs no challenger | exact |")
    say("|---|---:|---:|---:|---:|---|")
    for name in trees:
        for n in COUNTS:
            rows = table[(name, n)]
            exact = all(g["exact"] and not g["bad"] for g in rows)
            vs_base = med(name, n) / med(args.baseline, n)
            say(
                f"| {name} | {n} | {med(name, n):,.0f} | {vs_base:.2f} | "
                f"{med(name, n) / med(name, 0):.2f} | {exact} |"
            )
    say(f"\nMicroseconds per example at d={DIM}, binary, best of 5 over 20,000 examples")
    say("| learner | update plans | kernel |")
    say("|---|---:|---:|")
    for name, slow, fast in per_example():
        say(f"| {name} | {slow:.2f} | {'-' if fast is None else f'{fast:.2f}'} |")


if __name__ == "__main__":
    main()
