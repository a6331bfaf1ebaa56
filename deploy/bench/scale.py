"""How the service's per-request figures scale with its number of workers, on this machine.

    .venv/bin/python deploy/bench/scale.py [--workers 1,2,4] [--repeat 2] [--seconds 5]
    .venv/bin/python deploy/bench/scale.py --quick [--out FILE]

For each W in --workers: a fresh start of the service with W uvicorn workers twice
(``PERCEPTRON_ONE_WRITER=true``, the default, and ``=false``) and of the bare FastAPI floor
(``baseline_app.py``) with W workers, on one redis-server (loopback, free port, no
persistence) flushed before each W. Then --repeat rounds of wrk runs of --seconds each, the
variants in one order on even rounds and in the reverse order on odd ones (after one 1 s
warm-up of each):

- /predict d=100 (the default service) and /floor (the floor app), same bodies;
- /learn d=100, one example per request, with one writer per model and with each worker
  committing its own;
- /feedback d=100 (the default service), each with a fresh prediction id and the label chosen
  against the prediction, so that every feedback updates the weights.

For each run: requests/s (200s only), the CPU (user + sys) of the server's whole process tree
(psutil) and of Redis (INFO cpu) per 200 response, non-200 responses. Prints one markdown table
(rows W, the medians over the rounds) and notes; ``--out FILE`` also writes them to FILE and the
raw runs to FILE.json. The setup (wrk, the floor, the CPU meter, the processes) is
benchmark.py's (harness/); every server binds 127.0.0.1 and is stopped by its PID at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from harness.client import check_accepted, dumps, put_model
from harness.common import DISTURBED, NCPU, log
from harness.cpu import tree_cpu, tree_delta
from harness.data import make_data, r4, write_lines
from harness.redis_stats import cpu_seconds
from harness.results import Run
from harness.runner import Bench
from harness.servers import Proc

# The variants measured at each W, in the order of even rounds (odd rounds: reversed).
VARIANTS = ("predict", "floor", "learn_one", "learn_each", "feedback")
CPU_TARGET = 1.3  # CPU per request at the highest W, at most this x the lowest W's
FLOOR_TARGET = 0.85  # /predict req/s at least this x the floor's, at every W
WARM_S = 1


class Scale(Bench):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args.quick)
        self.opts = args
        self.dur = args.seconds
        self.runs = args.repeat
        self.raw: list[dict[str, Any]] = []
        self.by: dict[tuple[int, str], list[Run]] = {}
        self.startup: dict[int, float] = {}
        self.fb_rate = 0.0  # the fastest /feedback req/s seen at this W

    # -- setting up ------------------------------------------------------------------------

    def prepare(self, tree: str = "work") -> None:
        super().prepare(tree)
        d = make_data()
        n = 2000
        self.dense_rows = rows = [r4(d.dense_x[i]) for i in range(n)]
        labels = d.dense_y[:n]
        self.body_files = {
            "p100": write_lines(
                self.tmp / "p100", [dumps({"model": "p100", "features": f}) for f in rows]
            )
        }
        for model in ("l100one", "l100each"):
            self.body_files[model] = write_lines(
                self.tmp / model,
                [
                    dumps({"model": model, "features": f, "label": y})
                    for f, y in zip(rows, labels, strict=True)
                ],
            )

    def start_w(self, w: int) -> None:
        t0 = time.time()
        self.r.flushall()
        self.svc_one, self.port_one = self.servers.start_service(
            f"service_one_w{w}", w, {"PERCEPTRON_ONE_WRITER": "true"}
        )
        self.svc_each, self.port_each = self.servers.start_service(
            f"service_each_w{w}", w, {"PERCEPTRON_ONE_WRITER": "false"}
        )
        self.floor, self.port_floor = self.servers.start_floor(f"floor_w{w}", w)
        for port, models in (
            (self.port_one, ("p100", "f100", "l100one")),
            (self.port_each, ("l100each",)),
        ):
            for name in models:
                put_model(port, name, {"n_features": 100})
        f = {k: str(v) for k, v in self.body_files.items()}
        self.plan: dict[str, tuple[Proc, int, str, str, str | None]] = {
            "predict": (self.svc_one, self.port_one, "/predict", f["p100"], "p100"),
            "floor": (self.floor, self.port_floor, "/floor", f["p100"], None),
            "learn_one": (self.svc_one, self.port_one, "/learn", f["l100one"], "l100one"),
            "learn_each": (self.svc_each, self.port_each, "/learn", f["l100each"], "l100each"),
            "feedback": (self.svc_one, self.port_one, "/feedback", "", "f100"),
        }
        for variant, (_, port, path, body_file, _) in self.plan.items():
            if not body_file:
                continue
            body = Path(body_file).read_bytes().split(b"\n", 1)[0]
            check_accepted(port, path, body, f"{variant}: {path} answered")
        self.startup[w] = time.time() - t0
        log(
            f"W={w}: up in {self.startup[w]:.1f} s; workers: one writer "
            f"{self.svc_one.workers()}, each commits {self.svc_each.workers()}, floor "
            f"{self.floor.workers()}"
        )

    def stop_w(self) -> None:
        for proc in (self.floor, self.svc_each, self.svc_one):
            self.servers.stop(proc)

    # -- measuring -------------------------------------------------------------------------

    def feedback_ids(self, tag: str, n: int) -> str:
        path = self.feedback_bodies(tag, self.port_one, "f100", self.dense_rows, n, lambda y: -y)
        time.sleep(0.5)
        return path

    def measure(self, w: int, rep: int, variant: str, record: bool = True) -> Run:
        proc, port, path, body, model = self.plan[variant]
        mode = "cycle"
        if variant == "feedback":
            mode = "once"
            # Fresh ids for 1.6 x the fastest rate seen at this W (at least 4,000/s): running
            # out would show as 404s.
            secs = self.dur if record else WARM_S
            need = int(max(self.fb_rate, 4000.0) * secs * 1.6) + 3000
            body = self.feedback_ids(f"fb_w{w}_{rep}_{int(record)}", need)
            log(f"made {need:,} fresh prediction ids")
        meta0 = self.meta(model) if model else {}
        cpu0, redis0 = tree_cpu(proc.pid), cpu_seconds(self.r)
        run = self.wrk_run(
            f"W{w}:{variant}",
            port,
            path,
            body,
            mode,
            dur=None if record else WARM_S,
            workers=proc.workers(),
            record=record,
        )
        worker_s = tree_delta(cpu0, tree_cpu(proc.pid))
        redis_s = cpu_seconds(self.r) - redis0
        meta1 = self.meta(model) if model else {}
        ok = run.rps * run.seconds
        run.extra.update(
            {
                "W": w,
                "round": rep,
                "variant": variant,
                "ok": round(ok),
                "worker_cpu_s": worker_s,
                "redis_cpu_s": redis_s,
                "worker_us": worker_s / ok * 1e6 if ok else float("nan"),
                "redis_us": redis_s / ok * 1e6 if ok else float("nan"),
                "non200": sum(run.extra.get("statuses", {}).values()),
                "meta_delta": {k: v - meta0.get(k, 0) for k, v in meta1.items()},
            }
        )
        if variant == "feedback":
            self.fb_rate = max(self.fb_rate, run.rps)
        if record:
            self.by.setdefault((w, variant), []).append(run)
            self.raw.append(run.__dict__)
            foreign = run.cpu.get("foreign", 0.0)
            log(
                f"  W={w} {variant}: worker CPU {run.extra['worker_us']:.0f} us/req, Redis "
                f"{run.extra['redis_us']:.1f} us/req"
                + (
                    f"; DISTURBED: others used {foreign:.0%} of the CPUs"
                    if foreign > DISTURBED
                    else ""
                )
            )
        return run

    def run_w(self, w: int) -> None:
        self.start_w(w)
        try:
            log(f"W={w}: warm-up")
            self.fb_rate = 0.0
            for variant in VARIANTS:
                self.measure(w, -1, variant, record=False)
            for rep in range(self.runs):
                order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
                log(f"W={w}: round {rep + 1}/{self.runs}: {', '.join(order)}")
                for variant in order:
                    self.measure(w, rep, variant)
        finally:
            self.stop_w()

    # -- output ----------------------------------------------------------------------------

    def med(self, w: int, variant: str, what: str) -> float:
        runs = self.by.get((w, variant), [])
        vals = [float(getattr(r, what) if what == "rps" else r.extra[what]) for r in runs]
        return statistics.median(vals) if vals else float("nan")

    def cell_disturbed(self, key: tuple[int, str]) -> bool:
        return any(r.cpu.get("foreign", 0.0) > DISTURBED for r in self.by.get(key, []))

    def table(self) -> str:
        ws = sorted({w for w, _ in self.by})
        w0 = ws[0]
        x0 = f"× W={w0}"

        def num(v: float, fmt: str, key: tuple[int, str] | None = None) -> str:
            if v != v:
                return "n/a"
            return fmt.format(v) + ("†" if key and self.cell_disturbed(key) else "")

        def ratio(a: float, b: float) -> str:
            return "n/a" if not b or a != a or b != b else f"{a / b:.2f}"

        def non200(w: int, variant: str) -> str:
            runs = self.by.get((w, variant), [])
            bad = sum(r.extra["non200"] for r in runs)
            return f"{bad:,} of {sum(r.requests for r in runs):,}"

        head = [
            "W",
            "/predict req/s",
            "floor req/s",
            f"/predict ÷ floor (≥ {FLOOR_TARGET})",
            "/predict worker µs/req",
            x0,
            "floor worker µs/req",
            x0,
            "/learn one writer req/s",
            "worker µs/req",
            x0,
            "Redis µs/req",
            "non-200",
            "/learn each commits req/s",
            "worker µs/req",
            x0,
            "Redis µs/req",
            "non-200",
            "one writer ÷ each commits",
            "/feedback req/s",
            "÷ floor",
            "worker µs/req",
            x0,
            "Redis µs/req",
        ]
        rows = []
        for w in ws:
            m = self.med
            row = [str(w)]
            p, f = m(w, "predict", "rps"), m(w, "floor", "rps")
            row += [
                num(p, "{:,.0f}", (w, "predict")),
                num(f, "{:,.0f}", (w, "floor")),
                ratio(p, f),
            ]
            for v in ("predict", "floor"):
                c = m(w, v, "worker_us")
                row += [num(c, "{:,.0f}", (w, v)), ratio(c, m(w0, v, "worker_us"))]
            for v in ("learn_one", "learn_each"):
                c = m(w, v, "worker_us")
                row += [
                    num(m(w, v, "rps"), "{:,.0f}", (w, v)),
                    num(c, "{:,.0f}", (w, v)),
                    ratio(c, m(w0, v, "worker_us")),
                    num(m(w, v, "redis_us"), "{:.1f}", (w, v)),
                    non200(w, v),
                ]
            row.append(ratio(m(w, "learn_one", "rps"), m(w, "learn_each", "rps")))
            fb, c = m(w, "feedback", "rps"), m(w, "feedback", "worker_us")
            row += [
                num(fb, "{:,.0f}", (w, "feedback")),
                ratio(fb, f),
                num(c, "{:,.0f}", (w, "feedback")),
                ratio(c, m(w0, "feedback", "worker_us")),
                num(m(w, "feedback", "redis_us"), "{:.1f}", (w, "feedback")),
            ]
            rows.append(row)
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)

    def targets(self) -> list[str]:
        ws = sorted({w for w, _ in self.by})
        w0, w1 = ws[0], ws[-1]
        out = []
        ratios = []
        for w in ws:
            r = self.med(w, "predict", "rps") / self.med(w, "floor", "rps")
            ratios.append(f"W={w} {r:.2f} {'yes' if r >= FLOOR_TARGET else '**no**'}")
        out.append(f"/predict ≥ {FLOOR_TARGET} × the floor's req/s: " + ", ".join(ratios) + ".")
        if w1 != w0:
            names = {
                "predict": "/predict",
                "floor": "floor",
                "learn_one": "/learn one writer",
                "learn_each": "/learn each commits",
                "feedback": "/feedback",
            }
            parts = []
            for v, name in names.items():
                g = self.med(w1, v, "worker_us") / self.med(w0, v, "worker_us")
                mark = "" if v == "floor" else (" yes" if g <= CPU_TARGET else " **no**")
                parts.append(f"{name} {g:.2f}{mark}")
            out.append(
                f"Worker CPU per request grows ≤ {CPU_TARGET} × from W={w0} to W={w1}: "
                + ", ".join(parts)
                + " (the floor's growth is the baseline: what uvicorn, FastAPI and the kernel "
                "add with more workers)."
            )
        return out

    def scale_notes(self) -> list[str]:
        runs = [r for rs in self.by.values() for r in rs]
        notes = [f"Measured: {self.results.git}."]
        cpus = psutil.cpu_count(logical=False)
        notes.append(
            f"Machine: {NCPU} CPUs ({cpus or '?'} physical cores); load average before "
            f"{self.results.load_before[0]:.2f}, after {self.results.load_after[0]:.2f} (1 min)."
        )
        notes.append(
            f"Each W: wrk -t{self.threads} -c{self.conns} keep-alive, {self.runs} round(s) x "
            f"{self.dur} s per variant, variants alternated (reversed order every other round) "
            f"after a {WARM_S} s warm-up each; median over the rounds; services with auth on, "
            "access log off, BLAS pinned to 1 thread; the floor is baseline_app.py's /floor "
            "(FastAPI parsing the same body + 1 Redis GET) under uvicorn with W workers; one "
            "local redis-server without persistence, flushed before each W."
        )
        notes.append(
            "Worker µs/req: user + sys CPU of the server's whole process tree (uvicorn's "
            "supervisor and its W workers, psutil) per 200 response; Redis µs/req: INFO cpu "
            "used_cpu_user + used_cpu_sys per 200 response. wrk's own CPU is in neither."
        )
        fb = [r.extra for r in runs if r.extra["variant"] == "feedback"]
        if fb:
            n = sum(e["meta_delta"].get("feedback", 0) for e in fb)
            u = sum(e["meta_delta"].get("version", 0) for e in fb)
            notes.append(
                f"/feedback: {n:,} feedbacks counted by the model, the version grew by {u:,} "
                "(the label of each was chosen against its prediction)."
            )
        spreads = []
        for (w, v), rs in self.by.items():
            vals = [r.rps for r in rs]
            if len(vals) > 1 and statistics.median(vals):
                spreads.append(((max(vals) - min(vals)) / statistics.median(vals), w, v))
        if spreads:
            s, w, v = max(spreads)
            notes.append(f"Largest spread of req/s between rounds: {s:.0%} ({v}, W={w}).")
        bad = []
        for (w, v), rs in sorted(self.by.items()):
            counts: dict[str, int] = {}
            for r in rs:
                for st, k in r.extra.get("statuses", {}).items():
                    counts[st] = counts.get(st, 0) + k
            sock = sum(r.socket_errors for r in rs)
            if counts or sock:
                bad.append(f"W={w} {v}: {counts or ''} socket errors {sock}")
        if bad:
            notes.append("Responses other than 200 (by status): " + "; ".join(bad) + ".")
        foreign = [r.cpu.get("foreign", 0.0) for r in runs]
        disturbed = [r for r in runs if r.cpu.get("foreign", 0.0) > DISTURBED]
        if foreign:
            notes.append(
                f"Other processes used {statistics.median(foreign):.0%} of the CPUs (median "
                f"over the runs), {max(foreign):.0%} at most."
            )
        if disturbed:
            which = ", ".join(
                f"W={r.extra['W']} {r.extra['variant']} round {r.extra['round'] + 1} "
                f"({r.cpu['foreign']:.0%})"
                for r in disturbed[:8]
            ) + (f" and {len(disturbed) - 8} more" if len(disturbed) > 8 else "")
            notes.append(
                f"WARNING: {len(disturbed)} of {len(runs)} runs were disturbed: other processes "
                f"used more than {DISTURBED:.0%} of the CPUs ({which}); their cells are "
                "marked †. Their req/s are lower bounds, their CPU per request upper bounds "
                "(sharing cores and caches costs CPU too), and the ratios noisy."
            )
        return notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2,4", help="the numbers of workers (default 1,2,4)")
    ap.add_argument("--repeat", type=int, default=None, help="rounds per W (default 2)")
    ap.add_argument("--seconds", type=int, default=None, help="seconds per run (default 5)")
    ap.add_argument("--quick", action="store_true", help="1 round x 3 s")
    ap.add_argument("--out", help="also write the table and notes here, raw runs to FILE.json")
    args = ap.parse_args(argv)
    args.repeat = args.repeat or (1 if args.quick else 2)
    args.seconds = args.seconds or (3 if args.quick else 5)
    ws = [int(v) for v in args.workers.split(",") if v.strip()]
    if not ws or min(ws) < 1:
        ap.error("--workers: positive integers, comma-separated")
    cmd = "deploy/bench/scale.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    s = Scale(args)
    t0 = time.time()
    try:
        s.prepare()
        for w in ws:
            s.run_w(w)
    finally:
        s.cleanup()
    elapsed = time.time() - t0
    text = (
        f"Perceptron service scale benchmark ({cmd}), {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{elapsed:.0f} s; {NCPU} CPUs\n\n"
        + s.table()
        + "\n\n"
        + "\n".join(f"- {n}" for n in s.targets() + s.scale_notes())
        + "\n"
    )
    sys.stdout.write(text)
    if args.out:
        Path(args.out).write_text(text)
        raw = {
            "command": cmd,
            "cpus": NCPU,
            "physical_cores": psutil.cpu_count(logical=False),
            "workers": ws,
            "repeat": args.repeat,
            "seconds": args.seconds,
            "wrk": {"threads": s.threads, "connections": s.conns},
            "startup_s": s.startup,
            "runs": s.raw,
        }
        Path(args.out + ".json").write_text(json.dumps(raw, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
