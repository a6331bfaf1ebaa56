"""Benchmark of the perceptron service against a bare FastAPI floor, Redis costs and VW.

    .venv/bin/python deploy/bench/benchmark.py [--quick] [--out FILE]

Sets up everything itself: installs Debian's ``wrk`` (and ``redis-server``) with apt-get when
missing, starts its own redis-server on a free port with no persistence, the service
(``python -m service.cli.main serve --workers 2``), the baseline app (``baseline_app.py`` under
``uvicorn --workers 2``) and, when ``pip`` can fetch ``vowpalwabbit``, VW's daemon. Every
server binds 127.0.0.1 and is stopped by its PID at the end. Prints one markdown table (and a
few notes under it); ``--out FILE`` also writes them to FILE, the raw results to FILE.json.
See README.md beside this file for what each figure means; the parts are in harness/.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness import report, scenarios, vw
from harness.cpu import wait_quiet
from harness.runner import Bench


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
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
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    figs = set(args.figures.split(","))
    bench = Bench(args.quick, args.setting)
    t0 = time.time()
    try:
        bench.results.quiet_wait = wait_quiet(args.wait_quiet)
        bench.prepare(args.tree)
        stage = scenarios.setup(bench)
        if "1" in figs or "2" in figs:
            scenarios.per_request(bench, stage)
        if "2" in figs:
            scenarios.feedback_784(bench, stage)
        if "3" in figs:
            scenarios.learn_batch(bench, stage)
            vw.vw_daemon(bench, stage)
        if "4" in figs:
            scenarios.memory(bench, stage)
    finally:
        bench.cleanup()
    cmd = "deploy/bench/benchmark.py" + (" --quick" if args.quick else "")
    text = report.render(bench.results, cmd, time.time() - t0)
    sys.stdout.write(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out + ".json").write_text(report.raw(bench.results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
