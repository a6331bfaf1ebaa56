"""LIBSVM files (``perceptron replay --libsvm``), read by scikit-learn's reader.

The files it reads come out as the project's own reader made them: ``reference`` below is
that reader, kept here as the specification of rows, widths, indexing and labels. What it
took and scikit-learn's reader refuses (unsorted or repeated indices, labels that are words,
``qid:`` after a feature) is refused whole, naming the file, the line and what is wrong.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

from service import replay as rp
from service.cli import main as cli
from service.replay import libsvm


def reference(text: str) -> tuple[list[list[float]], list[str]]:
    """The reader this project had before scikit-learn's: dense rows, the labels' texts."""
    sparse: list[dict[int, float]] = []
    labels: list[str] = []
    for line in text.splitlines():
        tokens = line.split("#", 1)[0].split()
        if not tokens:
            continue
        labels.append(tokens[0])
        example: dict[int, float] = {}
        for token in tokens[1:]:
            key, _, value = token.partition(":")
            if key != "qid":
                example[int(key)] = float(value)
        sparse.append(example)
    indices = {i for example in sparse for i in example}
    offset = 0 if 0 in indices else 1
    width = max(indices) + 1 - offset
    return [[e.get(i + offset, 0.0) for i in range(width)] for e in sparse], labels


def write(tmp_path: Path, text: str, name: str = "data.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


EDGES = (
    "# a comment line, then a blank one\n"
    "\n"
    "+1 qid:3 1:0.5 3:2 # a comment after the features\n"
    "-1\t2:-1  \t 7:1e-3\n"  # tabs and spaces; the largest index: 7 features
    "   \n"
    "2.0 4:1E2 5:-0\r\n"  # a Windows line end; 2.0 is the integer 2
    "1 3:0\n"  # an explicit zero
    "-1\n"  # no features at all: a row of zeros
    "0 1:+4 6:.25"  # no final newline
)


def test_a_file_with_every_edge_reads_as_before(tmp_path: Path) -> None:
    data = rp.load_libsvm(write(tmp_path, EDGES, "edges.libsvm"))
    rows, labels = reference(EDGES)
    assert data.rows == rows and len(rows) == 6 and data.n_features == 7
    assert data.rows[0] == [0.5, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0]  # index 1 is the first column
    assert data.labels == [1, -1, 2, 1, -1, 0] == [int(float(y)) for y in labels]
    assert all(type(v) is float for row in data.rows for v in row)
    assert all(type(y) is int for y in data.labels)
    assert (data.name, data.classes) == ("edges", [-1, 0, 1, 2])


def test_a_zero_index_makes_the_file_zero_based(tmp_path: Path) -> None:
    text = "1 0:1 2:3\n-1 1:1\n"
    data = rp.load_libsvm(write(tmp_path, text))
    assert data.rows == reference(text)[0] == [[1.0, 0.0, 3.0], [0.0, 1.0, 0.0]]
    one_based = rp.load_libsvm(write(tmp_path, "1 1:1 3:3\n-1 2:1\n"))
    assert one_based.rows == data.rows  # the same examples, 1-based


def test_labels_that_are_not_integers_are_strings(tmp_path: Path) -> None:
    data = rp.load_libsvm(write(tmp_path, "0.5 1:1\n1 2:1\n-2.0 1:2\n0.5 2:2\n"))
    assert data.labels == ["0.5", "1", "-2", "0.5"] and data.classes == ["-2", "0.5", "1"]


@pytest.mark.parametrize("seed", range(40))
def test_generated_files_read_as_the_reference_reads_them(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    width = int(rng.integers(1, 15))
    first = int(rng.integers(0, 2))  # zero- or one-based
    lines = []
    for _ in range(int(rng.integers(1, 25))):
        chosen = np.flatnonzero(rng.random(width) < 0.4) + first
        values = rng.normal(0, 10, len(chosen)) * 10.0 ** rng.integers(-5, 6, len(chosen))
        shown = [rng.choice([f"{v:g}", f"{v:.6e}", repr(float(v)), f"{v:.0f}"]) for v in values]
        label = str(rng.choice(["1", "+1", "-1", "0", "3", "3.0", "-7"]))
        qid = f" qid:{rng.integers(1, 9)}" if rng.random() < 0.2 else ""
        gaps = rng.choice([" ", "  ", "\t"], len(chosen))
        pairs = "".join(f"{g}{i}:{v}" for g, i, v in zip(gaps, chosen, shown, strict=True))
        comment = " # note" if rng.random() < 0.2 else ""
        lines.append(f"{label}{qid}{pairs}{comment}\n")
        if rng.random() < 0.1:
            lines.append(str(rng.choice(["\n", "# comment\n", "  \n"])))
    text = "".join(lines) + f"1 {first}:1\n"  # at least one feature in the file
    data = rp.load_libsvm(write(tmp_path, text))
    rows, labels = reference(text)
    assert data.rows == rows, text
    assert data.labels == [int(float(y)) for y in labels], text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "1 1:1\n# ok\n\n-1 3:1 2:1\n",
            r"data.txt, line 4: Feature indices .* should be sorted and unique in '-1 3:1 2:1'",
            id="unsorted-indices",
        ),
        pytest.param("1 2:1 2:3\n", "line 1: .*sorted and unique", id="repeated-index"),
        pytest.param(
            "1 1:2 oops\n",
            r"line 1: .* in '1 1:2 oops' \(a line is 'label index:value \.\.\.'",
            id="no-colon",
        ),
        pytest.param("1 1:1\ncat 1:1\n", "line 2: could not convert .*'cat'", id="word-label"),
        pytest.param("1 1:x\n", "line 1: could not convert .*'x'", id="word-value"),
        pytest.param("1 -1:3\n", "line 1: Invalid index -1", id="negative-index"),
        pytest.param("1 a:3\n", "line 1: invalid literal for int", id="word-index"),
        pytest.param("1 1:2 qid:3\n", "line 1: .*'qid'", id="qid-after-a-feature"),
        pytest.param("1 3000000000:1\n", "line 1: value too large", id="index-past-int"),
        pytest.param("\xff 1:1\n", "line 1: could not convert", id="not-utf-8"),
        pytest.param("1 1:1\n-1 2:nan\n", "example 2 has a value that is not a finite", id="nan"),
        pytest.param("1 1:1e400\n", "example 1 has a value that is not a finite", id="inf"),
        pytest.param("", "no examples", id="empty"),
        pytest.param("# nothing\n\n", "no examples", id="comments-only"),
        pytest.param("1\n-1\n", "no features", id="labels-only"),
        pytest.param("1 100000000:1\n", "too many to replay", id="mistyped-index"),
    ],
)
def test_a_file_it_cannot_read_is_refused_with_where_and_why(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "data.txt"
    path.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    with pytest.raises(rp.ReplayError, match=message):
        rp.load_libsvm(path)


def test_the_line_is_found_in_a_long_file(tmp_path: Path) -> None:
    lines = [f"{i % 2} {1 + i % 5}:{i}\n" for i in range(5000)]
    lines[3210] = "1 5:1 4:1\n"
    with pytest.raises(rp.ReplayError, match="line 3211: .* in '1 5:1 4:1'"):
        rp.load_libsvm(write(tmp_path, "".join(lines)))


def test_the_size_limit_is_of_all_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = write(tmp_path, "1 1:1 3:1\n-1 2:1\n")  # 2 examples of 3 features
    monkeypatch.setattr(libsvm, "MAX_DENSE_VALUES", 6)
    assert len(rp.load_libsvm(path)) == 2
    monkeypatch.setattr(libsvm, "MAX_DENSE_VALUES", 5)
    with pytest.raises(rp.ReplayError, match="2 examples of 3 features"):
        rp.load_libsvm(path)


def test_the_command_reports_a_bad_file_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, "1 1:1\n1 2:1 1:1\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["replay", "--libsvm", str(path), "--quiet"])
    assert code == 2
    assert err.getvalue() == (
        f"perceptron replay: {path}, line 2: Feature indices in SVMlight/LibSVM data file "
        "should be sorted and unique in '1 2:1 1:1' (a line is 'label index:value ...', "
        "with increasing indices).\n"
    )
