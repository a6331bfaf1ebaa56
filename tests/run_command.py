"""The ``perceptron`` command run in-process, its output caught: written once for the tests of
its commands."""

from __future__ import annotations

import contextlib
import io

from service.cli import main as cli


def run_perceptron(*args: str, stderr: io.StringIO | None = None) -> tuple[int, str, str]:
    """``perceptron ARGS``: its exit code, what it printed, and what it said on stderr (into
    ``stderr`` too, when given, as it goes)."""
    out, err = io.StringIO(), stderr or io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as e:  # argparse refused an argument (exit 2, its usage said why)
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def run_replay(args: list[str], stderr: io.StringIO | None = None) -> tuple[int, str, str]:
    """``perceptron replay ARGS``, as ``run_perceptron``."""
    return run_perceptron("replay", *args, stderr=stderr)
