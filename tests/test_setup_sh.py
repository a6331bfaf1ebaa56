"""``deploy/setup.sh`` builds the environment from the lock on a fresh clone, whatever pip the
machine's Python bundles and whatever the package index released since the lock was written.

A copy of the checkout's tracked files gets an empty venv from the machine's own Python (its
stock bundled pip present, as on a new machine); setup.sh installs the pinned installer and
the lock, exactly. A lock whose hash does not match fails with a message naming the cause.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .test_compose import LOCKS, locked

pytestmark = pytest.mark.servers  # it runs setup.sh, pip and uv

ROOT = Path(__file__).resolve().parents[1]
# The interpreter this suite's venv was made from: the machine's own Python
BASE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))


def clone(into: Path) -> Path:
    """The files git tracks (and those it would add), as a fresh clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    )  # fmt: skip
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def setup(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PYTHON")}
    env["PYTHON"] = str(BASE_PYTHON)
    return subprocess.run(
        ["bash", str(checkout / "deploy" / "setup.sh"), *args],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def run(python: Path, code: str) -> str:
    # (from / : a `-c` program imports from its working folder first)
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_fresh_clone_installs_the_lock_exactly_beside_the_stock_pip(tmp_path: Path) -> None:
    checkout = clone(tmp_path / "clone")
    assert not (checkout / ".venv").exists()
    # The test lock: pytest-cov asks for coverage[toml], the extra an old pip resolved to the
    # index's newest coverage instead of the pinned one, and failed.
    done = setup(checkout, "test")
    assert done.returncode == 0, done.stderr[-3000:]
    # It says what it does while it does it.
    for step in ("creating .venv", "installing the installer: uv", "requirements/test.txt"):
        assert step in done.stderr, done.stderr
    venv_python = checkout / ".venv" / "bin" / "python"
    # The venv kept the pip its Python bundles (on this machine, an old one): it installed only
    # the installer, and the lock went in all the same.
    bundled = run(BASE_PYTHON, "import ensurepip; print(ensurepip.version())")
    assert run(venv_python, "import pip; print(pip.__version__)") == bundled
    # Every pin of the test lock that applies here, at its version; the installer at its own.
    freeze = subprocess.run(
        [checkout / ".venv" / "bin" / "uv", "pip", "freeze", "--python", venv_python],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    installed = {
        re.sub(r"[-_.]+", "-", name).lower(): version
        for name, version in re.findall(r"^([A-Za-z0-9._-]+)==(\S+)$", freeze, re.M)
    }
    from packaging.markers import Marker

    for lock in ("test", "installer"):
        for key, pins in locked(LOCKS / f"{lock}.txt").items():
            for version, marker, _ in pins:
                if marker is None or Marker(marker).evaluate():
                    assert installed.get(key) == version, (lock, key, version, installed.get(key))
    # The package itself, from the clone (editable), and its command.
    where = run(venv_python, "import service; print(service.__file__)")
    assert where.startswith(str(checkout)), where
    cli = subprocess.run([checkout / ".venv" / "bin" / "perceptron", "--help"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert cli.returncode == 0 and "serve" in cli.stdout
    # Set up once, it installs nothing the second time.
    again = setup(checkout, "test")
    assert again.returncode == 0 and "installing" not in again.stderr, again.stderr
    # The README's `pip install ./client`, run in .venv, installs a copy that shadowed the
    # clone's client/ (the doctests of client/ then failed to collect): setup removes it.
    uv = checkout / ".venv" / "bin" / "uv"
    subprocess.run([uv, "pip", "install", "--quiet", "--python", venv_python, "./client"],
                   cwd=checkout, capture_output=True, timeout=300, check=True)  # fmt: skip
    client = "import perceptron_client; print(perceptron_client.__file__)"
    assert not run(venv_python, client).startswith(str(checkout / "client"))
    mended = setup(checkout, "test")
    assert mended.returncode == 0 and "removing the copy" in mended.stderr, mended.stderr
    assert run(venv_python, client).startswith(str(checkout / "client")), run(venv_python, client)


def test_an_install_that_fails_says_why(tmp_path: Path) -> None:
    checkout = clone(tmp_path / "clone")
    lock = checkout / "requirements" / "replay.txt"
    text = lock.read_text()
    # One hash of numpy changed to another: the file on the index is not the one locked.
    wrong = re.sub(
        r"(numpy==[^\n]*\n(?:\s+--hash=sha256:[0-9a-f]{64} \\\n)*)",
        lambda m: re.sub(r"[0-9a-f]{64}", "0" * 64, m[1]),
        text,
    )
    assert wrong != text
    lock.write_text(wrong)
    failed = setup(checkout)
    assert failed.returncode != 0
    assert "setup: FAILED: uv could not install requirements/replay.txt" in failed.stderr
    assert "numpy" in failed.stderr and "hash" in failed.stderr.lower(), failed.stderr[-3000:]
    # Nothing is marked installed: the next run tries again.
    assert not list((checkout / ".venv").glob(".installed-*"))
