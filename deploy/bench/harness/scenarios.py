"""The figures of the benchmark (README.md beside this folder), one function each, run in
the order the command gives: ``per_request`` (figures 1 and 2's d=100 rows),
``feedback_784`` (figure 2), ``learn_batch`` (figure 3; VW's side is in vw.py), ``memory``
(figure 4). Each records its runs and findings in ``bench.results``."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.client import check_accepted, dumps, predict_batches, put_model, request
from harness.common import BATCH, log
from harness.data import Data, make_data, r4, write_lines
from harness.results import BatchBodies
from harness.runner import Bench

# Per-request figures whose Redis work is also recorded: model, counter of requests served.
REDIS_WATCHED = {"predict100": ("p100", "predictions"), "learn100": ("l100", "learned")}


@dataclass
class Stage:
    """What ``setup`` made: the service and the floor (2 workers each), the examples, and one
    /predict and one /learn body file per kind of example (``p100``, ``l784``, ``pnamed``...)."""

    port: int
    workers: list[int]
    base_port: int
    base_workers: list[int]
    data: Data
    dense_rows: list[list[float]]
    mnist_rows: list[list[int]]
    files: dict[str, Path]


def setup(bench: Bench) -> Stage:
    """Start the service and the floor, make the models and the body files, check each body."""
    svc, port = bench.servers.start_service("service", 2, {})
    base, base_port = bench.servers.start_floor("baseline", 2)
    workers, base_workers = svc.workers(), base.workers()
    log(f"service workers {workers}, baseline workers {base_workers}")
    for name in ("p100", "f100", "l100", "lb100", "lbp100", "mem100"):
        put_model(port, name, {"n_features": 100})
    for name in ("p784", "f784", "l784"):
        put_model(port, name, {"classes": list(range(10)), "n_features": 784})
    for name in ("pnamed", "lnamed"):
        put_model(port, name, {"hash_bits": 18})
    d = make_data()
    n = 2000
    dense = [r4(d.dense_x[i]) for i in range(n)]
    mnist = [[int(v) for v in d.mnist_x[i]] for i in range(len(d.mnist_x))]
    kinds: dict[str, tuple[list[Any], list[int]]] = {
        "100": (dense, d.dense_y[:n]),
        "784": (mnist, d.mnist_y),
        "named": (d.named_x, d.named_y),
    }
    files: dict[str, Path] = {}
    for kind, (rows, labels) in kinds.items():
        p_name, l_name = "p" + kind, "l" + kind
        files[p_name] = write_lines(
            bench.tmp / p_name, [dumps({"model": p_name, "features": f}) for f in rows]
        )
        files[l_name] = write_lines(
            bench.tmp / l_name,
            [
                dumps({"model": l_name, "features": f, "label": y})
                for f, y in zip(rows, labels, strict=True)
            ],
        )

    def first(key: str) -> bytes:
        return files[key].read_bytes().split(b"\n", 1)[0]

    # Every body must be accepted before it is fired 100,000 times.
    for kind in ("100", "784", "named"):
        for path, key in (("/predict", "p" + kind), ("/learn", "l" + kind)):
            check_accepted(port, path, first(key), f"{path} {key}")
    for path, key in (("/floor", "p100"), ("/floor", "p784"), ("/floor_named", "pnamed")):
        check_accepted(base_port, path, first(key), f"baseline {path} {key}")
    return Stage(port, workers, base_port, base_workers, d, dense, mnist, files)


def per_request(bench: Bench, st: Stage) -> None:
    """Figure 1: each endpoint beside its floor, alternated, after one warm-up pass; the Redis
    work of /feedback, /predict and /learn d=100 (figure 2)."""
    b, s = st.base_port, st.port
    bw, sw = st.base_workers, st.workers
    f = {k: str(v) for k, v in st.files.items()}
    plan: list[tuple[str, int, str, str, list[int]]] = [
        ("bare100", b, "/bare", f["p100"], bw),
        ("floor100", b, "/floor", f["p100"], bw),
        ("predict100", s, "/predict", f["p100"], sw),
        ("feedback100", s, "/feedback", "", sw),
        ("learn100", s, "/learn", f["l100"], sw),
        ("floor784", b, "/floor", f["p784"], bw),
        ("predict784", s, "/predict", f["p784"], sw),
        ("learn784", s, "/learn", f["l784"], sw),
        ("floor_named", b, "/floor_named", f["pnamed"], bw),
        ("predict_named", s, "/predict", f["pnamed"], sw),
        ("learn_named", s, "/learn", f["lnamed"], sw),
    ]
    # Warm-up pass (not recorded); the /feedback one also tells how many ids a run needs.
    log("warm-up pass")
    warm_ids = bench.feedback_bodies("fb100_warm", s, "f100", st.dense_rows, 20_000, _flip)
    rate = 0.0
    for key, port, path, body, workers in plan:
        if key == "feedback100":
            run = bench.wrk_run(
                key, port, path, warm_ids, "once", dur=1, workers=workers, record=False
            )
            rate = (run.requests - run.status_errors) / run.seconds
        else:
            bench.wrk_run(key, port, path, body, dur=1, workers=workers, record=False)
    # Fresh ids are made just before each /feedback run, for 1.6 x the fastest rate seen
    # so far (at least 2,000/s): running out would show as 404s, reported below.
    rate = max(rate, 2000.0)
    for r in range(bench.runs):
        log(f"round {r + 1}/{bench.runs}")
        for key, port, path, body, workers in plan:
            if key == "feedback100":
                need = int(rate * bench.dur * 1.6) + 3000
                ids = bench.feedback_bodies(f"fb100_{r}", s, "f100", st.dense_rows, need, _flip)
                log(f"made {need:,} fresh prediction ids")
                time.sleep(0.5)
                before = bench.redis_before("f100")
                run = bench.wrk_run(key, port, path, ids, "once", workers=workers)
                rate = max(rate, run.rps)
                stats = bench.redis_after("f100", before)
                run.extra.update(stats)
                bench.results.fb_stats.append(stats)
                if run.status_errors:
                    bench.results.notes.append(
                        f"/feedback d=100 round {r + 1}: {run.status_errors} non-2xx "
                        "responses (ids ran out?)"
                    )
            elif key in REDIS_WATCHED:
                model, counter = REDIS_WATCHED[key]
                before = bench.redis_before(model)
                run = bench.wrk_run(key, port, path, body, workers=workers)
                run.extra.update(bench.redis_after(model, before, counter))
            else:
                bench.wrk_run(key, port, path, body, workers=workers)


def _flip(label: int) -> int:
    """The binary label that disagrees with a prediction: every feedback updates."""
    return -label


def _next_class(label: int) -> int:
    """A class other than the predicted one (of 10): every feedback updates."""
    return (label + 1) % 10


def feedback_784(bench: Bench, st: Stage) -> None:
    """Figure 2's d=784 x 10 classes row: one /feedback run, every feedback updating."""
    s = st.port
    log("feedback d=784 x 10 classes")
    warm = bench.feedback_bodies("fb784_warm", s, "f784", st.mnist_rows, 6_000, _next_class)
    run = bench.wrk_run(
        "feedback784", s, "/feedback", warm, "once", dur=1, workers=st.workers, record=False
    )
    rate = max(1000.0, (run.requests - run.status_errors) / run.seconds)
    need = int(rate * bench.dur * 1.6) + 2000
    ids = bench.feedback_bodies("fb784", s, "f784", st.mnist_rows, need, _next_class)
    before = bench.redis_before("f784")
    run = bench.wrk_run("feedback784", s, "/feedback", ids, "once", workers=st.workers)
    stats = bench.redis_after("f784", before)
    run.extra.update(stats)
    bench.results.fb784_stats = stats
    if run.status_errors:
        bench.results.notes.append(f"/feedback 784x10: {run.status_errors} non-2xx responses")


def learn_batch(bench: Bench, st: Stage) -> None:
    """Figure 3: /learn/batch of 1000 dense d=100 examples, 4 connections, JSON features and
    packed_features (a model each) in turn."""
    d = st.data
    bodies, packed = [], []
    for b in range(8):
        lo = b * BATCH
        feats = [r4(d.dense_x[lo + i]) for i in range(BATCH)]
        labels = d.dense_y[lo : lo + BATCH]
        bodies.append(dumps({"model": "lb100", "features": feats, "labels": labels}))
        values = base64.b64encode(np.array(feats, dtype="<f8").tobytes()).decode()
        packed.append(dumps({"model": "lbp100", "packed_features": values, "labels": labels}))
    path = str(write_lines(bench.tmp / "lb100", bodies))
    packed_path = str(write_lines(bench.tmp / "lbp100", packed))
    log("learn/batch: 4 connections, 1000 examples per request, JSON and packed in turn")
    forms = (("learn_batch", "lb100", path), ("learn_batch_packed", "lbp100", packed_path))
    for key, _, body_path in forms:
        bench.wrk_run(
            key,
            st.port,
            "/learn/batch",
            body_path,
            dur=1,
            conns=4,
            workers=st.workers,
            record=False,
        )
    m0 = bench.meta("lb100")
    for _ in range(bench.runs):
        for key, model, body_path in forms:
            before = bench.redis_before(model)
            run = bench.wrk_run(
                key, st.port, "/learn/batch", body_path, conns=4, workers=st.workers
            )
            run.extra.update(bench.redis_after(model, before, "learned"))
    m1 = bench.meta("lb100")
    learned = m1.get("learned", 0) - m0.get("learned", 0)
    bench.results.learn_batch = BatchBodies(
        update_rate=(m1.get("version", 0) - m0.get("version", 0)) / max(1, learned),
        body_kib=len(bodies[0]) / 1024,
        packed_kib=len(packed[0]) / 1024,
    )


def memory(bench: Bench, st: Stage) -> None:
    """Figure 4: Redis bytes per pending prediction (the main service), and per weight of a
    2^20-weight named model whose log was folded into a snapshot (a second service)."""
    r = bench.r
    time.sleep(1.0)
    before = int(r.info("memory")["used_memory"])
    n = 20_000
    predict_batches(st.port, "mem100", st.dense_rows, n, clients=1)
    time.sleep(1.0)
    after = int(r.info("memory")["used_memory"])
    key = next(r.scan_iter(match="pcp:{mem100}:p:*", count=1000))
    pending = {
        "per_prediction": (after - before) / n,
        "record_bytes": int(r.strlen(key)),
        "key_memory_usage": int(r.memory_usage(key, samples=0) or 0),
    }
    bench.results.pending = pending
    log(f"pending predictions: {pending}")
    every = 50
    proc, port = bench.servers.start_service(
        "service-mem", 1, {"PERCEPTRON_COMPACT_EVERY": str(every)}
    )
    try:
        put_model(port, "mem20", {"hash_bits": 20})
        rng = np.random.default_rng(11)
        teacher = rng.normal(size=1_000_000)
        for _ in range(10):
            feats, labels = [], []
            for _ in range(500):
                ids = rng.choice(1_000_000, size=50, replace=False)
                vals = rng.uniform(0.1, 2.0, size=50).round(3)
                feats.append({f"w{i:07d}": float(v) for i, v in zip(ids, vals, strict=True)})
                labels.append(1 if float(teacher[ids] @ vals) > 0 else -1)
            body = dumps({"model": "mem20", "features": feats, "labels": labels})
            status, out = request(port, "POST", "/learn/batch", body, timeout=120)
            if status != 200:
                raise SystemExit(f"/learn/batch mem20: {status} {out[:300]!r}")
        # A compaction starts after a write that finds the log >= COMPACT_EVERY long, unless
        # one is running: nudge with one-example batches until the log is folded.
        nudge = dumps({"model": "mem20", "features": [feats[0]], "labels": [labels[0]]})
        deadline = time.time() + 30
        while time.time() < deadline:
            time.sleep(0.5)
            m = bench.meta("mem20")
            llen = int(r.llen("pcp:{mem20}:log"))
            if m.get("snapv", 0) > 0 and llen < every:
                break
            request(port, "POST", "/learn/batch", nudge, timeout=60)
        m = bench.meta("mem20")
        keys = list(r.scan_iter(match="pcp:{mem20}:*", count=1000))
        sizes = {k.decode(): int(r.memory_usage(k, samples=0) or 0) for k in keys}
        total = sum(sizes.values())
        bench.results.weights_mem = {
            "bytes_per_weight": total / 2**20,
            "total_mib": total / 2**20,
            "keys": sizes,
            "version": m.get("version", 0),
            "snapv": m.get("snapv", 0),
            "log_entries": int(r.llen("pcp:{mem20}:log")),
            "learned": m.get("learned", 0),
        }
        log(f"2^20-weight model: {bench.results.weights_mem}")
    finally:
        bench.servers.stop(proc)
