"""Benchmark of the perceptron service against a bare FastAPI floor, Redis costs and VW.

    .venv/bin/python deploy/bench/benchmark.py [--quick] [--out FILE]

Sets up everything itself: installs Debian's ``wrk`` (and ``redis-server``) with apt-get when
missing, starts its own redis-server on a free port with no persistence, the service
(``python -m service.cli serve --workers 2``), the baseline app (``baseline_app.py`` under
``uvicorn --workers 2``) and, when ``pip`` can fetch ``vowpalwabbit``, VW's daemon. Every
server binds 127.0.0.1 and is stopped by its PID at the end. Prints one markdown table (and a
few notes under it); ``--out FILE`` also writes them to FILE, the raw results to FILE.json.
See README.md beside this file for what each figure means.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LUA = HERE / "wrk_bodies.lua"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "perceptron-bench"
VW_DIR = CACHE / "vowpalwabbit"
PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1
BLAS_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
}
VW_QUOTED_RR = 55_000.0  # VW daemon, one example per request/response, this kind of machine
VW_QUOTED_STREAM = (140_000.0, 180_000.0)
BATCH = 1000  # examples per /learn/batch and /predict/batch body
# Per-request figures whose Redis work is also recorded: model, counter of requests served.
REDIS_WATCHED = {"predict100": ("p100", "predictions"), "learn100": ("l100", "learned")}
DISTURBED = 0.10  # a run during which other processes used more than this share of the CPUs
# The service runs with auth on (its default): one admin key, sent with every request (to the
# baseline too, so that both parse the same headers).
API_KEY = "bench-" + os.urandom(12).hex()


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# -- setting up ----------------------------------------------------------------------------


def ensure_debian_tool(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path:
        return path
    log(f"{binary} is missing: apt-get install {package}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-qq", package]
    if subprocess.run(cmd, env=env, capture_output=True, timeout=300).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=300)
        subprocess.run(cmd, env=env, capture_output=True, timeout=300, check=True)
    path = shutil.which(binary)
    if not path:
        raise SystemExit(f"could not install {package}")
    return path


def ensure_vw() -> str | None:
    """A directory holding pylibvw (from PyPI's vowpalwabbit), or None when pip fails."""
    if list(VW_DIR.glob("pylibvw*.so")):
        return str(VW_DIR)
    log(f"pip install --no-deps --target {VW_DIR} vowpalwabbit")
    VW_DIR.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        [PY, "-m", "pip", "install", "-q", "--no-deps", "--target", str(VW_DIR), "vowpalwabbit"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if r.returncode != 0 or not list(VW_DIR.glob("pylibvw*.so")):
        log(f"vowpalwabbit could not be installed: {r.stderr.strip()[-300:]}")
        return None
    return str(VW_DIR)


def vw_ships_executable() -> str:
    """What the installed vowpalwabbit distribution ships: is there a ``vw`` executable?"""
    found = [p for p in VW_DIR.rglob("*") if p.name == "vw" and p.is_file()]
    if not found:
        bindir = VW_DIR / "bin"
        found = list(bindir.glob("vw*")) if bindir.exists() else []
    if found:
        return f"ships {found[0].relative_to(VW_DIR)}"
    return "ships no vw executable (only the pylibvw extension)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def children_of(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = children_of(todo.pop())
        out += kids
        todo += kids
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


class Proc:
    """A server this benchmark started; stopped by its PID (and its children's PIDs)."""

    def __init__(
        self,
        name: str,
        cmd: Sequence[str],
        env: dict[str, str],
        logdir: Path,
        cwd: Path = ROOT,
    ) -> None:
        self.name = name
        self.log_path = logdir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.p = subprocess.Popen(
            list(cmd),
            env=env,
            cwd=str(cwd),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid = self.p.pid

    def workers(self) -> list[int]:
        """uvicorn's worker processes (children running the app), or the process itself."""
        kids = [k for k in descendants(self.pid) if "resource_tracker" not in cmdline(k)]
        return kids or [self.pid]

    def pids(self) -> list[int]:
        return [self.pid, *descendants(self.pid)]

    def stop(self, timeout: float = 15.0) -> None:
        if self.p.poll() is None:
            kids = descendants(self.pid)
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=5)
            deadline = time.time() + 5
            for k in kids:
                while alive(k) and time.time() < deadline:
                    time.sleep(0.05)
                if alive(k):
                    os.kill(k, signal.SIGKILL)
        self._log.close()

    def tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def server_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERCEPTRON_")}
    env.update(BLAS_ENV)
    env.update(extra)
    return env


def request(
    port: int, method: str, path: str, body: bytes | None = None, timeout: float = 60.0
) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def wait_http(port: int, method: str, path: str, body: bytes | None, proc: Proc, n: int) -> None:
    """Wait until ``n`` worker processes run and the endpoint answers 2xx."""
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.p.poll() is not None:
            raise SystemExit(f"{proc.name} exited:\n{proc.tail()}")
        try:
            status, _ = request(port, method, path, body, timeout=5)
            if 200 <= status < 300 and len(proc.workers()) >= n:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{proc.name} did not come up:\n{proc.tail()}")


# -- CPU accounting ------------------------------------------------------------------------


def proc_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, IndexError, ValueError):
        return 0


def machine_ticks() -> tuple[int, int]:
    """(busy in user/nice/system, total) ticks of all CPUs since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2], sum(v[:8])


class CpuMeter:
    """How busy the machine was during a span, and how much of it was not ours."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._pids = pids

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.busy0, _ = machine_ticks()
        self.tracked = self._pids()
        self.p0 = {p: proc_ticks(p) for p in self.tracked}
        t = os.times()
        self.self0 = t.user + t.system + t.children_user + t.children_system

    def stop(self) -> dict[str, float]:
        secs = time.perf_counter() - self.t0
        busy1, _ = machine_ticks()
        p1 = {p: proc_ticks(p) for p in self.tracked}
        t = os.times()
        self1 = t.user + t.system + t.children_user + t.children_system
        ours = sum(max(0, p1[p] - self.p0[p]) for p in self.tracked) / TICK + (self1 - self.self0)
        busy = (busy1 - self.busy0) / TICK
        cap = secs * NCPU
        return {
            "seconds": secs,
            "busy": busy / cap,
            "ours": min(ours, busy) / cap,
            "foreign": max(0.0, busy - ours) / cap,
            "per_pid": {p: (p1[p] - self.p0[p]) / TICK / secs for p in self.tracked},  # type: ignore[dict-item]
        }


def connections_by_pid(port: int) -> dict[int, int]:
    r = subprocess.run(
        ["ss", "-Htnp", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    counts: dict[int, int] = {}
    for pid in re.findall(r"pid=(\d+)", r.stdout):
        counts[int(pid)] = counts.get(int(pid), 0) + 1
    return counts


# -- data ----------------------------------------------------------------------------------


def r4(a: np.ndarray) -> list[float]:
    return [float(v) for v in np.round(a, 4)]


@dataclass
class Data:
    dense_x: np.ndarray  # (n, 100)
    dense_y: list[int]
    mnist_x: np.ndarray  # (n, 784) ints
    mnist_y: list[int]
    named_x: list[dict[str, float]]
    named_y: list[int]


def make_data(seed: int = 7) -> Data:
    rng = np.random.default_rng(seed)
    n = 16_000
    x = rng.uniform(-1, 1, size=(n, 100)).round(4)
    w = rng.normal(size=100)
    y = np.where(x @ w + 0.1 > 0, 1, -1)
    flip = rng.random(n) < 0.05
    y[flip] = -y[flip]
    m = 2_000
    mx = np.where(rng.random((m, 784)) < 0.2, rng.integers(1, 256, size=(m, 784)), 0)
    wm = rng.normal(size=(10, 784))
    my = np.argmax(mx @ wm.T, axis=1)
    flip = rng.random(m) < 0.05
    my[flip] = rng.integers(0, 10, size=int(flip.sum()))
    k = 2_000
    vocab = 200_000
    teacher = rng.normal(size=vocab)
    named_x, named_y = [], []
    for _ in range(k):
        ids = rng.choice(vocab, size=50, replace=False)
        vals = rng.uniform(0.1, 2.0, size=50).round(3)
        named_x.append({f"tok{i:06d}": float(v) for i, v in zip(ids, vals, strict=True)})
        s = float(teacher[ids] @ vals)
        named_y.append(1 if s > 0 else -1)
    return Data(x, [int(v) for v in y], mx, [int(v) for v in my], named_x, named_y)


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def write_lines(path: Path, lines: Sequence[bytes]) -> Path:
    with open(path, "wb") as f:
        for line in lines:
            f.write(line + b"\n")
    return path


# -- wrk -----------------------------------------------------------------------------------


@dataclass
class Run:
    key: str
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    status_errors: int
    socket_errors: int
    conns: dict[str, int]
    cpu: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.quick: bool = args.quick
        self.runs = 1 if self.quick else 3
        self.dur = 3 if self.quick else 5
        self.threads = 2
        self.conns = 64
        self.tmp = Path(tempfile.mkdtemp(prefix="perceptron-bench-"))
        self.procs: list[Proc] = []
        self.tree = ROOT  # where the service's code is run from
        self.results: dict[str, list[Run]] = {}
        self.notes: list[str] = []
        self.meter = CpuMeter(self._tracked)
        self.wrk = "wrk"
        self.extra: dict[str, Any] = {}
        self.fb_stats: list[dict[str, float]] = []

    def _tracked(self) -> list[int]:
        return [p for proc in self.procs for p in proc.pids()]

    # -- servers ---------------------------------------------------------------------------

    def start(self, name: str, cmd: Sequence[str], env: dict[str, str], cwd: Path = ROOT) -> Proc:
        proc = Proc(name, cmd, env, self.tmp, cwd)
        self.procs.append(proc)
        return proc

    def stop_forking(self, proc: Proc) -> None:
        """Stop VW's daemon: its parent forks a new child for each one that exits, and a child
        waiting in accept() ignores SIGTERM. Freeze the parent, note its children, then kill
        the parent and each child by PID."""
        if proc.p.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            kids = descendants(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)
            proc.p.wait(timeout=10)
            for k in kids:
                if alive(k):
                    os.kill(k, signal.SIGKILL)
        self.stop(proc)

    def stop(self, proc: Proc) -> None:
        proc.stop()
        if proc in self.procs:
            self.procs.remove(proc)

    def start_redis(self) -> None:
        self.redis_port = free_port()
        self.redis_proc = self.start(
            "redis",
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--dir",
                str(self.tmp),
                "--maxmemory-policy",
                "noeviction",
            ],
            dict(os.environ),
        )
        self.r = redis.Redis(port=self.redis_port, socket_timeout=30)
        for _ in range(100):
            try:
                if self.r.ping():
                    break
            except redis.ConnectionError:
                time.sleep(0.05)
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"

    def start_service(self, name: str, workers: int, extra_env: dict[str, str]) -> tuple[Proc, int]:
        port = free_port()
        env = server_env(
            {
                "PERCEPTRON_REDIS_URL": self.redis_url,
                "PERCEPTRON_LOG_LEVEL": "warning",
                "PERCEPTRON_API_KEYS": f"admin:{API_KEY}",
                **{f"PERCEPTRON_{k}": v for k, v in (a.split("=", 1) for a in self.args.setting)},
                **extra_env,
            }
        )
        cmd = [
            PY,
            "-m",
            "service.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
        ]
        proc = self.start(name, cmd, env, self.tree)
        wait_http(port, "GET", "/readyz", None, proc, workers)
        return proc, port

    def start_baseline(self) -> None:
        self.base_port = free_port()
        env = server_env({"BENCH_REDIS_URL": self.redis_url})
        cmd = [
            PY,
            "-m",
            "uvicorn",
            "baseline_app:app",
            "--app-dir",
            str(HERE),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.base_port),
            "--workers",
            "2",
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        self.base_proc = self.start("baseline", cmd, env)
        body = dumps({"features": [0.5] * 100})
        wait_http(self.base_port, "POST", "/floor", body, self.base_proc, 2)

    # -- service helpers -------------------------------------------------------------------

    def put_model(self, port: int, name: str, spec: dict[str, Any]) -> None:
        status, body = request(port, "PUT", f"/models/{name}", dumps(spec))
        if status not in (200, 201):
            raise SystemExit(f"PUT /models/{name}: {status} {body[:300]!r}")

    def meta(self, name: str) -> dict[str, int]:
        raw = self.r.hgetall(f"pcp:{{{name}}}:meta")
        out = {}
        for k, v in raw.items():
            try:
                out[k.decode()] = int(v)
            except ValueError:
                pass
        return out

    def predict_batches(
        self, port: int, model: str, rows: Sequence[Any], n: int, clients: int = 4
    ) -> list[dict[str, Any]]:
        """``n`` predictions through /predict/batch (bodies of 1000, ``clients`` at once)."""
        bodies = []
        for start in range(0, n, BATCH):
            feats = [rows[(start + i) % len(rows)] for i in range(min(BATCH, n - start))]
            bodies.append(dumps({"model": model, "features": feats}))

        def post(body: bytes) -> list[dict[str, Any]]:
            status, data = request(port, "POST", "/predict/batch", body, timeout=120)
            if status != 200:
                raise SystemExit(f"/predict/batch: {status} {data[:300]!r}")
            preds: list[dict[str, Any]] = orjson.loads(data)["predictions"]
            return preds

        with ThreadPoolExecutor(clients) as pool:
            return [p for chunk in pool.map(post, bodies) for p in chunk]

    def feedback_files(
        self, tag: str, preds: list[dict[str, Any]], against: Callable[[Any], Any]
    ) -> str:
        """Split feedback bodies (label chosen against each prediction) per wrk thread."""
        lines = [
            dumps({"prediction_id": p["prediction_id"], "label": against(p["label"])})
            for p in preds
        ]
        per = (len(lines) + self.threads - 1) // self.threads
        for t in range(self.threads):
            write_lines(self.tmp / f"{tag}.{t}", lines[t * per : (t + 1) * per])
        return str(self.tmp / f"{tag}.%d")

    # -- wrk runs --------------------------------------------------------------------------

    def wrk_run(
        self,
        key: str,
        port: int,
        path: str,
        body_file: str,
        mode: str = "cycle",
        dur: float | None = None,
        conns: int | None = None,
        workers: list[int] | None = None,
        record: bool = True,
    ) -> Run:
        dur = dur or self.dur
        conns = conns or self.conns
        cmd = [
            self.wrk,
            f"-t{self.threads}",
            f"-c{conns}",
            f"-d{dur}s",
            "--timeout",
            "10s",
            "-s",
            str(LUA),
            f"http://127.0.0.1:{port}{path}",
            "--",
            body_file,
            mode,
            API_KEY,
        ]
        self.meter.start()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(min(dur / 2, 2.0))
        by_pid = connections_by_pid(port)
        out, err = p.communicate(timeout=dur + 60)
        cpu = self.meter.stop()
        m = re.search(r"^BENCH (\{.*\})$", out, re.M)
        if p.returncode != 0 or not m:
            raise SystemExit(f"wrk failed ({p.returncode}): {out[-500:]} {err[-500:]}")
        s = json.loads(m.group(1))
        secs = s["duration_us"] / 1e6
        conns_seen = {}
        if workers:
            conns_seen = {str(w): by_pid.get(w, 0) for w in workers}
        run = Run(
            key=key,
            requests=s["requests"],
            seconds=secs,
            rps=(s["requests"] - sum(s.get("statuses", {}).values())) / secs,  # 200s only
            p50_ms=s["p50_us"] / 1000,
            p99_ms=s["p99_us"] / 1000,
            status_errors=s["status_errors"],
            socket_errors=s["connect_errors"]
            + s["read_errors"]
            + s["write_errors"]
            + s["timeouts"],
            conns=conns_seen,
            cpu={k: v for k, v in cpu.items() if k != "per_pid"},
            extra={"statuses": s.get("statuses", {})},
        )
        if workers:
            per_pid = cpu["per_pid"]
            run.cpu["workers"] = [round(float(per_pid.get(w, 0.0)), 2) for w in workers]
            # CPU the servers spent per 200 response: little affected by other processes.
            server = sum(per_pid.get(w, 0.0) for w in workers) + per_pid.get(self.redis_proc.pid, 0)
            ok = run.rps * secs
            run.extra["cpu_us"] = server * cpu["seconds"] / ok * 1e6 if ok else 0.0
        if record:
            self.results.setdefault(key, []).append(run)
        tag = "" if record else " (warm-up)"
        log(
            f"{key}{tag}: {run.rps:,.0f} req/s p50 {run.p50_ms:.2f} ms p99 {run.p99_ms:.2f} ms"
            f" non2xx {s.get('statuses') or 0} sockerr {run.socket_errors} conns {run.conns}"
            f" cpu busy {cpu['busy']:.0%} foreign {cpu['foreign']:.0%}"
        )
        time.sleep(0.3)
        return run

    # -- the figures -----------------------------------------------------------------------

    def wait_quiet(self, budget: float) -> None:
        """Wait (at most ``budget`` s) until other processes use < 15% of the CPUs."""
        self.quiet_wait = (0.0, None)
        if budget <= 0:
            return
        t0 = time.time()
        while True:
            b0, _ = machine_ticks()
            time.sleep(2.0)
            b1, _ = machine_ticks()
            busy = (b1 - b0) / TICK / (2.0 * NCPU)
            waited = time.time() - t0
            if busy < 0.15 or waited >= budget:
                self.quiet_wait = (waited, busy)
                log(f"waited {waited:.0f} s for a quiet machine: CPUs {busy:.0%} busy")
                return

    def git_state(self) -> str:
        def git(*a: str) -> str:
            r = subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True)
            return r.stdout.strip()

        head = git("rev-parse", "--short", "HEAD") or "?"
        if self.tree != ROOT:
            return f"service/ of commit {head} (git archive HEAD; --tree head)"
        dirty = [ln for ln in git("status", "--porcelain", "--", "service").splitlines() if ln]
        more = f" plus {len(dirty)} uncommitted changes in service/" if dirty else ""
        return f"the working tree's service/, at commit {head}{more}"

    def export_head(self) -> Path:
        """HEAD's service/ in a temporary directory, by git archive: the work tree is untouched."""
        dest = self.tmp / "tree"
        dest.mkdir()
        data = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "HEAD", "service"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=data, check=True, timeout=60)
        return dest

    def setup(self) -> None:
        self.wait_quiet(self.args.wait_quiet)
        self.load_before = os.getloadavg()
        self.tree = self.export_head() if self.args.tree == "head" else ROOT
        self.git = self.git_state()
        self.wrk = ensure_debian_tool("wrk", "wrk")
        ensure_debian_tool("redis-server", "redis-server")
        ensure_debian_tool("ss", "iproute2")
        log(f"temp dir {self.tmp}; load average {self.load_before}")
        self.start_redis()
        self.svc, self.port = self.start_service("service", 2, {})
        self.start_baseline()
        self.svc_workers = self.svc.workers()
        self.base_workers = self.base_proc.workers()
        log(f"service workers {self.svc_workers}, baseline workers {self.base_workers}")
        p = self.port
        for name in ("p100", "f100", "l100", "lb100", "lbp100", "mem100"):
            self.put_model(p, name, {"n_features": 100})
        for name in ("p784", "f784", "l784"):
            self.put_model(p, name, {"classes": list(range(10)), "n_features": 784})
        for name in ("pnamed", "lnamed"):
            self.put_model(p, name, {"hash_bits": 18})
        self.data = d = make_data()
        n = 2000
        dense = [r4(d.dense_x[i]) for i in range(n)]
        mnist = [[int(v) for v in d.mnist_x[i]] for i in range(len(d.mnist_x))]
        self.dense_rows, self.mnist_rows = dense, mnist
        t = self.tmp
        # One /predict body file and one /learn body file per kind of example.
        kinds = {
            "100": (dense, d.dense_y[:n]),
            "784": (mnist, d.mnist_y),
            "named": (d.named_x, d.named_y),
        }
        self.files: dict[str, Path] = {}
        for kind, (rows, labels) in kinds.items():
            p_name, l_name = "p" + kind, "l" + kind
            self.files[p_name] = write_lines(
                t / p_name, [dumps({"model": p_name, "features": f}) for f in rows]
            )
            self.files[l_name] = write_lines(
                t / l_name,
                [
                    dumps({"model": l_name, "features": f, "label": y})
                    for f, y in zip(rows, labels, strict=True)
                ],
            )
        # Every body must be accepted before it is fired 100,000 times.
        checks = [
            ("/predict", "p100"),
            ("/learn", "l100"),
            ("/predict", "p784"),
            ("/learn", "l784"),
            ("/predict", "pnamed"),
            ("/learn", "lnamed"),
        ]
        for path, key in checks:
            body = self.files[key].read_bytes().split(b"\n", 1)[0]
            status, out = request(p, "POST", path, body)
            if status != 200:
                raise SystemExit(f"{path} {key}: {status} {out[:300]!r}")
        for path, key in (("/floor", "p100"), ("/floor", "p784"), ("/floor_named", "pnamed")):
            body = self.files[key].read_bytes().split(b"\n", 1)[0]
            status, out = request(self.base_port, "POST", path, body)
            if status != 200:
                raise SystemExit(f"baseline {path} {key}: {status} {out[:300]!r}")

    def figure1(self) -> None:
        b, s = self.base_port, self.port
        bw, sw = self.base_workers, self.svc_workers
        f = {k: str(v) for k, v in self.files.items()}
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
        pool = self.predict_batches(s, "f100", self.dense_rows, 20_000)
        warm_ids = self.feedback_files("fb100_warm", pool, lambda lab: -lab)
        rate = 0.0
        for key, port, path, body, workers in plan:
            if key == "feedback100":
                run = self.wrk_run(
                    key, port, path, warm_ids, "once", dur=1, workers=workers, record=False
                )
                rate = (run.requests - run.status_errors) / run.seconds
            else:
                self.wrk_run(key, port, path, body, dur=1, workers=workers, record=False)
        # Fresh ids are made just before each /feedback run, for 1.6 x the fastest rate seen
        # so far (at least 2,000/s): running out would show as 404s, reported below.
        rate = max(rate, 2000.0)
        for r in range(self.runs):
            log(f"round {r + 1}/{self.runs}")
            for key, port, path, body, workers in plan:
                if key == "feedback100":
                    need = int(rate * self.dur * 1.6) + 3000
                    preds = self.predict_batches(s, "f100", self.dense_rows, need)
                    ids = self.feedback_files(f"fb100_{r}", preds, lambda lab: -lab)
                    log(f"made {need:,} fresh prediction ids")
                    time.sleep(0.5)
                    before = self.redis_before("f100")
                    run = self.wrk_run(key, port, path, ids, "once", workers=workers)
                    rate = max(rate, run.rps)
                    stats = self.redis_after("f100", before)
                    run.extra.update(stats)
                    self.fb_stats.append(stats)
                    if run.status_errors:
                        self.notes.append(
                            f"/feedback d=100 round {r + 1}: {run.status_errors} non-2xx "
                            "responses (ids ran out?)"
                        )
                elif key in REDIS_WATCHED:
                    model, counter = REDIS_WATCHED[key]
                    before = self.redis_before(model)
                    run = self.wrk_run(key, port, path, body, workers=workers)
                    run.extra.update(self.redis_after(model, before, counter))
                else:
                    self.wrk_run(key, port, path, body, workers=workers)

    def redis_before(self, model: str) -> dict[str, Any]:
        self.r.config_resetstat()
        cpu = self.r.info("cpu")
        return {"meta": self.meta(model), "cpu": cpu}

    def redis_after(
        self, model: str, before: dict[str, Any], counter: str = "feedback"
    ) -> dict[str, float]:
        stats = self.r.info("commandstats")
        cpu = self.r.info("cpu")
        meta = self.meta(model)
        fb = meta.get(counter, 0) - before["meta"].get(counter, 0)
        upd = meta.get("version", 0) - before["meta"].get("version", 0)
        # Commands run inside a script are counted on their own too (and inside EVALSHA's
        # usec): the total counts top-level commands only.
        nested = {
            "set",
            "get",
            "hget",
            "hmget",
            "hset",
            "hincrby",
            "setbit",
            "hdel",
            "lpush",
            "ltrim",
            "rpush",
            "llen",
            "lrange",
            "del",
            "exists",
            "config|resetstat",
        }
        ev_calls = ev_usec = total = 0.0
        for name, st in stats.items():
            cmd = name.removeprefix("cmdstat_")
            if cmd in ("evalsha", "eval"):
                ev_calls += st["calls"]
                ev_usec += st["usec"]
            if cmd not in nested:
                total += st["usec"]
        main = ("used_cpu_sys_main_thread", "used_cpu_user_main_thread")
        cpu_s = sum(float(cpu[k]) - float(before["cpu"][k]) for k in main)
        lrange = stats.get("cmdstat_lrange", {}).get("calls", 0)
        return {
            "feedbacks": fb,
            "updates": upd,
            "lrange_calls": lrange,
            "evalsha_calls": ev_calls,
            "evalsha_calls_per_feedback": ev_calls / fb if fb else 0.0,
            "evalsha_usec_per_call": ev_usec / ev_calls if ev_calls else 0.0,
            "evalsha_usec_per_feedback": ev_usec / fb if fb else 0.0,
            "total_usec_per_feedback": total / fb if fb else 0.0,
            "cpu_usec_per_feedback": cpu_s * 1e6 / fb if fb else 0.0,
        }

    def figure2_784(self) -> None:
        s = self.port
        log("feedback d=784 x 10 classes")
        pool = self.predict_batches(s, "f784", self.mnist_rows, 6_000)
        warm = self.feedback_files("fb784_warm", pool, lambda lab: (lab + 1) % 10)
        run = self.wrk_run(
            "feedback784",
            s,
            "/feedback",
            warm,
            "once",
            dur=1,
            workers=self.svc_workers,
            record=False,
        )
        rate = max(1000.0, (run.requests - run.status_errors) / run.seconds)
        need = int(rate * self.dur * 1.6) + 2000
        preds = self.predict_batches(s, "f784", self.mnist_rows, need)
        ids = self.feedback_files("fb784", preds, lambda lab: (lab + 1) % 10)
        before = self.redis_before("f784")
        run = self.wrk_run("feedback784", s, "/feedback", ids, "once", workers=self.svc_workers)
        stats = self.redis_after("f784", before)
        run.extra.update(stats)
        self.fb784_stats = stats
        if run.status_errors:
            self.notes.append(f"/feedback 784x10: {run.status_errors} non-2xx responses")

    def figure3(self) -> None:
        d = self.data
        bodies, packed = [], []
        for b in range(8):
            lo = b * BATCH
            feats = [r4(d.dense_x[lo + i]) for i in range(BATCH)]
            labels = d.dense_y[lo : lo + BATCH]
            bodies.append(dumps({"model": "lb100", "features": feats, "labels": labels}))
            values = base64.b64encode(np.array(feats, dtype="<f8").tobytes()).decode()
            packed.append(dumps({"model": "lbp100", "packed_features": values, "labels": labels}))
        path = str(write_lines(self.tmp / "lb100", bodies))
        packed_path = str(write_lines(self.tmp / "lbp100", packed))
        self.lb_body_kib = len(bodies[0]) / 1024
        self.lbp_body_kib = len(packed[0]) / 1024
        log("learn/batch: 4 connections, 1000 examples per request, JSON and packed in turn")
        forms = (("learn_batch", "lb100", path), ("learn_batch_packed", "lbp100", packed_path))
        for key, _, body_path in forms:
            self.wrk_run(
                key,
                self.port,
                "/learn/batch",
                body_path,
                dur=1,
                conns=4,
                workers=self.svc_workers,
                record=False,
            )
        m0 = self.meta("lb100")
        for _ in range(self.runs):
            for key, model, body_path in forms:
                before = self.redis_before(model)
                run = self.wrk_run(
                    key, self.port, "/learn/batch", body_path, conns=4, workers=self.svc_workers
                )
                run.extra.update(self.redis_after(model, before, "learned"))
        m1 = self.meta("lb100")
        learned = m1.get("learned", 0) - m0.get("learned", 0)
        self.lb_update_rate = (m1.get("version", 0) - m0.get("version", 0)) / max(1, learned)

    def figure3_vw(self) -> None:
        vw_path = ensure_vw()
        if vw_path is None:
            self.vw_status = "vowpalwabbit could not be installed from PyPI: VW not measured"
            return
        self.vw_status = "PyPI vowpalwabbit " + vw_ships_executable()
        d = self.data
        lines = []
        for i in range(2000):
            feats = " ".join(f"{j}:{v:.4f}" for j, v in enumerate(d.dense_x[i]))
            lines.append(f"{d.dense_y[i]} |f {feats}".encode())
        rr_file = write_lines(self.tmp / "vw_rr.txt", lines)
        n_stream = 100_000 if self.quick else 200_000
        stream_file = write_lines(
            self.tmp / "vw_stream.txt", [lines[i % len(lines)] for i in range(n_stream)]
        )
        port = free_port()
        env = server_env({"PYTHONPATH": vw_path})
        cmd = [
            PY,
            str(HERE / "vw_daemon.py"),
            "--daemon",
            "--foreground",
            "--port",
            str(port),
            "--num_children",
            "2",
            "--quiet",
            "--binary",
            "--loss_function",
            "hinge",
        ]
        proc = self.start("vw", cmd, env)
        try:
            deadline = time.time() + 30
            while time.time() < deadline:
                if proc.p.poll() is not None:
                    raise RuntimeError(proc.tail())
                if len(proc.workers()) >= 2:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=1).close()
                        break
                    except OSError:
                        pass
                time.sleep(0.1)
            time.sleep(0.5)  # the probe connection ends a child; the parent forks another
            client = [PY, str(HERE / "vw_client.py")]
            for _ in range(self.runs):
                self.meter.start()
                out = subprocess.run(
                    client + ["stream", "127.0.0.1", str(port), str(stream_file)],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                cpu = self.meter.stop()
                st = json.loads(out.stdout)
                self._vw_run("vw_stream", st["per_s"], st["seconds"], cpu)
                time.sleep(0.5)
                self.meter.start()
                ps = [
                    subprocess.Popen(
                        client + ["rr", "127.0.0.1", str(port), str(rr_file), str(self.dur)],
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                    for _ in range(2)
                ]
                outs = [json.loads(p.communicate(timeout=self.dur + 60)[0]) for p in ps]
                cpu = self.meter.stop()
                run = self._vw_run("vw_rr", sum(o["per_s"] for o in outs), self.dur, cpu)
                run.p50_ms = statistics.mean(o["p50_us"] for o in outs) / 1000
                run.p99_ms = max(o["p99_us"] for o in outs) / 1000
                time.sleep(0.5)
        except Exception as e:  # VW is a comparison, not the subject: report and go on
            self.vw_status += f"; the measurement failed: {e!r:.200}"
        finally:
            self.stop_forking(proc)

    def _vw_run(self, key: str, per_s: float, secs: float, cpu: dict[str, Any]) -> Run:
        run = Run(
            key,
            int(per_s * secs),
            secs,
            per_s,
            0.0,
            0.0,
            0,
            0,
            {},
            {k: v for k, v in cpu.items() if k != "per_pid"},
        )
        self.results.setdefault(key, []).append(run)
        log(f"{key}: {per_s:,.0f} examples/s, cpu busy {cpu['busy']:.0%}")
        return run

    def figure4(self) -> None:
        # Bytes per pending prediction, on the main service.
        time.sleep(1.0)
        before = int(self.r.info("memory")["used_memory"])
        n = 20_000
        self.predict_batches(self.port, "mem100", self.dense_rows, n, clients=1)
        time.sleep(1.0)
        after = int(self.r.info("memory")["used_memory"])
        key = next(self.r.scan_iter(match="pcp:{mem100}:p:*", count=1000))
        self.pending = {
            "per_prediction": (after - before) / n,
            "record_bytes": int(self.r.strlen(key)),
            "key_memory_usage": int(self.r.memory_usage(key, samples=0) or 0),
        }
        log(f"pending predictions: {self.pending}")
        # Bytes per weight of a 2^20-weight named-feature model, log compacted into a snapshot.
        every = 50
        proc, port = self.start_service("service-mem", 1, {"PERCEPTRON_COMPACT_EVERY": str(every)})
        try:
            self.put_model(port, "mem20", {"hash_bits": 20})
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
                m = self.meta("mem20")
                llen = int(self.r.llen("pcp:{mem20}:log"))
                if m.get("snapv", 0) > 0 and llen < every:
                    break
                request(port, "POST", "/learn/batch", nudge, timeout=60)
            m = self.meta("mem20")
            keys = list(self.r.scan_iter(match="pcp:{mem20}:*", count=1000))
            sizes = {k.decode(): int(self.r.memory_usage(k, samples=0) or 0) for k in keys}
            total = sum(sizes.values())
            self.weights_mem = {
                "bytes_per_weight": total / 2**20,
                "total_mib": total / 2**20,
                "keys": sizes,
                "version": m.get("version", 0),
                "snapv": m.get("snapv", 0),
                "log_entries": int(self.r.llen("pcp:{mem20}:log")),
                "learned": m.get("learned", 0),
            }
            log(f"2^20-weight model: {self.weights_mem}")
        finally:
            self.stop(proc)

    # -- output ----------------------------------------------------------------------------

    def table(self) -> str:
        R = self.results

        def vals(key: str, attr: str) -> list[float]:
            return [float(getattr(r, attr)) for r in R.get(key, [])]

        def cell(v: list[float], fmt: str, key: str | None = None) -> str:
            if not v:
                return "n/a"
            med = statistics.median(v)
            mark = "†" if key and self.disturbed(key) else ""
            if len(v) == 1:
                return fmt.format(med) + mark
            return f"{fmt.format(med)} ({fmt.format(min(v))}–{fmt.format(max(v))}){mark}"

        def med(v: list[float]) -> float:
            return statistics.median(v) if v else float("nan")

        rows: list[list[str]] = []

        def add(
            fig: str,
            what: str,
            ours: str,
            base_name: str,
            base: str,
            ratio: float | None,
            target: str,
            ok: bool | None,
        ) -> None:
            r = "n/a" if ratio is None or ratio != ratio else f"{ratio:.2f}"
            mark = "" if ok is None else ("yes" if ok else "**no**")
            rows.append([fig, what, ours, base_name, base, r, target, mark])

        def per_request(
            fig: str, label: str, key: str, base: str, base_label: str, target: float | None
        ) -> None:
            if key not in R:
                return
            o, b = vals(key, "rps"), vals(base, "rps")
            ratio = med(o) / med(b) if b else None
            ok = None if target is None or ratio is None else ratio >= target
            tgt = f"≥ {target:.2f} × baseline" if target is not None else ""
            add(
                fig,
                f"{label}: req/s",
                cell(o, "{:,.0f}", key),
                base_label,
                cell(b, "{:,.0f}", base),
                ratio,
                tgt,
                ok,
            )
            o = [r.extra.get("cpu_us", 0.0) for r in R.get(key, [])]
            b = [r.extra.get("cpu_us", 0.0) for r in R.get(base, [])]
            add(
                fig,
                f"{label}: server CPU µs per request (workers + Redis)",
                cell(o, "{:,.0f}"),
                base_label,
                cell(b, "{:,.0f}"),
                med(o) / med(b) if b and med(b) else None,
                "",
                None,
            )
            for q, attr in (("p50", "p50_ms"), ("p99", "p99_ms")):
                o, b = vals(key, attr), vals(base, attr)
                ratio = med(o) / med(b) if b else None
                add(
                    fig,
                    f"{label}: {q} latency ms",
                    cell(o, "{:.2f}", key),
                    base_label,
                    cell(b, "{:.2f}", base),
                    ratio,
                    "",
                    None,
                )

        floor = "bare FastAPI + 1 Redis GET"
        per_request(
            "1",
            "floor: bare FastAPI + 1 Redis GET, d=100 body",
            "floor100",
            "bare100",
            "same app, no Redis call",
            None,
        )
        per_request("1", "/predict dense d=100 binary", "predict100", "floor100", floor, 0.85)
        per_request(
            "1",
            "/feedback dense d=100 binary (every one updates)",
            "feedback100",
            "floor100",
            floor,
            0.75,
        )
        per_request("1", "/learn dense d=100 binary", "learn100", "floor100", floor, None)
        f784 = floor + ", same 784-int body"
        per_request("1", "/predict dense d=784, 10 classes", "predict784", "floor784", f784, None)
        per_request("1", "/learn dense d=784, 10 classes", "learn784", "floor784", f784, None)
        per_request(
            "1",
            "/feedback dense d=784, 10 classes (1 run, every one updates)",
            "feedback784",
            "floor784",
            f784,
            None,
        )
        fnamed = "bare FastAPI (dict[str, float]) + 1 Redis GET, same body"
        per_request(
            "1", "/predict named, 50 of 2^18 buckets", "predict_named", "floor_named", fnamed, None
        )
        per_request(
            "1", "/learn named, 50 of 2^18 buckets", "learn_named", "floor_named", fnamed, None
        )

        fb = self.fb_stats
        s7 = getattr(self, "fb784_stats", None)
        metrics = (
            ("EVALSHA calls per feedback", "evalsha_calls_per_feedback", None, "{:.2f}"),
            ("EVALSHA usec per call", "evalsha_usec_per_call", 20.0, "{:.1f}"),
            ("Redis command usec per feedback (top-level total)", "total_usec_per_feedback", 20.0,
             "{:.1f}"),
            ("Redis main-thread CPU usec per feedback (incl. network I/O)",
             "cpu_usec_per_feedback", None, "{:.1f}"),
        )  # fmt: skip
        for label, k, target, fmt in metrics if fb else ():
            v = [st[k] for st in fb]
            if target is None:
                add("2", f"/feedback d=100 binary: {label}", cell(v, fmt), "", "", None, "", None)
            else:
                add(
                    "2",
                    f"/feedback d=100 binary: {label}",
                    cell(v, fmt),
                    "target",
                    f"{target:g}",
                    med(v) / target,
                    f"≤ {target:g} µs",
                    med(v) <= target,
                )
        for label, k, target, fmt in metrics if fb and s7 else ():
            base = med([st[k] for st in fb])
            ratio = s7[k] / base if base else None
            limit = 4 * (target or 0)
            add(
                "2",
                f"/feedback d=784 x 10 classes: {label}",
                fmt.format(s7[k]),
                "same figure, d=100 binary",
                fmt.format(base),
                ratio,
                f"≤ 4 × d=100 (≤ {limit:g} µs)" if target else "",
                None if not target else s7[k] <= limit,
            )

        for key, what in (("predict100", "/predict"), ("learn100", "/learn")):
            st = [r.extra for r in R.get(key, []) if r.extra.get("feedbacks")]
            if not st:
                continue
            calls = [e["evalsha_calls"] / e["feedbacks"] for e in st]
            usec = [e["total_usec_per_feedback"] for e in st]
            cpu_ = [e["cpu_usec_per_feedback"] for e in st]
            add(
                "2",
                f"d=100 binary: EVALSHA calls per {what} served",
                cell(calls, "{:.2f}"),
                "one script per request",
                "1",
                med(calls),
                "",
                None,
            )
            add(
                "2",
                f"d=100 binary: Redis command usec per {what} (top-level total)",
                cell(usec, "{:.1f}"),
                "",
                "",
                None,
                "",
                None,
            )
            add(
                "2",
                f"d=100 binary: Redis main-thread CPU usec per {what}",
                cell(cpu_, "{:.1f}"),
                "",
                "",
                None,
                "",
                None,
            )

        if "learn_batch" in R:
            ex = [r.rps * BATCH for r in R["learn_batch"]]
            m = med(ex)
            add(
                "3",
                "/learn/batch d=100, 1000 per request, 4 connections: examples/s",
                cell(ex, "{:,.0f}"),
                "VW daemon req/resp, quoted",
                f"{VW_QUOTED_RR:,.0f}",
                m / VW_QUOTED_RR,
                "≥ 55,000 /s",
                m >= VW_QUOTED_RR,
            )
            lo, hi = VW_QUOTED_STREAM
            add(
                "3",
                "  same figure",
                cell(ex, "{:,.0f}"),
                "VW daemon streaming, quoted",
                f"{lo:,.0f}–{hi:,.0f}",
                m / lo,
                f"stretch: ≥ {lo:,.0f} /s",
                m >= lo,
            )
            for key, name in (
                (
                    "vw_rr",
                    "VW daemon (pylibvw), measured: one example per "
                    "request/response, 2 connections",
                ),
                ("vw_stream", "VW daemon (pylibvw), measured: streaming, 1 connection"),
            ):
                if key in R:
                    v = vals(key, "rps")
                    add(
                        "3",
                        "  same figure",
                        cell(ex, "{:,.0f}"),
                        name,
                        cell(v, "{:,.0f}"),
                        m / med(v),
                        "",
                        None,
                    )
            st = [r.extra for r in R["learn_batch"] if r.extra.get("feedbacks")]
            if st:
                calls = [e["evalsha_calls"] / e["feedbacks"] * BATCH for e in st]
                cpu_ = [e["cpu_usec_per_feedback"] for e in st]
                add(
                    "3",
                    "/learn/batch: EVALSHA calls per 1000-example request",
                    cell(calls, "{:.2f}"),
                    "one script per request",
                    "1",
                    med(calls),
                    "",
                    None,
                )
                add(
                    "3",
                    "/learn/batch: Redis main-thread CPU usec per example",
                    cell(cpu_, "{:.2f}"),
                    "",
                    "",
                    None,
                    "",
                    None,
                )
            lat = vals("learn_batch", "p50_ms")
            add(
                "3",
                "/learn/batch: p50 latency of one 1000-example request, ms",
                cell(lat, "{:.1f}"),
                "",
                "",
                None,
                "",
                None,
            )
        if "learn_batch_packed" in R and "learn_batch" in R:
            ex = [r.rps * BATCH for r in R["learn_batch"]]
            pk = [r.rps * BATCH for r in R["learn_batch_packed"]]
            lo, hi = VW_QUOTED_STREAM
            name = (
                "/learn/batch d=100, packed_features (base64 float64), 1000 per request: examples/s"
            )
            add(
                "3",
                name,
                cell(pk, "{:,.0f}"),
                "the same, JSON features",
                cell(ex, "{:,.0f}"),
                med(pk) / med(ex),
                "",
                None,
            )
            add(
                "3",
                "  same figure",
                cell(pk, "{:,.0f}"),
                "VW daemon streaming, quoted",
                f"{lo:,.0f}–{hi:,.0f}",
                med(pk) / lo,
                f"stretch: ≥ {lo:,.0f} /s",
                med(pk) >= lo,
            )
            if "vw_stream" in R:
                v = vals("vw_stream", "rps")
                add(
                    "3",
                    "  same figure",
                    cell(pk, "{:,.0f}"),
                    "VW daemon (pylibvw), measured: streaming, 1 connection",
                    cell(v, "{:,.0f}"),
                    med(pk) / med(v),
                    "",
                    None,
                )
            lat = vals("learn_batch_packed", "p50_ms")
            add(
                "3",
                "/learn/batch packed: p50 latency of one 1000-example request, ms",
                cell(lat, "{:.1f}"),
                "the same, JSON features",
                cell(vals("learn_batch", "p50_ms"), "{:.1f}"),
                med(lat) / med(vals("learn_batch", "p50_ms")),
                "",
                None,
            )

        wm = getattr(self, "weights_mem", None)
        if wm:
            bpw = wm["bytes_per_weight"]
            add(
                "4",
                "Redis bytes per weight, 2^20-weight named model (all its keys)",
                f"{bpw:.2f} ({wm['total_mib']:.1f} MiB)",
                "float64 weight",
                "8",
                bpw / 8,
                "≤ 32 B (≤ 32 MiB)",
                bpw <= 32,
            )
        pm = getattr(self, "pending", None)
        if pm:
            add(
                "4",
                "Redis bytes per pending prediction, d=100 (used_memory delta / 20,000)",
                f"{pm['per_prediction']:,.0f}",
                "the pending record's own bytes (STRLEN)",
                f"{pm['record_bytes']:,}",
                pm["per_prediction"] / pm["record_bytes"],
                "",
                None,
            )

        head = [
            "Fig",
            "Figure",
            "Measured: median (min–max)",
            "Baseline",
            "Baseline: median (min–max)",
            "Ratio",
            "Target",
            "Met",
        ]
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)

    def notes_text(self) -> list[str]:
        R = self.results
        notes = [f"Measured: {getattr(self, 'git', '?')}."]
        mode = "quick: 1 run x 3 s" if self.quick else "3 runs x 5 s"
        notes.append(
            f"Per-request figures: wrk -t{self.threads} -c{self.conns} keep-alive, {mode} "
            "per figure, alternated with the baselines (after a 1 s warm-up each); the service "
            "and the baseline each run 2 uvicorn workers (access log off), BLAS pinned to 1 "
            "thread, Redis local without persistence; median (min–max) over the runs."
        )
        fb = self.fb_stats
        if fb:
            n = sum(s["feedbacks"] for s in fb)
            u = sum(s["updates"] for s in fb)
            notes.append(
                f"/feedback d=100: {n:,.0f} feedbacks measured, {u:,.0f} updated the weights "
                f"(version +{u:,.0f}); labels were chosen against each prediction."
            )
        s7 = getattr(self, "fb784_stats", None)
        if s7:
            notes.append(
                f"/feedback 784x10: {s7['feedbacks']:,.0f} feedbacks, {s7['updates']:,.0f} "
                "updates. EVALSHA usec include the compaction scripts (SYNC, COMPACT) run "
                "meanwhile; 'top-level total' adds every command not run inside a script."
            )
        spread = []
        for key, runs in R.items():
            for r in runs:
                if r.conns and len(r.conns) == 2 and sum(r.conns.values()):
                    c = list(r.conns.values())
                    spread.append((key, c, r.cpu.get("workers")))
        if spread:
            uneven = [
                (k, c, w)
                for k, c, w in spread
                if max(c) > 0.7 * sum(c) or (w and max(w) > 2.5 * max(min(w), 0.01))
            ]
            worst = max(spread, key=lambda s: max(s[1]) / max(1, sum(s[1])))
            notes.append(
                "uvicorn --workers 2 leaves the kernel to spread connections between workers "
                "(no per-worker request count in responses); the keep-alive connections held "
                "by each worker PID (ss, mid-run) and each worker's CPU use were recorded: "
                f"the least even run was {worst[0]} with {worst[1]} connections and CPU "
                f"{worst[2]} cores; {len(uneven)} of {len(spread)} runs were uneven "
                "(> 70% of connections or > 2.5x the CPU on one worker)."
            )
        lb = getattr(self, "lb_update_rate", None)
        if lb is not None:
            notes.append(
                f"/learn/batch: wrk -c4 posting 8 pre-serialized bodies in turn "
                f"({self.lb_body_kib:.0f} KiB each, 1000 examples, 4-decimal floats, labels "
                f"from a noisy linear teacher); {lb:.0%} of the examples updated the weights. "
                f"Packed: the same examples as packed_features ({self.lbp_body_kib:.0f} KiB "
                "each), on a model of their own, each run right after its JSON run."
            )
        if hasattr(self, "vw_status"):
            notes.append(
                self.vw_status + ". Its daemon loop runs through pylibvw (vw_daemon.py: "
                "--daemon --num_children 2 --binary --loss_function hinge, i.e. hinge-loss SGD, "
                "not a perceptron); each child has its own copy of the model; the clients are "
                "Python (vw_client.py), one process per connection."
            )
        wm = getattr(self, "weights_mem", None)
        if wm:
            keys = ", ".join(
                f"{k.split(':', 2)[-1]} {v / 1024:,.0f} KiB" for k, v in sorted(wm["keys"].items())
            )
            notes.append(
                f"2^20-weight model: PERCEPTRON_COMPACT_EVERY=50, {wm['learned']:,} examples "
                f"learned, version {wm['version']}, snapshot at {wm['snapv']}, "
                f"{wm['log_entries']} log entries left; MEMORY USAGE (SAMPLES 0): {keys}."
            )
        pm = getattr(self, "pending", None)
        if pm:
            notes.append(
                f"One pending key's MEMORY USAGE is {pm['key_memory_usage']:,} bytes; the "
                "used_memory delta adds the expiry entry and allocator rounding."
            )
        runs = [r for rs in R.values() for r in rs]
        if runs:
            foreign = [r.cpu.get("foreign", 0.0) for r in runs]
            busy = [r.cpu.get("busy", 0.0) for r in runs]
            disturbed = [r.key for r in runs if r.cpu.get("foreign", 0.0) > DISTURBED]
            la0, la1 = self.load_before, self.load_after
            verdict = (
                f"LOOKED DISTURBED: {len(disturbed)} of {len(runs)} runs had > 10% of the CPUs "
                "used by other processes (their cells are marked †)"
                if disturbed
                else "looked undisturbed"
            )
            waited, busy0 = getattr(self, "quiet_wait", (0.0, None))
            if busy0 is not None:
                notes.append(
                    f"--wait-quiet: waited {waited:.0f} s; the CPUs were then {busy0:.0%} busy."
                )
            notes.append(
                f"Machine: {NCPU} CPUs; load average before {la0[0]:.2f}, after {la1[0]:.2f} "
                f"(1 min). During the runs the CPUs were {statistics.median(busy):.0%} busy "
                f"(median); processes other than this benchmark's used "
                f"{statistics.median(foreign):.0%} median, {max(foreign):.0%} at most: the run "
                f"{verdict}. Other processes on this machine disturb the figures."
            )
        bad = []
        for key, rs in R.items():
            counts: dict[str, int] = {}
            for r in rs:
                for st, k in r.extra.get("statuses", {}).items():
                    counts[st] = counts.get(st, 0) + k
            if counts:
                total = sum(r.requests for r in rs)
                bad.append(f"{key}: {counts} of {total:,}")
        if bad:
            notes.append("Responses other than 200 (by status): " + "; ".join(bad) + ".")
        return notes + self.notes

    def disturbed(self, key: str) -> bool:
        return any(r.cpu.get("foreign", 0.0) > DISTURBED for r in self.results.get(key, []))

    def cleanup(self) -> None:
        for proc in reversed(list(self.procs)):
            try:
                self.stop(proc)
            except Exception as e:  # keep stopping the others
                log(f"stopping {proc.name}: {e!r}")
        shutil.rmtree(self.tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 run x 3 s per figure (~2 min)")
    ap.add_argument("--out", help="also write the table and notes (markdown) here")
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="first wait up to S seconds for other processes to leave the CPUs (default 0)",
    )
    ap.add_argument(
        "--tree",
        choices=("work", "head"),
        default="work",
        help="measure the working tree's service/ (default) or HEAD's (git archive to a temp dir)",
    )
    ap.add_argument(
        "--figures", default="1,2,3,4", help="which figures to measure (default 1,2,3,4; 2 needs 1)"
    )
    ap.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a PERCEPTRON_ setting for the service under test, e.g. ONE_WRITER=true (repeatable)",
    )
    args = ap.parse_args(argv)
    figs = set(args.figures.split(","))
    bench = Bench(args)
    t0 = time.time()
    try:
        bench.setup()
        if "1" in figs or "2" in figs:
            bench.figure1()
        if "2" in figs:
            bench.figure2_784()
        if "3" in figs:
            bench.figure3()
            bench.figure3_vw()
        if "4" in figs:
            bench.figure4()
    finally:
        bench.load_after = os.getloadavg()
        bench.cleanup()
    elapsed = time.time() - t0
    cmd = "deploy/bench/benchmark.py" + (" --quick" if args.quick else "")
    text = (
        f"Perceptron service benchmark ({cmd}), {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{elapsed:.0f} s\n\n"
        + bench.table()
        + "\n\n"
        + "\n".join(f"- {n}" for n in bench.notes_text())
        + "\n"
    )
    sys.stdout.write(text)
    if args.out:
        Path(args.out).write_text(text)
        raw = {k: [r.__dict__ for r in v] for k, v in bench.results.items()}
        extra = {
            k: getattr(bench, k, None)
            for k in ("fb_stats", "fb784_stats", "pending", "weights_mem", "vw_status")
        }
        Path(args.out + ".json").write_text(
            json.dumps({"runs": raw, **extra}, indent=1, default=str)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
