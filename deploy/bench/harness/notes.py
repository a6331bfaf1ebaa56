"""The notes under the report's table: the method, the checks, the machine, odd responses."""

from __future__ import annotations

import statistics

from harness.common import DISTURBED, NCPU
from harness.results import Results


def _worker_spread(res: Results) -> str | None:
    spread = []
    for key, runs in res.runs.items():
        for r in runs:
            if r.conns and len(r.conns) == 2 and sum(r.conns.values()):
                c = list(r.conns.values())
                spread.append((key, c, r.cpu.get("workers")))
    if not spread:
        return None
    uneven = [
        (k, c, w)
        for k, c, w in spread
        if max(c) > 0.7 * sum(c) or (w and max(w) > 2.5 * max(min(w), 0.01))
    ]
    worst = max(spread, key=lambda s: max(s[1]) / max(1, sum(s[1])))
    return (
        "uvicorn --workers 2 leaves the kernel to spread connections between workers "
        "(no per-worker request count in responses); the keep-alive connections held "
        "by each worker PID (ss, mid-run) and each worker's CPU use were recorded: "
        f"the least even run was {worst[0]} with {worst[1]} connections and CPU "
        f"{worst[2]} cores; {len(uneven)} of {len(spread)} runs were uneven "
        "(> 70% of connections or > 2.5x the CPU on one worker)."
    )


def _machine(res: Results) -> list[str]:
    runs = [r for rs in res.runs.values() for r in rs]
    if not runs:
        return []
    out = []
    foreign = [r.cpu.get("foreign", 0.0) for r in runs]
    busy = [r.cpu.get("busy", 0.0) for r in runs]
    disturbed = [r.key for r in runs if r.cpu.get("foreign", 0.0) > DISTURBED]
    la0, la1 = res.load_before, res.load_after
    verdict = (
        f"LOOKED DISTURBED: {len(disturbed)} of {len(runs)} runs had > 10% of the CPUs "
        "used by other processes (their cells are marked †)"
        if disturbed
        else "looked undisturbed"
    )
    waited, busy0 = res.quiet_wait
    if busy0 is not None:
        out.append(f"--wait-quiet: waited {waited:.0f} s; the CPUs were then {busy0:.0%} busy.")
    out.append(
        f"Machine: {NCPU} CPUs; load average before {la0[0]:.2f}, after {la1[0]:.2f} "
        f"(1 min). During the runs the CPUs were {statistics.median(busy):.0%} busy "
        f"(median); processes other than this benchmark's used "
        f"{statistics.median(foreign):.0%} median, {max(foreign):.0%} at most: the run "
        f"{verdict}. Other processes on this machine disturb the figures."
    )
    return out


def notes(res: Results) -> list[str]:
    """The notes under the table: the method, the checks, the machine, the odd responses."""
    out = [f"Measured: {res.git}."]
    mode = "quick: 1 run x 3 s" if res.quick else "3 runs x 5 s"
    out.append(
        f"Per-request figures: wrk -t{res.threads} -c{res.conns} keep-alive, {mode} "
        "per figure, alternated with the baselines (after a 1 s warm-up each); the service "
        "and the baseline each run 2 uvicorn workers (access log off), BLAS pinned to 1 "
        "thread, Redis local without persistence; median (min–max) over the runs."
    )
    if res.fb_stats:
        n = sum(s["feedbacks"] for s in res.fb_stats)
        u = sum(s["updates"] for s in res.fb_stats)
        out.append(
            f"/feedback d=100: {n:,.0f} feedbacks measured, {u:,.0f} updated the weights "
            f"(version +{u:,.0f}); labels were chosen against each prediction."
        )
    s7 = res.fb784_stats
    if s7:
        out.append(
            f"/feedback 784x10: {s7['feedbacks']:,.0f} feedbacks, {s7['updates']:,.0f} "
            "updates. EVALSHA usec include the compaction scripts (SYNC, COMPACT) run "
            "meanwhile; 'top-level total' adds every command not run inside a script."
        )
    spread = _worker_spread(res)
    if spread:
        out.append(spread)
    lb = res.learn_batch
    if lb is not None:
        out.append(
            f"/learn/batch: wrk -c4 posting 8 pre-serialized bodies in turn "
            f"({lb.body_kib:.0f} KiB each, 1000 examples, 4-decimal floats, labels "
            f"from a noisy linear teacher); {lb.update_rate:.0%} of the examples updated the "
            f"weights. Packed: the same examples as packed_features ({lb.packed_kib:.0f} KiB "
            "each), on a model of their own, each run right after its JSON run."
        )
    if res.vw_status is not None:
        out.append(
            res.vw_status + ". Its daemon loop runs through pylibvw (vw_daemon.py: "
            "--daemon --num_children 2 --binary --loss_function hinge, i.e. hinge-loss SGD, "
            "not a perceptron); each child has its own copy of the model; the clients are "
            "Python (vw_client.py), one process per connection."
        )
    wm = res.weights_mem
    if wm:
        keys = ", ".join(
            f"{k.split(':', 2)[-1]} {v / 1024:,.0f} KiB" for k, v in sorted(wm["keys"].items())
        )
        out.append(
            f"2^20-weight model: PERCEPTRON_COMPACT_EVERY=50, {wm['learned']:,} examples "
            f"learned, version {wm['version']}, snapshot at {wm['snapv']}, "
            f"{wm['log_entries']} log entries left; MEMORY USAGE (SAMPLES 0): {keys}."
        )
    pm = res.pending
    if pm:
        out.append(
            f"One pending key's MEMORY USAGE is {pm['key_memory_usage']:,} bytes; the "
            "used_memory delta adds the expiry entry and allocator rounding."
        )
    out += _machine(res)
    bad = []
    for key, rs in res.runs.items():
        counts: dict[str, int] = {}
        for r in rs:
            for st, k in r.extra.get("statuses", {}).items():
                counts[st] = counts.get(st, 0) + k
        if counts:
            total = sum(r.requests for r in rs)
            bad.append(f"{key}: {counts} of {total:,}")
    if bad:
        out.append("Responses other than 200 (by status): " + "; ".join(bad) + ".")
    return out + res.notes
