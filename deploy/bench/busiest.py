"""The busiest worker of a running service, recorded with py-spy: where a bound's time goes.

    python3 deploy/bench/busiest.py --out FILE [--seconds 4] [--after 2] [--py-spy PATH] [--native]
    python3 deploy/bench/busiest.py --summarize FILE

Waits (up to --wait seconds) for the service's supervisor (a process running ``perceptron
serve`` or ``python -m service.cli.main serve``) and for its load (a process named --load, wrk by
default, running while the service's workers use half a core or more), then --after seconds
more (past a warm-up), takes each worker's CPU over one second, and records the busiest for
--seconds with py-spy, a sampling profiler that reads the process from outside. FILE gets
py-spy's raw stacks, FILE.txt the summary: the workers' cores, then the functions in the most
samples, counted once a sample wherever they are on its stack (inclusive), and the lines where
the samples were taken (self); with --native, C frames as well (a system call, numpy, the
event loop's own). It needs py-spy, which is not among the project's dependencies:
``--py-spy`` names its executable (default: ``py-spy`` on the PATH). For the 16-core kit, copy
it into ``.devbox/bin/`` (``PROFILE`` in ``deploy/bench/sixteen_cores.sh``). Standard library
only, so that it runs where the kit runs; it changes nothing in the service, and stops nothing
but the py-spy it started.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
BUSY = 0.5  # cores the service's workers use together once its load has begun
SERVE = (["perceptron", "serve"], ["service.cli.main", "serve"])


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def cpu_s(pid: int) -> float:
    """user + sys seconds of ``pid`` (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def serving(args: list[str]) -> bool:
    """Whether a command line is the service's supervisor."""
    words = [os.path.basename(a) for a in args]
    return any(all(w in words for w in serve) for serve in SERVE)


def supervisor() -> int | None:
    found = [p for p in pids() if serving(cmdline(p))]
    return min(found) if found else None


def workers(root: int) -> list[int]:
    """The supervisor's descendants that serve (not multiprocessing's resource tracker)."""
    all_pids = pids()
    below, frontier = [], [root]
    while frontier:
        kids = [p for p in all_pids if parent(p) in frontier]
        below += kids
        frontier = kids
    return [p for p in below if "resource_tracker" not in " ".join(cmdline(p))]


def rates(procs: list[int], seconds: float) -> dict[int, float]:
    """Each process's CPU over ``seconds``, in cores."""
    before = {p: cpu_s(p) for p in procs}
    time.sleep(seconds)
    return {p: (cpu_s(p) - before[p]) / seconds for p in procs}


def record(a: argparse.Namespace) -> int:
    spy = shutil.which(a.py_spy) or a.py_spy
    if not os.access(spy, os.X_OK):
        say(f"busiest.py: no py-spy at {a.py_spy}: nothing recorded")
        return 1
    deadline = time.monotonic() + a.wait
    root = None
    while root is None and time.monotonic() < deadline:
        root = supervisor()
        time.sleep(0.2)
    if root is None:
        say("busiest.py: no service started: nothing recorded")
        return 1
    # The load on this service: its load generator runs and its workers are busy (the same
    # generator may first load something else, such as a floor beside it).
    while not (
        any(name(p) == a.load for p in pids())
        and sum(rates(workers(root) or [root], 0.25).values()) > BUSY
    ):
        if time.monotonic() > deadline:
            say(f"busiest.py: no {a.load} load on the service came: nothing recorded")
            return 1
    time.sleep(a.after)
    procs = workers(root) or [root]
    cores = rates(procs, 1.0)
    pid = max(cores, key=lambda p: cores[p])
    spied = subprocess.run(
        [spy, "record", "--pid", str(pid), "--duration", str(a.seconds), "--rate", str(a.rate)]
        + ["--format", "raw", "--output", a.out]
        + (["--native"] if a.native else []),
        capture_output=True,
        text=True,
    )
    if spied.returncode != 0 or not Path(a.out).exists():
        say(f"busiest.py: py-spy failed: {spied.stderr.strip()[-500:]}")
        return 1
    head = [
        f"the busiest of {len(procs)} workers: pid {pid}, "
        + ", ".join(f"{p} {c:.2f}" for p, c in sorted(cores.items(), key=lambda pc: -pc[1]))
        + " cores over the second before the recording"
    ]
    Path(a.out + ".txt").write_text("\n".join(head + summary(Path(a.out), a.top)) + "\n")
    say(f"busiest.py: pid {pid} recorded for {a.seconds} s: {a.out}, summary {a.out}.txt")
    return 0


FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def short(frame: str, with_line: bool) -> str:
    """``function (file:line)`` with the file's last two parts only (``store/connect.py``)."""
    m = FRAME.match(frame)
    if not m:
        return frame
    path = "/".join(Path(m["file"]).parts[-2:])
    line = f":{m['line']}" if with_line and m["line"] else ""
    return f"{m['function']} ({path}{line})"


def summary(raw: Path, top: int) -> list[str]:
    """py-spy's raw stacks (``frame;frame;... count`` a line, the outermost first)."""
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        for name in {short(f, False) for f in frames}:
            inclusive[name] += n
        leaf[short(frames[-1], True)] += n
    if not total:
        return ["no samples"]
    # (less the frames that start every stack of the process's main thread: its start-up)
    root = max(inclusive.values())
    below = Counter({name: n for name, n in inclusive.items() if n < root})
    out = [f"{total} samples; {root / total:.1%} under the main thread's start-up frames"]
    out += ["", "inclusive (share of samples with the function on the stack):"]
    out += [f"{n / total:6.1%}  {name}" for name, n in below.most_common(top)]
    out += ["", "self (share of samples taken at that line):"]
    out += [f"{n / total:6.1%}  {name}" for name, n in leaf.most_common(top)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="where the raw stacks go (FILE.txt: the summary)")
    ap.add_argument("--seconds", type=int, default=4, help="how long to record (default 4)")
    ap.add_argument("--after", type=float, default=2.0, help="seconds past the load's start")
    ap.add_argument("--load", default="wrk", help="the load's process name (default wrk)")
    ap.add_argument("--wait", type=float, default=120.0, help="the longest wait for the load")
    ap.add_argument("--rate", type=int, default=250, help="samples a second (default 250)")
    ap.add_argument("--top", type=int, default=60, help="functions and lines listed")
    ap.add_argument("--py-spy", default="py-spy", help="py-spy's executable")
    ap.add_argument(
        "--native", action="store_true", help="C frames too (system calls, numpy, uvloop)"
    )
    ap.add_argument("--summarize", help="only summarize raw stacks recorded before")
    a = ap.parse_args()
    if a.summarize:
        say("\n".join(summary(Path(a.summarize), a.top)))
        return 0
    if not a.out:
        ap.error("--out is needed to record")
    return record(a)


if __name__ == "__main__":
    raise SystemExit(main())
