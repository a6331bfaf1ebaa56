"""What a drift detector costs: one model's packed learning with and without DDM on the served
learner's mistakes (alerting, or retraining at a drift), with no challenger and with one (whose
detector is the model's, on its own mistakes); and each detector's cost per example in Python,
compiled and in the scripts' Lua.

    .venv/bin/python deploy/bench/drift.py                      # about 5 minutes
    .venv/bin/python deploy/bench/drift.py --repeat 5 --seconds 5

Each run: a fresh redis-server and ``perceptron serve --workers 2`` on loopback, every setting
at its default; a dense binary perceptron (d=100), with ``"drift": {"detector": "ddm"}``,
``{"detector": "ddm", "on_drift": "retrain"}`` or none, given 0 or 1 challenger (PA-I,
C = 0.1); --clients processes each sending packed 1000 x 100 batches back to back, one second
not counted, then --seconds counted (``harness.packed.challenged_run``).
The cases alternate round by round (reversed every other round). Reported: examples learned per
second, medians, each against the same challengers without a detector; the detectors' events
(the stream's labels are noisy, so DDM warns); and whether the challenger was given every label
once. Then microseconds per example of each detector fed 200,000 mistakes (a rate of 0.2), best
of 5: in Python (``drift_detectors.feed``, the reference), through the compiled loop
(``kernel.drift_feed``, what a challenger's replay runs) and in Redis (the scripts'
``drift.feed``, what each commit runs for the served learner). Every process is started here,
bound to 127.0.0.1, and stopped by its PID.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import redis
from harness.common import DIM, ROOT, say
from harness.packed import challenged_run, round_options
from harness.servers import redis_server, stop

from service.cli.loopback import wait_until
from service.learner import kernel
from service.learner.drift_detectors import DDM, EDDM, Detector, feed, spec_of
from service.store.ops.drift import DRIFT
from service.store.script import Script

PA1 = {"algorithm": "pa1", "C": 0.1}
# (the detector, challengers), and the model each detector names
CASES = ((None, 0), ("ddm", 0), ("ddm, retrain", 0), (None, 1), ("ddm", 1))
MODELS: dict[str | None, dict[str, Any]] = {
    None: {},
    "ddm": {"drift": {"detector": "ddm"}},
    "ddm, retrain": {"drift": {"detector": "ddm", "on_drift": "retrain"}},
}
N_MARKS = 200_000
PROBE = Script(  # (the detector's Lua as the scripts have it, fed the marks from a fresh state)
    name="drift_bench",
    keys=(),
    args=("spec", "marks"),
    parts=(DRIFT,),
    body="local state = drift.feed(SPEC, '', MARKS)\nreturn state\n",
)


def per_example() -> list[tuple[str, float, float, float]]:
    """Microseconds per example of each detector: in Python, compiled, in Redis's Lua."""
    marks = (np.random.default_rng(0).random(N_MARKS) < 0.2).astype(int).tolist()
    text = "".join(map(str, marks))
    proc, port = redis_server(tempfile.mkdtemp(prefix="pcp-drift-"))
    out = []
    try:
        client = redis.Redis(port=port)
        wait_until(client.ping, 30, "redis-server")
        detectors: tuple[Detector, ...] = (DDM(), EDDM())
        flags = np.array(marks, dtype=bool)
        for detector in detectors:
            python, loop, lua = [], [], []
            kernel.drift_feed(detector, detector.start(), flags[:10])  # (loaded)
            for _ in range(5):
                t = time.perf_counter()
                feed(detector, detector.start(), marks)
                python.append(time.perf_counter() - t)
                t = time.perf_counter()
                kernel.drift_feed(detector, detector.start(), flags)
                loop.append(time.perf_counter() - t)
                t = time.perf_counter()
                client.eval(PROBE.lua, 0, spec_of(detector), text)
                lua.append(time.perf_counter() - t)
            us = [min(v) / N_MARKS * 1e6 for v in (python, loop, lua)]
            out.append((detector.name, us[0], us[1], us[2]))
        client.close()
    finally:
        stop(proc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    round_options(ap)
    args = ap.parse_args()
    table: dict[tuple[str | None, int], list[dict[str, Any]]] = {}
    for r in range(args.repeat):
        for detector, n in CASES if r % 2 == 0 else reversed(CASES):
            model = MODELS[detector]
            with tempfile.TemporaryDirectory(prefix="pcp-drift-") as folder:
                got = challenged_run(
                    ROOT, n, Path(folder), args.seconds, args.clients, challenger=PA1, model=model
                )
            table.setdefault((detector, n), []).append(got)
            say(f"{detector or 'no detector'}, {n} challengers: {got['packed']:,.0f}/s; {got}")

    def med(detector: str | None, n: int) -> float:
        return float(statistics.median(g["packed"] for g in table[(detector, n)]))

    say(
        f"\nPacked learning, one dense binary perceptron (d={DIM}), 2 workers, {args.clients} "
        f"clients x 1000 x {DIM}, {args.seconds:g} s each, median of {args.repeat}"
    )
    say("| detector | challengers | examples per s | vs no detector | events | exact |")
    say("|---|---:|---:|---:|---:|---|")
    for detector, n in CASES:
        rows = table[(detector, n)]
        exact = all(g["exact"] and not g["bad"] for g in rows)
        events = statistics.median(g["drift_events"] for g in rows)
        say(
            f"| {detector or 'none'} | {n} | {med(detector, n):,.0f} | "
            f"{med(detector, n) / med(None, n):.2f} | {events:g} | {exact} |"
        )
    say(f"\nMicroseconds per example, {N_MARKS:,} mistakes fed at once, best of 5")
    say("| detector | Python (`feed`) | compiled (a challenger's) | Lua (a commit's script) |")
    say("|---|---:|---:|---:|")
    for name, python, loop, lua in per_example():
        say(f"| {name} | {python:.3f} | {loop:.3f} | {lua:.3f} |")


if __name__ == "__main__":
    main()
