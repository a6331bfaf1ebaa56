"""The servers a benchmark starts on loopback and stops by PID: redis-server, the service, the
floor app (baseline_app.py) and VW's daemon. ``Servers`` keeps each one's log and runs the
service with a key (benchmark.py, scale.py, micro.py); ``redis_server``, ``serve``, ``ready``
and ``stop`` start and stop plain processes, the service without keys and its output dropped
(the other commands)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psutil
import redis

from harness.client import call, dumps, request
from harness.common import API_KEY, BLAS_ENV, HERE, PY, ROOT
from service.cli.loopback import free_port, redis_server_command, wait_until


def server_env(extra: dict[str, str]) -> dict[str, str]:
    """This environment without PERCEPTRON_ settings, BLAS pinned to one thread, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERCEPTRON_")}
    env.update(BLAS_ENV)
    env.update(extra)
    return env


def descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
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

    def kill_forking(self) -> None:
        """Stop VW's daemon: its parent forks a new child for each one that exits, and a child
        waiting in accept() ignores SIGTERM. Freeze the parent, note its children, then kill
        the parent and each child by PID."""
        if self.p.poll() is None:
            os.kill(self.pid, signal.SIGSTOP)
            kids = descendants(self.pid)
            os.kill(self.pid, signal.SIGKILL)
            self.p.wait(timeout=10)
            for k in kids:
                if alive(k):
                    os.kill(k, signal.SIGKILL)

    def tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


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


class Servers:
    """The processes one benchmark started, their logs in ``tmp``; one redis-server for all.

    ``tree`` is where the service's code is run from; ``settings`` are NAME=VALUE strings set
    as PERCEPTRON_NAME for every service started (the command's --setting)."""

    def __init__(self, tmp: Path, tree: Path = ROOT, settings: Sequence[str] = ()) -> None:
        self.tmp = tmp
        self.tree = tree
        self.settings = {f"PERCEPTRON_{k}": v for k, v in (a.split("=", 1) for a in settings)}
        self.procs: list[Proc] = []

    def pids(self) -> list[int]:
        """Every PID of every server running, children included (what CpuMeter counts as ours)."""
        return [p for proc in self.procs for p in proc.pids()]

    def start(self, name: str, cmd: Sequence[str], env: dict[str, str], cwd: Path = ROOT) -> Proc:
        proc = Proc(name, cmd, env, self.tmp, cwd)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc) -> None:
        proc.stop()
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_forking(self, proc: Proc) -> None:
        proc.kill_forking()
        self.stop(proc)

    def stop_all(self) -> list[tuple[str, Exception]]:
        """Stop every server, last started first; the errors met on the way."""
        errors = []
        for proc in reversed(list(self.procs)):
            try:
                self.stop(proc)
            except Exception as e:  # keep stopping the others
                errors.append((proc.name, e))
        return errors

    def start_redis(self) -> None:
        """redis-server on a free port without persistence; ``r`` a client of it."""
        self.redis_port = free_port()
        self.redis_proc = self.start(
            "redis",
            redis_server_command(
                self.redis_port,
                self.tmp,
                *("--daemonize", "no", "--maxmemory-policy", "noeviction"),
            ),
            dict(os.environ),
        )
        self.r = redis.Redis(port=self.redis_port, socket_timeout=30)
        wait_until(self.r.ping, 5, "redis-server")
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"

    def start_service(self, name: str, workers: int, extra_env: dict[str, str]) -> tuple[Proc, int]:
        """``perceptron serve --workers N`` (auth on, every other setting at its default but
        those given) once it answers /readyz."""
        port = free_port()
        env = server_env(
            {
                "PERCEPTRON_REDIS_URL": self.redis_url,
                "PERCEPTRON_API_KEYS": f"admin:{API_KEY}",
                # wrk's predictions never get their label: without this, a run of /predict at
                # d=784 fills the model's cap of pending bytes and is answered 429
                "PERCEPTRON_MAX_PENDING_BYTES": "0",
                **self.settings,
                **extra_env,
            }
        )
        cmd = [
            PY,
            "-m",
            "service.cli.main",
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

    def start_floor(self, name: str, workers: int) -> tuple[Proc, int]:
        """baseline_app.py under uvicorn (access log off) once its /floor answers."""
        port = free_port()
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
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        proc = self.start(name, cmd, env)
        wait_http(port, "POST", "/floor", dumps({"features": [0.5] * 100}), proc, workers)
        return proc, port

    def start_vw(self, vw_path: str, port: int) -> Proc:
        """VW's daemon (vw_daemon.py, pylibvw from ``vw_path``): 2 children, hinge loss."""
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
        return self.start("vw", cmd, server_env({"PYTHONPATH": vw_path}))


def wait_vw(proc: Proc, port: int) -> None:
    """Wait until VW's daemon has its 2 children and accepts a connection."""
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


def redis_server(folder: str | Path) -> tuple[subprocess.Popen[bytes], int]:
    """A redis-server on a free loopback port, without persistence, its files in ``folder``;
    stop it by its PID."""
    port = free_port()
    return subprocess.Popen(redis_server_command(port, folder), stdout=subprocess.DEVNULL), port


@contextmanager
def fresh_redis(cpu: int | None = None) -> Iterator[str]:
    """The URL of a redis-server started for the block (pinned to ``cpu``, if given), stopped
    by its PID after it."""
    proc, port = redis_server(tempfile.mkdtemp(prefix="pcp-child-"))
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    try:
        time.sleep(0.3)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop(proc)


def serve(
    tree: Path, redis_port: int, port: int, workers: int, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``perceptron serve`` of ``tree`` started on loopback ``port`` (auth off, no default
    model, its output dropped), on the Redis at ``redis_port``, with ``env`` on top; it
    answers once its /readyz does (``ready``). Stop it with ``stop``."""
    service = subprocess.Popen(
        [PY, "-m", "service.cli.main", "serve", "--port", str(port)] + ["--workers", str(workers)],
        cwd=tree,
        env={
            **os.environ,
            "PYTHONPATH": str(tree),
            "PERCEPTRON_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "PERCEPTRON_AUTH": "false",
            "PERCEPTRON_DEFAULT_MODEL": "false",
            **env,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return service


def ready(port: int) -> bool:
    """Whether the service on ``port`` answers /readyz with 200."""
    return bool(call(port, "GET", "/readyz")[0] == 200)


def stop(*procs: subprocess.Popen[bytes]) -> None:
    """Stop the processes started here, by their PIDs (one stopped with SIGSTOP too)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
