"""What the benchmarks need from the machine: Debian tools, and the code under test (this
tree's, HEAD's, another revision's; the designs a command compares)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.common import ROOT, log


def ensure_debian_tool(binary: str, package: str) -> str:
    """The path of ``binary``, installing Debian's ``package`` with apt-get when it is missing."""
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


def git_state(tree: Path) -> str:
    """Which service/ is measured: the working tree's (and how dirty) or HEAD's export."""

    def git(*a: str) -> str:
        r = subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True)
        return r.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    if tree != ROOT:
        return f"service/ of commit {head} (git archive HEAD; --tree head)"
    dirty = [ln for ln in git("status", "--porcelain", "--", "service").splitlines() if ln]
    more = f" plus {len(dirty)} uncommitted changes in service/" if dirty else ""
    return f"the working tree's service/, at commit {head}{more}"


def export_head(tmp: Path) -> Path:
    """HEAD's service/ in a temporary directory, by git archive: the work tree is untouched."""
    dest = tmp / "tree"
    dest.mkdir()
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "HEAD", "service"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=data, check=True, timeout=60)
    return dest


@contextmanager
def worktree(revision: str | None) -> Iterator[Path | None]:
    """A checkout of ``revision`` for the block (a git worktree made here, removed at the end);
    None without one."""
    made = None
    try:
        if revision:
            made = Path(tempfile.mkdtemp(prefix="pcp-baseline-")) / "tree"
            subprocess.run(
                ["git", "worktree", "add", "-q", "--detach", str(made), revision],
                cwd=ROOT,
                check=True,
            )
        yield made
    finally:
        if made is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(made)], cwd=ROOT)


@contextmanager
def designs(baseline: str | None) -> Iterator[dict[str, tuple[Path, dict[str, str]]]]:
    """Where and how each design runs, by its name: this tree with one writer per model and
    with each worker committing its own, and with ``baseline`` a checkout of that revision with
    one writer (a git worktree made here, removed at the end)."""
    trees: dict[str, tuple[Path, dict[str, str]]] = {
        "one writer": (ROOT, {"PERCEPTRON_ONE_WRITER": "true"}),
        "each commits": (ROOT, {"PERCEPTRON_ONE_WRITER": "false"}),
    }
    with worktree(baseline) as made:
        if made is not None:
            trees[f"one writer at {baseline}"] = (made, {"PERCEPTRON_ONE_WRITER": "true"})
        yield trees
