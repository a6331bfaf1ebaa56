"""What the scenarios record and the report reads: every run, and each figure's own findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.common import DISTURBED


@dataclass
class Run:
    """One measured (or warm-up) load: wrk's summary, or a VW client's."""

    key: str
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    status_errors: int
    socket_errors: int
    conns: dict[str, int]  # keep-alive connections held by each worker PID, mid-run
    cpu: dict[str, Any]  # CpuMeter's shares, and "workers": the cores each worker used
    extra: dict[str, Any] = field(default_factory=dict)  # statuses, cpu_us, Redis stats


@dataclass
class BatchBodies:
    """Figure 3's bodies and how many of their examples updated the weights."""

    update_rate: float
    body_kib: float
    packed_kib: float


@dataclass
class Results:
    """Everything one benchmark run measured, for the report and FILE.json."""

    quick: bool
    threads: int
    conns: int
    runs: dict[str, list[Run]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # scenario notes, printed last
    git: str = "?"
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    quiet_wait: tuple[float, float | None] = (0.0, None)
    fb_stats: list[dict[str, float]] = field(default_factory=list)  # /feedback d=100, per run
    fb784_stats: dict[str, float] | None = None
    learn_batch: BatchBodies | None = None
    vw_status: str | None = None
    weights_mem: dict[str, Any] | None = None
    pending: dict[str, Any] | None = None

    def add(self, run: Run) -> None:
        self.runs.setdefault(run.key, []).append(run)

    def disturbed(self, key: str) -> bool:
        """Whether other processes took more than DISTURBED of the CPUs in any run of ``key``."""
        return any(r.cpu.get("foreign", 0.0) > DISTURBED for r in self.runs.get(key, []))
