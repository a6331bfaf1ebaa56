"""A large model's rollback and undo while three clients learn: how long each takes, whether
every acknowledged example is learned exactly once, and whether Redis is held meanwhile.

    .venv/bin/python deploy/bench/restore.py                     # 2^24 buckets, about 2 minutes
    .venv/bin/python deploy/bench/restore.py --baseline 140a5ef  # and a checkout of that tree

For each tree (this one, then with --baseline a checkout of REV, a git worktree made here and
removed at the end): a fresh redis-server and ``perceptron serve`` (two workers, keys on) on
loopback; a binary model of named features hashed into 2^--bits buckets (8 bytes each: 128 MiB
for 24 bits), taught --labelled examples by the key ``labeller`` and compacted, so that its
snapshot is whole-size. Then three clients learn one example a request with the key ``bob``
for the whole run, while an admin undoes the labeller's updates, rolls the model back to
its oldest kept version, and rolls that back (to the checkpoint it answered). Reported per
operation: its answer and wall time; over the run: Redis's SLOWLOG entries over 50 ms (and
the longest command), and the examples the model counted as learned against the /learn
requests answered 200 (equal when each was learned exactly once). Every process is started
here, bound to 127.0.0.1, and stopped by its PID.
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis
from harness.common import ROOT, say
from harness.servers import ready, redis_server, serve, stop
from harness.tools import worktree

from service.cli.loopback import free_port, wait_until

KEYS = {"labeller": "l" * 32, "bob": "b" * 32, "admin": "a" * 32}
SLOW_US = 50_000


def headers(who: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[who]}"}


def one_tree(tree: Path, bits: int, labelled: int, pause_s: float) -> dict[str, Any]:
    redis_proc, rport = redis_server(tempfile.mkdtemp(prefix="pcp-restore-"))
    port = free_port()
    keys = ",".join(f"{k}={'admin' if k == 'admin' else 'train'}:{v}" for k, v in KEYS.items())
    env = {
        "PERCEPTRON_AUTH": "true",
        "PERCEPTRON_API_KEYS": keys,
        "PERCEPTRON_COMPACT_EVERY": "50",
        "PERCEPTRON_MAX_BODY_BYTES": str(64 * 2**20),
        # (each checkpoint of such a model is its whole weights: room for a few)
        "PERCEPTRON_HISTORY_MAX_BYTES": str(2 * 2**30),
    }
    service = serve(tree, rport, port, 2, env)
    out: dict[str, Any] = {"tree": str(tree)}
    try:
        wait_until(partial(ready, port), 60, "service")
        r = redis.Redis(port=rport)
        url = f"http://127.0.0.1:{port}"
        admin = httpx.Client(base_url=url, timeout=600, headers=headers("admin"))
        assert admin.put("/models/big", json={"hash_bits": bits}).status_code == 201
        with httpx.Client(base_url=url, timeout=120, headers=headers("labeller")) as lab:
            for i in range(labelled):
                x = {f"lab{i}-{j}": 1.0 for j in range(20)}
                a = lab.post(
                    "/learn", json={"model": "big", "features": x, "label": 1 - 2 * (i % 2)}
                )
                assert a.status_code == 200, a.text
        start_version = admin.get("/models/big").json()["version"]
        learned_before = admin.get("/models/big").json()["counters"]["learned"]
        r.config_set("slowlog-log-slower-than", SLOW_US)
        r.slowlog_reset()
        stop_load = threading.Event()
        answered = [0, 0, 0]  # per client: /learn answered 200
        failed: list[str] = []

        def load(c: int) -> None:
            rng = np.random.default_rng(c)
            with httpx.Client(base_url=url, timeout=120, headers=headers("bob")) as cl:
                i = 0
                while not stop_load.is_set():
                    x = {f"bob{c}-{i}-{j}": float(rng.normal()) for j in range(10)}
                    a = cl.post("/learn", json={"model": "big", "features": x, "label": 1})
                    if a.status_code == 200:
                        answered[c] += 1
                    else:
                        failed.append(f"{a.status_code} {a.text[:200]}")
                    i += 1

        threads = [threading.Thread(target=load, args=(c,)) for c in range(3)]
        for t in threads:
            t.start()
        ops: list[dict[str, Any]] = []

        def timed(what: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
            time.sleep(pause_s)
            started = time.perf_counter()
            a = admin.post(path, json=body)
            took = time.perf_counter() - started
            ops.append(
                {"op": what, "status": a.status_code, "s": round(took, 2), "answer": a.text[:160]}
            )
            say(f"  {what}: {a.status_code} in {took:.2f} s")
            return dict(a.json()) if a.status_code == 200 else {}

        try:
            timed("undo a key's updates", "/models/big/undo", {"source": "labeller"})
            oldest = admin.get("/models/big/checkpoints").json()["restorable_from"]
            back = timed("rollback to a version", "/models/big/rollback", {"version": oldest})
            if back:
                timed(
                    "rollback to its checkpoint",
                    "/models/big/rollback",
                    {"checkpoint": back.get("undo_checkpoint", back.get("before"))},
                )
            time.sleep(pause_s)
        finally:
            stop_load.set()
            for t in threads:
                t.join(120)
        time.sleep(1.0)  # (requests in flight answered)
        learned = admin.get("/models/big").json()["counters"]["learned"] - learned_before
        slow = r.slowlog_get(1000)
        out.update(
            start_version=start_version,
            ops=ops,
            answered=sum(answered),
            failed=len(failed),
            failures=failed[:3],
            learned=learned,
            slow_commands=len(slow),
            longest_ms=max((e["duration"] / 1000 for e in slow), default=0.0),
            slowest=[
                (e["duration"] / 1000, e["command"][:40].decode(errors="replace")) for e in slow[:5]
            ],
        )
        admin.close()
        r.close()
    finally:
        stop(service, redis_proc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bits", type=int, default=24, help="hash bits of the model (24: 128 MiB)")
    ap.add_argument("--labelled", type=int, default=200, help="examples the labeller teaches first")
    ap.add_argument(
        "--pause", type=float, default=1.0, help="seconds of learning between operations"
    )
    ap.add_argument("--baseline", help="also a checkout of this revision (a git worktree)")
    a = ap.parse_args()

    trees = {"this tree": ROOT}
    with worktree(a.baseline) as made:
        if made is not None:
            trees[a.baseline] = made
        results = {}
        for name, tree in trees.items():
            say(f"{name}: 2^{a.bits} buckets, three clients learning")
            results[name] = one_tree(tree, a.bits, a.labelled, a.pause)
    say(f"\n`deploy/bench/restore.py --bits {a.bits}` ({datetime.date.today()}):\n")
    say("| tree | operation | answer | wall s |")
    say("|---|---|---:|---:|")
    for name, res in results.items():
        for op in res["ops"]:
            say(f"| {name} | {op['op']} | {op['status']} | {op['s']} |")
    say(
        "\n| tree | /learn answered 200 | examples learned | other answers "
        "| SLOWLOG > 50 ms | longest ms |"
    )
    say("|---|---:|---:|---:|---:|---:|")
    for name, res in results.items():
        say(
            f"| {name} | {res['answered']} | {res['learned']} | {res['failed']} | "
            f"{res['slow_commands']} | {res['longest_ms']:.1f} |"
        )
    for name, res in results.items():
        if res["failures"] or res["slowest"]:
            say(f"{name}: failures {res['failures']}; slowest {res['slowest']}")


if __name__ == "__main__":
    main()
