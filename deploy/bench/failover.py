"""How long learning stops when one model's writer dies (kill -9) or stalls (SIGSTOP).

    .venv/bin/python deploy/bench/failover.py                  # about 2 minutes
    .venv/bin/python deploy/bench/failover.py --repeat 5 [--baseline REV]

Each run: a fresh redis-server and three services of one worker each on loopback (A, B, C),
one dense model (d=100); two client threads per service send /learn (one example a request)
back to back, each on its own keep-alive connection. A learns first, so it holds the model's
writer lease, and its own clients keep it busy. After --before seconds, A is killed with
SIGKILL ("dies") or stopped with SIGSTOP for --after seconds, then continued ("stalls"). The
figure: the longest time, from the fault on, during which B's and C's clients got no answer
200 at all (learning stopped), beside their longest such gap before the fault (the noise).
Also: answers other than 200 from B and C, and whether the model's version grew by exactly
the updates that 200 answers acknowledged (kill runs; A's clients stop counting at the
fault, and what A learned but never answered is told apart by its own counter). Each design
runs in turn, one writer (the default) and each worker committing its own
(PERCEPTRON_ONE_WRITER=false), and with --baseline a checkout of REV too (a git worktree made
here, removed at the end). Every process is started here, bound to 127.0.0.1, and stopped
by its PID.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import statistics
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from harness.client import call
from harness.common import DIM, say
from harness.servers import ready, redis_server, serve, stop
from harness.tools import designs

from service.cli.loopback import free_port, wait_until


class Client(threading.Thread):
    """POSTs /learn to one service back to back; keeps when each 200 came and what it said."""

    def __init__(self, port: int, seed: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.stop = port, stop
        rng = np.random.default_rng(seed)
        truth = np.random.default_rng(0).normal(size=DIM)
        self.bodies = []
        for _ in range(200):
            x = rng.normal(size=DIM).round(4)
            y = 1 if float(x @ truth) + rng.normal() > 0 else -1
            body = {"model": "f", "features": x.tolist(), "label": y}
            self.bodies.append(json.dumps(body).encode())
        self.done: list[float] = []  # when each 200 came
        self.updates = 0
        self.failed: dict[str, int] = {}

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"content-type": "application/json"}
        i = 0
        while not self.stop.is_set():
            try:
                conn.request("POST", "/learn", body=self.bodies[i % 200], headers=headers)
                r = conn.getresponse()
                data = r.read()
            except OSError as e:  # the service was killed
                self.failed[type(e).__name__] = self.failed.get(type(e).__name__, 0) + 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                time.sleep(0.05)
                continue
            i += 1
            if r.status == 200:
                self.done.append(time.monotonic())
                self.updates += bool(json.loads(data)["updated"])
            else:
                code = f"{r.status} {json.loads(data).get('code')}"
                self.failed[code] = self.failed.get(code, 0) + 1
        conn.close()


def longest_gap(times: list[float], start: float, stop: float) -> float:
    """The longest stretch within [start, stop] holding none of ``times``."""
    inside = sorted(t for t in times if start <= t <= stop)
    edges = [start, *inside, stop]
    return max(b - a for a, b in zip(edges, edges[1:], strict=False))


def run(tree: Path, env: dict[str, str], fault: str, before: float, after: float) -> dict[str, Any]:
    redis_proc, rport = redis_server(tempfile.mkdtemp(prefix="pcp-failover-"))
    ports = [free_port() for _ in range(3)]
    services = [serve(tree, rport, p, 1, env) for p in ports]  # (every setting its default)
    done = threading.Event()
    clients: list[Client] = []
    try:
        for p in ports:
            wait_until(partial(ready, p), 30, "service")
        assert call(ports[0], "PUT", "/models/f", {"n_features": DIM})[0] == 201
        first = {"model": "f", "features": [0.0] * DIM, "label": 1}
        assert call(ports[0], "POST", "/learn", first)[0] == 200  # A writes the model
        clients = [Client(p, 10 * i + j, done) for i, p in enumerate(ports) for j in range(2)]
        for c in clients:
            c.start()
        time.sleep(before)
        a = services[0]
        fault_at = time.monotonic()
        a_updates = sum(c.updates for c in clients[:2])
        if fault == "dies":
            a.kill()
            a.wait()
            time.sleep(after)
        else:
            a.send_signal(signal.SIGSTOP)
            time.sleep(after)
            a.send_signal(signal.SIGCONT)
        done.set()
        for c in clients:
            c.join(60)
        others = [t for c in clients[2:] for t in c.done]
        info = json.loads(call(ports[1], "GET", "/models/f")[1])
    finally:
        done.set()
        stop(*services, redis_proc)
    failed: dict[str, int] = {}
    for c in clients[2:]:
        for k, v in c.failed.items():
            failed[k] = failed.get(k, 0) + v
    acknowledged = 1 + a_updates + sum(c.updates for c in clients[2:])
    return {
        "stopped_s": longest_gap(others, fault_at, fault_at + after),
        "noise_s": longest_gap(others, fault_at - before + 1.0, fault_at),
        "per_s": len([t for t in others if t < fault_at]) / before,
        "failed": failed,
        # A killed may have learned requests it never answered: never fewer updates than the
        # answers acknowledged, and never more than those and A's own in flight (2).
        "exact": (
            acknowledged <= info["version"] <= acknowledged + 2
            if fault == "dies"
            else info["version"] >= acknowledged
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", type=float, default=3.0, help="seconds of learning before")
    ap.add_argument("--after", type=float, default=4.0, help="seconds after the fault")
    ap.add_argument("--baseline", default=None, help="a git revision to compare with")
    args = ap.parse_args()
    table: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with designs(args.baseline) as trees:
        for _ in range(args.repeat):
            for fault in ("dies", "stalls"):
                for name, (tree, env) in trees.items():
                    r = run(tree, env, fault, args.before, args.after)
                    table.setdefault((name, fault), []).append(r)
                    say(
                        f"{name}, writer {fault}: learning stopped {r['stopped_s']:.2f} s "
                        f"(before: {r['noise_s']:.2f} s at most, {r['per_s']:,.0f} answers/s), "
                        f"failed {r['failed']}, exact {r['exact']}"
                    )
    say(
        f"\nlongest time without a 200 from the two other services' clients, from the fault "
        f"on ({args.after:g} s watched), median (min-max) of {args.repeat}"
    )
    say("| design | writer dies (kill -9) | writer stalls (SIGSTOP) | before, at most | non-200 |")
    say("|---|---|---|---|---|")
    for name in trees:
        cells = []
        for fault in ("dies", "stalls"):
            gaps = [r["stopped_s"] for r in table[name, fault]]
            cells.append(f"{statistics.median(gaps):.2f} ({min(gaps):.2f}-{max(gaps):.2f})")
        runs = table[name, "dies"] + table[name, "stalls"]
        noise = max(r["noise_s"] for r in runs)
        bad = sum(sum(r["failed"].values()) for r in runs)
        exact = all(r["exact"] for r in runs)
        say(f"| {name} | {cells[0]} | {cells[1]} | {noise:.2f} | {bad} (exact: {exact}) |")


if __name__ == "__main__":
    main()
