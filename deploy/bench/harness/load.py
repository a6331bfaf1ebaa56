"""The load: wrk with wrk_bodies.lua, posting bodies read from a file, one per line. ``Wrk``
metered and with the benchmark's key (benchmark.py, scale.py); ``start_wrk`` and
``wrk_summary`` plain, keyless, several at once (the other commands)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.common import API_KEY, LUA, log
from harness.cpu import CpuMeter
from harness.results import Run


def connections_by_pid(port: int) -> dict[int, int]:
    """Established TCP connections to ``port`` held by each PID (ss)."""
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


@dataclass
class Wrk:
    """wrk -t``threads`` keep-alive, metered by ``meter``; ``redis_pid`` is counted among the
    servers' CPU."""

    binary: str
    meter: CpuMeter
    redis_pid: int
    threads: int = 2

    def run(
        self,
        key: str,
        port: int,
        path: str,
        body_file: str,
        mode: str,
        dur: float,
        conns: int,
        workers: list[int] | None = None,
        warmup: bool = False,
    ) -> Run:
        """One run of ``dur`` s: ``mode`` "cycle" sends the bodies in turn, "once" each once
        (``body_file`` then has ``%d`` for the thread). With ``workers`` (the server's worker
        PIDs): their connections mid-run, their CPU, and the servers' CPU per 200 response."""
        cmd = [
            self.binary,
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
            server = sum(per_pid.get(w, 0.0) for w in workers) + per_pid.get(self.redis_pid, 0)
            ok = run.rps * secs
            run.extra["cpu_us"] = server * cpu["seconds"] / ok * 1e6 if ok else 0.0
        tag = " (warm-up)" if warmup else ""
        log(
            f"{key}{tag}: {run.rps:,.0f} req/s p50 {run.p50_ms:.2f} ms p99 {run.p99_ms:.2f} ms"
            f" non2xx {s.get('statuses') or 0} sockerr {run.socket_errors} conns {run.conns}"
            f" cpu busy {cpu['busy']:.0%} foreign {cpu['foreign']:.0%}"
        )
        time.sleep(0.3)
        return run


def start_wrk(
    port: int,
    path: str,
    body_file: Path,
    mode: str,
    conns: int,
    seconds: float,
    pause_ms: int,
    threads: int = 1,
    timeout_s: int = 2,  # (wrk's own default)
) -> Any:
    """wrk started on ``path`` with wrk_bodies.lua's bodies from ``body_file`` (``mode``: as
    ``Wrk.run``'s; ``pause_ms``: each connection's pause before a request); ``wrk_summary``
    reads its result."""
    return subprocess.Popen(
        ["wrk", f"-t{threads}", f"-c{conns}", f"-d{round(seconds)}s", f"--timeout={timeout_s}s"]
        + ["-s", str(LUA), f"http://127.0.0.1:{port}{path}", "--", str(body_file), mode],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "WRK_PAUSE_MS": str(pause_ms)},
    )


def wrk_summary(proc: Any) -> dict[str, Any]:
    """The JSON summary wrk_bodies.lua printed for a wrk of ``start_wrk``, once it ended."""
    out = proc.communicate(timeout=120)[0]
    m = re.search(r"^BENCH (\{.*\})$", out, re.M)
    assert m, out
    result: dict[str, Any] = json.loads(m.group(1))
    return result
