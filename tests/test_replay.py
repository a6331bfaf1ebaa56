"""``perceptron replay`` against the real service: every example counted, mistakes as the API's.

Sequential replays of breast_cancer (569 examples) make 167 mistakes, both as predictions with
their feedback and through /learn: the sequential perceptron of the parity table of
docs/conventions.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from perceptron_client import AsyncClient, Client, FeedbackResponse, LabelIn, PredictResponse
from service import replay as rp

from .conftest import MakeService
from .run_command import run_replay as run_main

ROOT = Path(__file__).parents[1]
BREAST_CANCER = rp.load_dataset("breast_cancer")
SEQUENTIAL_MISTAKES = 167


def counters(url: str, model: str) -> Any:
    with Client(url) as c:
        return c.read_model(model).counters


@pytest.fixture
def url(client: httpx.Client) -> str:
    return str(client.base_url)


def test_predict_and_feedback_mistakes_are_the_models(url: str) -> None:
    s = rp.replay(BREAST_CANCER, rp.ReplayOptions(url))
    assert (s.model, s.mode, s.examples) == ("breast_cancer", "predict", 569)
    c = counters(url, "breast_cancer")
    assert (c.predictions, c.feedback, c.seen) == (569, 569, 569)
    assert s.mistakes == c.mistakes == SEQUENTIAL_MISTAKES
    assert s.mistake_rate == pytest.approx(167 / 569)
    assert s.seconds > 0 and s.throughput == pytest.approx(569 / s.seconds)
    with Client(url) as cl:
        info = cl.read_model("breast_cancer")
    assert (info.config.n_features, info.config.classes) == (30, [0, 1])


def test_learn_mode_and_batches(url: str) -> None:
    s = rp.replay(
        BREAST_CANCER, rp.ReplayOptions(url, model="one", stream=rp.StreamOptions("learn"))
    )
    assert (s.examples, s.mistakes) == (569, SEQUENTIAL_MISTAKES)
    assert (counters(url, "one").learned, counters(url, "one").mistakes) == (569, s.mistakes)

    s = rp.replay(
        BREAST_CANCER,
        rp.ReplayOptions(url, model="learn-batch", stream=rp.StreamOptions("learn", batch=64)),
    )
    c = counters(url, "learn-batch")
    assert (s.examples, s.mistakes, c.learned, c.mistakes) == (569, 167, 569, 167)

    s = rp.replay(
        BREAST_CANCER,
        rp.ReplayOptions(url, model="predict-batch", stream=rp.StreamOptions(batch=64)),
    )
    c = counters(url, "predict-batch")
    assert (s.examples, c.predictions, c.feedback) == (569, 569, 569)
    assert s.mistakes == c.mistakes  # predictions of a batch share one version: more mistakes


def test_delayed_feedback_counts_every_example(url: str) -> None:
    s = rp.replay(BREAST_CANCER, rp.ReplayOptions(url, stream=rp.StreamOptions(delay=5)))
    c = counters(url, "breast_cancer")
    assert (s.delay, s.examples, c.predictions, c.feedback) == (5, 569, 569, 569)
    assert s.mistakes == c.mistakes
    assert c.unknown_feedback == c.duplicates == c.conflicts == 0

    s = rp.replay(
        BREAST_CANCER,
        rp.ReplayOptions(url, model="late-batch", stream=rp.StreamOptions(delay=5, batch=10)),
    )
    c = counters(url, "late-batch")
    assert (s.examples, c.feedback, s.mistakes) == (569, 569, c.mistakes)


class Recording(AsyncClient):
    """Logs which prediction each label answers, in the order they are sent."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.calls: list[str] = []

    async def predict(self, model: str, features: Any) -> PredictResponse:
        p = await super().predict(model, features)
        self.calls.append("p")
        return p

    async def feedback(self, prediction_id: str, label: LabelIn) -> FeedbackResponse:
        self.calls.append("f")
        return await super().feedback(prediction_id, label)


def test_labels_arrive_k_examples_late(url: str) -> None:
    data, k = BREAST_CANCER.head(30), 5

    async def run() -> tuple[list[str], rp.Summary]:
        async with Recording(url) as c:
            await rp.ensure_model(c, "late", data)
            return c.calls, await rp.replay_async(c, "late", data, rp.StreamOptions(delay=k))

    events, s = asyncio.run(run())
    assert s.examples == 30
    # The j-th label is sent once k more predictions have been answered (the last k at the end).
    predicted_before = [events[:i].count("p") for i, e in enumerate(events) if e == "f"]
    assert predicted_before == [min(j + 1 + k, 30) for j in range(30)]


def test_concurrency_counts_every_example(url: str) -> None:
    s = rp.replay(BREAST_CANCER, rp.ReplayOptions(url, stream=rp.StreamOptions(concurrency=4)))
    c = counters(url, "breast_cancer")
    assert (s.concurrency, s.examples, c.predictions, c.feedback) == (4, 569, 569, 569)
    assert s.mistakes == c.mistakes

    s = rp.replay(
        BREAST_CANCER,
        rp.ReplayOptions(url, model="learn4", stream=rp.StreamOptions("learn", concurrency=4)),
    )
    c = counters(url, "learn4")
    assert (s.examples, c.learned, s.mistakes) == (569, 569, c.mistakes)

    s = rp.replay(
        BREAST_CANCER,
        rp.ReplayOptions(
            url, model="all", stream=rp.StreamOptions(concurrency=4, delay=5, batch=8)
        ),
    )
    c = counters(url, "all")
    assert (s.examples, c.predictions, c.feedback, s.mistakes) == (569, 569, 569, c.mistakes)


def test_reset_starts_the_model_again(url: str) -> None:
    data = BREAST_CANCER.head(50)
    rp.replay(data, rp.ReplayOptions(url, model="again", stream=rp.StreamOptions("learn")))
    s = rp.replay(
        data, rp.ReplayOptions(url, model="again", reset=True, stream=rp.StreamOptions("learn"))
    )
    c = counters(url, "again")
    assert (c.learned, c.mistakes) == (50, s.mistakes)


def test_rate_paces_the_stream(url: str) -> None:
    s = rp.replay(
        BREAST_CANCER.head(41),
        rp.ReplayOptions(url, stream=rp.StreamOptions("learn", rate=200, concurrency=2)),
    )
    assert s.examples == 41 and s.seconds >= 0.19  # the 41st example starts at 0.2 s


def test_a_model_that_does_not_fit_is_refused(url: str) -> None:
    with Client(url) as c:
        c.create_model("small", n_features=2)
    with pytest.raises(rp.ReplayError, match="n_features=2"):
        rp.replay(BREAST_CANCER, rp.ReplayOptions(url, model="small"))
    with Client(url) as c:
        c.create_model("other", n_features=30, classes=[0, 2])
    with pytest.raises(rp.ReplayError, match="lack"):
        rp.replay(BREAST_CANCER, rp.ReplayOptions(url, model="other"))


def valid_png(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert len(data) > 10_000, len(data)  # two curves, axes and text: not a blank image
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        image.load()
        colours = image.getcolors(1 << 16)  # None: more than that many
        assert colours is None or len(colours) > 10
        size: tuple[int, int] = image.size
        return size


def test_the_learning_curve_is_a_png(tmp_path: Path) -> None:
    outcomes = [i % 3 == 0 or i < 20 for i in range(300)]
    s = rp.Summary("m", "learn", 1, 1, 0, 1.0, outcomes)
    path = rp.write_curve(s, tmp_path / "curve.png", window=50)
    assert valid_png(path) == (800, 450)

    xs, cumulative, moving = rp.curve_points([True, False, False, True], window=2)
    assert xs == [1, 2, 3, 4]
    assert cumulative == [1.0, 0.5, 1 / 3, 0.5]
    assert moving == [1.0, 0.5, 0.0, 0.5]


@pytest.mark.servers
def test_a_fast_curve_test_passes_on_a_machine_without_a_font_cache(tmp_path: Path) -> None:
    """The fast layer on a fresh machine: matplotlib has no font cache yet, and building one
    starts ``fc-list``, which a fast test may not (the session builds it first, conftest.py)."""
    test = "tests/test_replay.py::test_the_learning_curve_is_a_png"
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl")}  # no cache there yet
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "fast", test]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "1 passed" in done.stdout
    assert any((tmp_path / "mpl").glob("fontlist-*.json"))


def test_the_cli_replays_and_draws(url: str, tmp_path: Path) -> None:
    curve = tmp_path / "curve.png"
    cmd = [sys.executable, "-m", "service.cli.main", "replay", "--dataset", "breast_cancer"]
    cmd += ["--url", url, "--curve", str(curve), "--json"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    c = counters(url, "breast_cancer")
    assert (summary["examples"], summary["mistakes"]) == (569, c.mistakes)
    assert summary["mode"] == "predict" and c.feedback == 569
    assert summary["curve"] == str(curve)
    assert valid_png(curve) == (800, 450)
    assert done.stderr == ""  # the progress bar is drawn on a terminal only, not on a pipe

    text = main_output(["--dataset", "iris", "--url", url, "--mode", "learn", "--quiet"])
    assert text.splitlines()[1].split() == ["examples", "150"]
    assert "mistake rate" in text and "examples/s" in text


def main_output(args: list[str]) -> str:
    return run_main(args)[1]


def test_the_cli_says_what_is_wrong(url: str, tmp_path: Path) -> None:
    code, _, err = run_main(["--dataset", "nope", "--url", url])
    assert code == 2 and "Unknown dataset 'nope'" in err
    code, _, err = run_main(["--dataset", "iris", "--mode", "learn", "--delay", "3"])
    assert code == 2 and "--delay" in err
    code, _, err = run_main(["--csv", str(tmp_path / "missing.csv"), "--url", url])
    assert code == 2 and "missing.csv" in err
    with Client(url) as c:
        c.create_model("iris", n_features=2)
    code, _, err = run_main(["--dataset", "iris", "--url", url, "--quiet"])
    assert code == 2 and "n_features=2" in err
    code, _, err = run_main(["--dataset", "iris", "--model", "bad name!", "--url", url])
    assert code == 2 and "'bad name!' is not a model's name" in err  # refused before it sends
    closed = url.rsplit(":", 1)[0] + ":1"
    code, _, err = run_main(["--dataset", "iris", "--url", closed, "--quiet"])
    assert code == 6 and "cannot reach" in err  # the code perceptron models gives


# --- datasets -----------------------------------------------------------------------------


def test_csv_with_a_header_and_a_named_label(tmp_path: Path) -> None:
    path = tmp_path / "flowers 2.csv"
    path.write_text("length,colour,width\n1.5,red,2\n0.5,blue,-1e-3\n\n3,red,4\n")
    data = rp.load_csv(path, "colour")
    assert data.name == "flowers_2"
    assert data.rows == [[1.5, 2.0], [0.5, -0.001], [3.0, 4.0]]
    assert data.labels == ["red", "blue", "red"]
    assert (data.n_features, data.classes) == (2, ["blue", "red"])


def test_csv_without_a_header(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("1,2,-1\n3,4,+1\n5,6,1.0\n")
    data = rp.load_csv(path)
    assert data.rows == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert data.labels == [-1, 1, 1] and data.classes == [-1, 1]
    first = rp.load_csv(path, "0")
    assert first.rows == [[2.0, -1.0], [4.0, 1.0], [6.0, 1.0]] and first.labels == [1, 3, 5]
    header = tmp_path / "header.csv"
    header.write_text("a,b,y\n1,2,0\n3,4,1\n")
    assert rp.load_csv(header).rows == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize(
    ("text", "label_column", "message"),
    [
        ("1,2,0\n1,x,1\n", None, "line 2: 'x' is not a number"),
        ("1,2,0\n1,2\n", None, "line 2: 2 fields"),
        ("1,2,0\n", "y", "no column named 'y'"),
        ("1,2,0\n", "5", "no column 5"),
        ("1,nan,0\n", None, "not a finite number"),
        ("1,2,0\n1e15,-1e15,1\n1,1.1e15,0\n", None, "Example 3 of 'bad' has a value past"),
        ("", None, "no rows"),
    ],
)
def test_csv_errors(tmp_path: Path, text: str, label_column: str | None, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(rp.ReplayError, match=message):
        rp.load_csv(path, label_column)


def test_data_of_one_class_makes_no_model(url: str, tmp_path: Path) -> None:
    """A model needs two classes: refused (exit 2) before anything is made, or deleted with
    --reset; a model that exists learns them."""
    path = tmp_path / "one.csv"
    path.write_text("a,b,label\n1,2,x\n3,4,x\n")
    for reset in ([], ["--reset"]):
        code, _, err = run_main(["--csv", str(path), "--url", url, "--quiet", *reset])
        assert code == 2 and "needs two classes at least" in err, err
    with Client(url) as c:
        c.create_model("one", classes=["x", "y"], n_features=2)
        code, _, err = run_main(["--csv", str(path), "--url", url, "--quiet", "--reset"])
        assert code == 2 and c.read_model("one").counters.seen == 0  # (not deleted)
        assert run_main(["--csv", str(path), "--url", url, "--quiet"])[0] == 0
        assert c.read_model("one").counters.seen == 2


def test_files_replay_through_the_service(url: str, tmp_path: Path) -> None:
    csv_path = tmp_path / "three.csv"
    rows = [(i % 3, (i * 7) % 5, ["x", "y", "z"][i % 3]) for i in range(30)]
    csv_path.write_text("a,b,kind\n" + "".join(f"{a},{b},{k}\n" for a, b, k in rows))
    code, out, _ = run_main(["--csv", str(csv_path), "--url", url, "--json", "--quiet"])
    assert code == 0
    with Client(url) as c:
        info = c.read_model("three")
    assert (info.config.classes, info.config.n_features, info.config.multiclass) == (
        ["x", "y", "z"],
        2,
        "multiclass",
    )
    assert json.loads(out)["examples"] == info.counters.feedback == 30
    assert json.loads(out)["mistakes"] == info.counters.mistakes

    svm = tmp_path / "svm.txt"
    svm.write_text("".join(f"{1 if i % 2 else -1} 1:{i} 5:{i % 4}\n" for i in range(20)))
    args = ["--libsvm", str(svm), "--url", url, "--mode", "learn", "--shuffle", "3", "--quiet"]
    assert run_main(args)[0] == 0
    with Client(url) as c:
        info = c.read_model("svm")
    assert (info.config.classes, info.config.n_features, info.counters.learned) == ([-1, 1], 5, 20)


@pytest.mark.parametrize(
    ("name", "rows", "features", "classes"),
    [
        ("breast_cancer", 569, 30, 2),
        ("digits", 1797, 64, 10),
        ("iris", 150, 4, 3),
        ("wine", 178, 13, 3),
        ("Phishing", 1250, 9, 2),
        ("turning", 12_000, 10, 2),
    ],
)
def test_bundled_datasets(name: str, rows: int, features: int, classes: int) -> None:
    data = rp.load_dataset(name)
    assert (len(data), data.n_features, len(data.classes)) == (rows, features, classes)
    assert data.name == name.lower()
    assert all(isinstance(y, int) for y in data.labels)
    shuffled = data.shuffled(7)
    assert shuffled.rows != data.rows and sorted(shuffled.labels) == sorted(data.labels)
    assert shuffled.rows == data.shuffled(7).rows


def test_a_multiclass_dataset_through_the_service(make_service: MakeService) -> None:
    url = str(make_service(default_model=False).base_url)
    digits = rp.load_dataset("digits")
    s = rp.replay(
        digits, rp.ReplayOptions(url, multiclass="ovr", stream=rp.StreamOptions("learn", batch=200))
    )
    with Client(url) as c:
        info = c.read_model("digits")
    assert info.config.multiclass == "ovr" and info.config.classes == list(range(10))
    assert (s.examples, s.mistakes) == (1797, 293)  # the parity table of docs/conventions.md
    assert (info.counters.learned, info.counters.mistakes) == (1797, 293)


def turned_csv(path: Path, n: int = 1200) -> Path:
    """Two features whose label is the sign of x0 for the first half, then of -x0."""
    rng = np.random.default_rng(8)
    xs = rng.normal(size=(n, 2)).round(4)
    ys = np.where(xs[:, 0] > 0, 1, -1) * np.repeat([1, -1], [n // 2, n - n // 2])
    path.write_text("".join(f"{a},{b},{y}\n" for (a, b), y in zip(xs, ys, strict=True)))
    return path


def test_a_replay_with_a_detector_reports_and_draws_its_detections(
    url: str, tmp_path: Path
) -> None:
    """--drift makes the model with that detector; the summary lists its warnings and drifts
    at the replay's examples, as GET .../drift does, and the curve draws them."""
    data = turned_csv(tmp_path / "turned.csv")
    curve = tmp_path / "curve.png"
    drift = '{"detector": "ddm", "warm_start": 20}'
    cmd = [sys.executable, "-m", "service.cli.main", "replay", "--csv", str(data), "--url", url]
    cmd += ["--mode", "learn", "--batch", "50", "--drift", drift, "--curve", str(curve)]
    done = subprocess.run([*cmd, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    with Client(url) as c:
        report = c.drift("turned")
    assert report.drift is not None and report.drift["warm_start"] == 20
    assert summary["drift"] == [{"at": e.at_seen, "kind": e.kind} for e in report.events]
    assert any(e["kind"] == "drift" and e["at"] > 600 for e in summary["drift"])
    assert summary["drifts"] == sum(e["kind"] == "drift" for e in summary["drift"])
    assert summary["drift_warnings"] == sum(e["kind"] == "warning" for e in summary["drift"])
    assert valid_png(curve) == (800, 450)
    # Again, on from there: its events are counted from the replay's own first example.
    text = main_output(["--csv", str(data), "--url", url, "--mode", "learn", "--quiet"])
    again = [line for line in text.splitlines() if line.startswith("drift")]
    with Client(url) as c:
        later = [e for e in c.drift("turned").events if e.at_seen > 1200]
    drifts = [f"{e.at_seen - 1200:,}" for e in later if e.kind == "drift"]
    assert again and again[0].split(None, 1)[1].startswith(f"{len(drifts)} drift")
    assert all(at in again[0] for at in drifts)
    plain = main_output(["--dataset", "iris", "--url", url, "--mode", "learn", "--quiet"])
    assert not any(line.startswith("drift") for line in plain.splitlines())
    # --drift is a model's the replay makes: another detector on a model that exists, or a bad
    # one with --reset, is refused before anything is sent or deleted.
    for drift, reset in (('{"detector": "eddm"}', []), ('{"detector": "ddm", "warm_start": 0}',
                         ["--reset"])):  # fmt: skip
        refused = subprocess.run([*cmd[:-4], "--drift", drift, *reset], cwd=ROOT,
                                 capture_output=True, text=True, timeout=120)  # fmt: skip
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        with Client(url) as c:
            assert c.read_model("turned").counters.seen == 2400  # (kept, learned no more)
    assert "exists with drift detector" in refused.stderr or "warm_start" in refused.stderr


def test_the_curve_marks_each_warning_and_drift() -> None:
    outcomes = [i % 4 == 0 for i in range(300)]
    events = [(100, "warning"), (130, "drift"), (200, "warning"), (240, "drift")]
    s = rp.Summary("m", "learn", 1, 1, 0, 1.0, outcomes, drift=events)
    (ax,) = rp.curve_figure(s, window=50).axes
    lines = ax.get_lines()[2:]  # (after the two curves)
    assert [np.asarray(line.get_xdata())[0] for line in lines] == [100, 200, 130, 240]
    legend = ax.get_legend()
    assert legend is not None
    names = [t.get_text() for t in legend.get_texts()]
    assert names[2:] == ["drift warning", "drift detected"]
    s.drift_counts = (2, 2)
    assert "drift         2 drifts (at example 130, 240); 2 warnings\n" in s.text()
    s.drift_counts = (40, 12)  # (more than the model lists: its counts, and what it lists)
    said = (
        "drift         12 drifts (at example 130, 240); 40 warnings; the model lists its last 4\n"
    )
    assert said in s.text()
