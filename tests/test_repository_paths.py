"""Nothing the tests or the scripts run depends on a path outside the repository: a fresh clone
with nothing beside it runs them all. The one exception is CI's own engine start in
``.ci/run``, on a line marked so."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]

FOLDERS = ("tests", "deploy", ".ci")
SCRIPTS = (".py", ".sh", ".lua", "")  # "": .ci/run and other scripts without a suffix
ALLOWED = ("# outside the repository: CI's own engine start",)
ALLOWED_IN = ".ci/run"

# a path that starts with "..", where a script runs (the repository's root: every script
# and test works from there)
UP_FROM_ROOT = re.compile(r"""(?:^|[\s"'=(,\[])\.\./[\w.$]""")
# "$(dirname "$0")/../..": up from the script's own folder
UP_FROM_SCRIPT = re.compile(r"""dirname\s+"?\$\{?0\}?"?\)((?:/\.\.)+)""")
# Path(__file__).resolve().parents[N] and Path(__file__).parent.parent...
PARENTS_OF_FILE = re.compile(r"__file__.*?\.parents\[(\d+)\]")
PARENT_CHAIN_OF_FILE = re.compile(r"__file__\)(?:\.resolve\(\))?((?:\.parent)+)\b")
# the checkout's own folder, or the one above it
ABOVE_ROOT = re.compile(r"""\bROOT\.parent\b|\bROOT\s*/\s*["']\.\.["']""")


def outside(path: str, line: str) -> list[str]:
    """What on ``line`` of the file at ``path`` (relative to the root) names a path outside
    the repository."""
    if path == ALLOWED_IN and line.rstrip().endswith(ALLOWED):
        return []
    depth = len(PurePosixPath(path).parts) - 1  # folders between the root and the file
    found = []
    if UP_FROM_ROOT.search(line.split("#", 1)[0] if path.endswith(".py") else line):
        found.append("a path that starts with '..' from the repository's root")
    for ups in UP_FROM_SCRIPT.findall(line):
        if ups.count("..") > depth:
            found.append(f"{ups.count('..')} folders up from a script {depth} down")
    for n in PARENTS_OF_FILE.findall(line):
        if int(n) > depth:
            found.append(f"parents[{n}] of a file {depth} down")
    for chain in PARENT_CHAIN_OF_FILE.findall(line):
        if chain.count(".parent") > depth + 1:
            found.append(f"{chain.count('.parent')} parents of a file {depth} down")
    if ABOVE_ROOT.search(line):
        found.append("the folder above the repository's root")
    return found


def scripts() -> list[str]:
    """The repository's tracked scripts under FOLDERS."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", *FOLDERS], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [p for p in listed.split("\0") if p and PurePosixPath(p).suffix in SCRIPTS]


@pytest.mark.servers  # git ls-files, a process
def test_no_script_or_test_names_a_path_outside_the_repository() -> None:
    found = []
    names = scripts()
    assert "tests/test_repository_paths.py" in names and ".ci/run" in names
    for path in names:
        for number, line in enumerate((ROOT / path).read_text().splitlines(), 1):
            if path == "tests/test_repository_paths.py":
                continue  # the patterns themselves
            found += [f"{path}:{number}: {why}: {line.strip()}" for why in outside(path, line)]
    assert not found, "\n".join(found)


def test_ci_names_the_engine_kit_on_its_marked_line_alone() -> None:
    lines = (ROOT / ".ci/run").read_text().splitlines()
    marked = [line for line in lines if line.rstrip().endswith(ALLOWED)]
    assert len(marked) == 1 and "standins.sh" in marked[0]  # (the engine kit's script)
    assert outside(".ci/run", marked[0]) == []
    assert outside(".ci/run", marked[0].split("#")[0]) != []  # the mark is what allows it


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("tests/test_x.py", 'KIT = ROOT.parent / "kit" / "engine.sh"'),
        ("tests/test_x.py", 'KIT = ROOT / ".." / "kit"'),
        ("tests/test_x.py", "ROOT = Path(__file__).resolve().parents[2]"),
        ("deploy/bench/x.py", "ROOT = Path(__file__).resolve().parents[3]"),
        ("tests/test_x.py", "HERE = Path(__file__).resolve().parent.parent.parent"),
        ("deploy/bench/x.sh", 'echo "prepare it first: bash ../kit/prepare.sh"'),
        ("deploy/bench/x.sh", 'ROOT=$(cd "$(dirname "$0")/../../.." && pwd)'),
        (".ci/run", "bash ../kit/engine.sh"),
        ("tests/test_x.py", 'subprocess.run(["bash", "../kit.sh"], cwd=ROOT)'),
    ],
)
def test_each_way_out_is_found(path: str, line: str) -> None:
    assert outside(path, line)


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("deploy/bench/x.py", "ROOT = Path(__file__).resolve().parents[2]"),
        ("tests/test_x.py", "ROOT = Path(__file__).resolve().parents[1]"),
        ("deploy/bench/harness/x.py", "HERE = Path(__file__).resolve().parent.parent"),
        ("deploy/bench/x.sh", 'ROOT=$(cd "$(dirname "$0")/../.." && pwd)'),
        (".ci/run", 'cd "$(dirname "$0")/.."'),
        ("tests/test_x.py", '{"prediction_id": "d:../../etc", "label": "a"},'),
        ("tests/test_x.py", "x = a..b  # a range"),
    ],
)
def test_paths_inside_are_not(path: str, line: str) -> None:
    assert outside(path, line) == []
