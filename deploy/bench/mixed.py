"""/feedback and /learn on one model at once: feedback's latency while the model learns.

    .venv/bin/python deploy/bench/mixed.py                     # about 2 minutes
    .venv/bin/python deploy/bench/mixed.py --repeat 5 [--baseline REV] [--pause-ms MS]

Each run: a fresh redis-server and ``perceptron serve --workers 2`` on loopback, one dense
binary model (d=100), then two wrk loads at once for --seconds: /learn, one example a
request (a noisy linear teacher, so the weights keep changing), and /feedback, each for a
fresh prediction made before the run with its label chosen against the prediction, so that
every feedback updates the weights too (--connections each, wrk_bodies.lua); with --wrong F,
only a share F of them (the model is taught a batch first, and the rest get the class it
served: no update, as in a stream the model mostly gets right). Each design
runs in turn, round after round: one writer (the default) and each worker committing its own
(PERCEPTRON_ONE_WRITER=false), and with --baseline a checkout of REV with one writer (a git
worktree made here, removed at the end); and, as the floor of the same load on the same
machine, one writer with /learn sent to a second model ("learn elsewhere"): what feedback
costs when nothing shares its model. By default each connection sends its next request as
soon as it has an answer (a closed loop: the loads take whatever the service gives them, so
the designs do not do the same work); --pause-ms MS makes each connection wait MS ms first,
an offered load below what the service can answer, the same for every design (wrk_bodies.lua,
WRK_PAUSE_MS). Reported per design, medians over the rounds:
/feedback's p50, p99 and answers/s, /learn's p99 and answers/s, how many feedback calls
found the model held by its writer (per 1,000 feedbacks applied), non-200 answers, and
whether the model's version grew by at least its mistakes (each an update, at margin 0).
Every process is started here, bound to 127.0.0.1, and stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import redis
from harness.client import call
from harness.common import DIM, say
from harness.data import feedback_bodies, learn_bodies
from harness.load import start_wrk, wrk_summary
from harness.servers import ready, redis_server, serve, stop
from harness.tools import designs

from service.cli.loopback import free_port, wait_until

ELSEWHERE = "learn elsewhere"  # one writer, /learn on a second model: feedback's floor


def held_calls(redis_port: int) -> int:
    """Feedback calls that found the model held by its writer so far: each counts itself in
    the hold with one INCR, the only INCR the service sends (Redis's INFO commandstats)."""
    client = redis.Redis(port=redis_port)
    try:
        return int(client.info("commandstats").get("cmdstat_incr", {}).get("calls", 0))
    finally:
        client.close()


def run(
    tree: Path,
    env: dict[str, str],
    tmp: Path,
    conns: int,
    seconds: float,
    pause_ms: int,
    learn_model: str,
    wrong: float,
) -> dict[str, Any]:
    port = free_port()
    redis_proc, rport = redis_server(tmp)
    service = serve(tree, rport, port, 2, {"PERCEPTRON_MAX_PENDING_BYTES": "0", **env})
    try:
        wait_until(partial(ready, port), 30, "service")
        for name in {"m", learn_model}:
            assert call(port, "PUT", f"/models/{name}", {"n_features": DIM})[0] == 201
        fb = feedback_bodies(port, tmp / "feedback_0", wrong)
        learned = learn_bodies(tmp / "learn", learn_model)
        before = {n: json.loads(call(port, "GET", f"/models/{n}")[1]) for n in ("m", learn_model)}
        held = held_calls(rport)
        learn = start_wrk(port, "/learn", learned, "cycle", conns, seconds, pause_ms)
        feedback = start_wrk(
            port, "/feedback", fb.with_name("feedback_%d"), "once", conns, seconds, pause_ms
        )
        got = {"learn": wrk_summary(learn), "feedback": wrk_summary(feedback)}
        after = {n: json.loads(call(port, "GET", f"/models/{n}")[1]) for n in ("m", learn_model)}
        held = held_calls(rport) - held
    finally:
        stop(service, redis_proc)
    out: dict[str, Any] = {}
    for kind, s in got.items():
        ok = s["requests"] - sum(s["statuses"].values()) - s["timeouts"]
        out[kind] = {
            "per_s": ok / (s["duration_us"] / 1e6),
            "p50_ms": s["p50_us"] / 1000,
            "p99_ms": s["p99_us"] / 1000,
            "bad": sum(s["statuses"].values()) + s["timeouts"],
        }

    def grew(model: str, counter: str) -> int:
        return int(after[model]["counters"][counter] - before[model]["counters"][counter])

    # Margin 0: every mistake, of feedback or of a learn, is an update (and a score of 0 too).
    fed, taught = grew("m", "feedback"), grew(learn_model, "learned")
    out["applied"] = {"feedback": fed, "learned": taught}
    out["held_per_1000"] = 1000 * held / max(1, fed)
    out["exact"] = after["m"]["version"] - before["m"]["version"] >= grew("m", "mistakes")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=16, help="per load (wrk -c)")
    ap.add_argument("--baseline", default=None, help="a git revision to compare with")
    ap.add_argument(
        "--pause-ms",
        type=int,
        default=0,
        help="each connection's pause before its next request (0: a closed loop)",
    )
    ap.add_argument(
        "--wrong",
        type=float,
        default=1.0,
        help="the share of feedback labels against the prediction, each an update (1: all)",
    )
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is missing: deploy/bench/benchmark.py installs it (apt-get install wrk)")
    table: dict[str, list[dict[str, Any]]] = {}
    with designs(args.baseline) as trees:
        trees[ELSEWHERE] = trees["one writer"]
        for r in range(args.repeat):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
            for name, (tree, env) in order:
                with tempfile.TemporaryDirectory(prefix="pcp-mixed-") as folder:
                    tmp = Path(folder)
                    learn_model = "m2" if name == ELSEWHERE else "m"
                    got = run(
                        tree,
                        env,
                        tmp,
                        args.connections,
                        args.seconds,
                        args.pause_ms,
                        learn_model,
                        args.wrong,
                    )
                table.setdefault(name, []).append(got)
                f, lr = got["feedback"], got["learn"]
                say(
                    f"{name}: /feedback {f['per_s']:,.0f}/s p50 {f['p50_ms']:.1f} ms "
                    f"p99 {f['p99_ms']:.1f} ms; /learn {lr['per_s']:,.0f}/s p99 "
                    f"{lr['p99_ms']:.1f} ms; non-200 {f['bad'] + lr['bad']}; exact {got['exact']}; "
                    f"held {got['held_per_1000']:.0f} per 1000 feedbacks"
                )
    pause = f", {args.pause_ms} ms pause a request" if args.pause_ms else ", closed loop"
    pause += f", {args.wrong:.0%} of feedback an update"
    say(
        f"\n/feedback and /learn at once on one model, 2 workers, wrk -c{args.connections} "
        f"each{pause}, {args.seconds:g} s, median of {args.repeat}"
    )
    say(
        "| design | /feedback p50 ms | /feedback p99 ms | /feedback per s | /learn p99 ms "
        "| /learn per s | held per 1000 feedbacks | non-200 | exact |"
    )
    say("|---|---|---|---|---|---|---|---|---|")
    for name, runs in table.items():

        def med(kind: str, key: str, runs: list[dict[str, Any]] = runs) -> float:
            return float(statistics.median(r[kind][key] for r in runs))

        bad = sum(r["feedback"]["bad"] + r["learn"]["bad"] for r in runs)
        say(
            f"| {name} | {med('feedback', 'p50_ms'):.1f} | {med('feedback', 'p99_ms'):.1f} "
            f"| {med('feedback', 'per_s'):,.0f} | {med('learn', 'p99_ms'):.1f} "
            f"| {med('learn', 'per_s'):,.0f} "
            f"| {statistics.median(r['held_per_1000'] for r in runs):.0f} "
            f"| {bad} | {all(r['exact'] for r in runs)} |"
        )


if __name__ == "__main__":
    main()
