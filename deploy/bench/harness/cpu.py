"""CPU accounting (psutil): how busy the machine was during a run, and how much was ours."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import psutil

from harness.common import NCPU, log


def machine_busy() -> float:
    """CPU seconds all CPUs spent in user, nice and system mode since boot."""
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system)


def process_cpu(proc: psutil.Process) -> float:
    """user + sys seconds of one process; 0 once it is gone."""
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return float(t.user + t.system)


def own_cpu() -> float:
    """user + sys seconds of this process and of the children it has waited for (wrk, clients)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def tree_cpu(pid: int) -> dict[int, float]:
    """user + sys seconds of ``pid`` and of each of its descendants, by PID."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {}
    out: dict[int, float] = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def tree_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the tree used in between (a process gone meanwhile counts for nothing)."""
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


class CpuMeter:
    """How busy the machine was during a span, and how much of it was not ours.

    Ours: the processes ``pids()`` names when the span starts (the servers) and this process
    with its waited-for children (wrk, the VW clients)."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._pids = pids

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.busy0 = machine_busy()
        self.tracked: dict[int, psutil.Process] = {}
        for pid in self._pids():
            try:
                self.tracked[pid] = psutil.Process(pid)
            except psutil.Error:
                pass
        self.p0 = {pid: process_cpu(p) for pid, p in self.tracked.items()}
        self.self0 = own_cpu()

    def stop(self) -> dict[str, Any]:
        """The span's seconds; the shares of all CPUs busy, ours and others' (``foreign``);
        the cores each tracked PID used (``per_pid``)."""
        secs = time.perf_counter() - self.t0
        busy1 = machine_busy()
        p1 = {pid: process_cpu(p) for pid, p in self.tracked.items()}
        self1 = own_cpu()
        ours = sum(max(0.0, p1[p] - self.p0[p]) for p in self.tracked) + (self1 - self.self0)
        busy = busy1 - self.busy0
        cap = secs * NCPU
        return {
            "seconds": secs,
            "busy": busy / cap,
            "ours": min(ours, busy) / cap,
            "foreign": max(0.0, busy - ours) / cap,
            "per_pid": {p: (p1[p] - self.p0[p]) / secs for p in self.tracked},
        }


def wait_quiet(budget: float) -> tuple[float, float | None]:
    """Wait (at most ``budget`` s) until other processes use < 15% of the CPUs: (seconds
    waited, share of the CPUs then busy), or (0, None) when not asked to wait."""
    if budget <= 0:
        return 0.0, None
    t0 = time.time()
    while True:
        b0 = machine_busy()
        time.sleep(2.0)
        busy = (machine_busy() - b0) / (2.0 * NCPU)
        waited = time.time() - t0
        if busy < 0.15 or waited >= budget:
            log(f"waited {waited:.0f} s for a quiet machine: CPUs {busy:.0%} busy")
            return waited, busy
