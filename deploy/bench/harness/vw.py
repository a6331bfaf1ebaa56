"""Figure 3's comparison: Vowpal Wabbit's daemon (pylibvw from PyPI's vowpalwabbit), streaming
over one connection and one example per request/response over two, on the same examples."""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from typing import Any

from harness.common import HERE, PY, VW_DIR, log
from harness.data import write_lines
from harness.results import Run
from harness.runner import Bench
from harness.scenarios import Stage
from harness.servers import wait_vw
from service.cli.loopback import free_port


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


def _record(bench: Bench, key: str, per_s: float, secs: float, cpu: dict[str, Any]) -> Run:
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
    bench.results.add(run)
    log(f"{key}: {per_s:,.0f} examples/s, cpu busy {cpu['busy']:.0%}")
    return run


def vw_daemon(bench: Bench, st: Stage) -> None:
    """VW's daemon with 2 children: per round, one streaming run of 100,000 (quick) or
    200,000 examples, then 2 request/response clients for the run length. A failure is
    reported in the notes: VW is a comparison, not the subject."""
    vw_path = ensure_vw()
    if vw_path is None:
        bench.results.vw_status = "vowpalwabbit could not be installed from PyPI: VW not measured"
        return
    status = "PyPI vowpalwabbit " + vw_ships_executable()
    bench.results.vw_status = status
    d = st.data
    lines = []
    for i in range(2000):
        feats = " ".join(f"{j}:{v:.4f}" for j, v in enumerate(d.dense_x[i]))
        lines.append(f"{d.dense_y[i]} |f {feats}".encode())
    rr_file = write_lines(bench.tmp / "vw_rr.txt", lines)
    n_stream = 100_000 if bench.quick else 200_000
    stream_file = write_lines(
        bench.tmp / "vw_stream.txt", [lines[i % len(lines)] for i in range(n_stream)]
    )
    port = free_port()
    proc = bench.servers.start_vw(vw_path, port)
    try:
        wait_vw(proc, port)
        client = [PY, str(HERE / "vw_client.py")]
        for _ in range(bench.runs):
            bench.meter.start()
            out = subprocess.run(
                client + ["stream", "127.0.0.1", str(port), str(stream_file)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            cpu = bench.meter.stop()
            stream = json.loads(out.stdout)
            _record(bench, "vw_stream", stream["per_s"], stream["seconds"], cpu)
            time.sleep(0.5)
            bench.meter.start()
            ps = [
                subprocess.Popen(
                    client + ["rr", "127.0.0.1", str(port), str(rr_file), str(bench.dur)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for _ in range(2)
            ]
            outs = [json.loads(p.communicate(timeout=bench.dur + 60)[0]) for p in ps]
            cpu = bench.meter.stop()
            run = _record(bench, "vw_rr", sum(o["per_s"] for o in outs), bench.dur, cpu)
            run.p50_ms = statistics.mean(o["p50_us"] for o in outs) / 1000
            run.p99_ms = max(o["p99_us"] for o in outs) / 1000
            time.sleep(0.5)
    except Exception as e:  # VW is a comparison, not the subject: report and go on
        bench.results.vw_status = f"{status}; the measurement failed: {e!r:.200}"
    finally:
        bench.servers.stop_forking(proc)
