"""The replay's demo shows what it says: the perceptron learns the digits visibly, the curve
labels its two lines, and a replay into a model that has learned before says so.

The demo: ``perceptron replay --dataset digits --multiclass ovr --rate 100 --curve curve.png``.
In file order the one-vs-rest perceptron gets 54 of the first 100 digits wrong and 10 of the
last 100 (293 mistakes in 1797, as scikit-learn's ``Perceptron``: test_sklearn_parity.py and
test_replay.py through the service); the cumulative rate falls from 54% to 16%. The service
and the replay run in-process here (tests/inprocess.py).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from functools import partial
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from matplotlib.lines import Line2D

from perceptron_client import Client
from service import replay as rp
from service.cli import replay_command as command
from service.learner import ModelConfig, Perceptron
from service.settings import Settings

from .inprocess import BASE_URL, InProcessService
from .run_command import run_replay as run_main
from .test_inprocess_replay import BAR_END

DIGITS = rp.load_dataset("digits")


def demo_outcomes() -> list[bool]:
    """The demo's mistakes, by the pure learner: digits in file order, one-vs-rest."""
    config = ModelConfig(classes=tuple(DIGITS.classes), n_features=64, multiclass="ovr")
    p = Perceptron(config)
    return [p.learn(x, y).mistake for x, y in zip(DIGITS.rows, DIGITS.labels, strict=True)]


def test_the_demo_learns_visibly_over_the_last_100_examples() -> None:
    outcomes = demo_outcomes()
    xs, cumulative, moving = rp.curve_points(outcomes, 100)
    assert (len(outcomes), sum(outcomes)) == (1797, 293)  # scikit-learn's count
    assert (sum(outcomes[:100]), sum(outcomes[-100:])) == (54, 10)
    assert moving[99] == 0.54 and moving[-1] == 0.10
    # Learning, not luck: from the 200th example on, the window never climbs back to half of
    # where it started; half of the time it is at 14% or less, at best 2% (near 1400).
    later = moving[199:]
    assert max(later) == 0.26 < moving[99] / 2
    assert sorted(later)[len(later) // 2] == 0.14 and min(later) == 0.02
    assert cumulative[99] == 0.54 and round(cumulative[-1], 3) == 0.163
    assert all(b <= a + 0.01 for a, b in pairwise(cumulative[99::100]))  # every 100: falls


def xy(line: Line2D) -> tuple[list[float], list[float]]:
    """A line's points, as lists."""
    xs: list[float] = np.asarray(line.get_xdata()).tolist()
    ys: list[float] = np.asarray(line.get_ydata()).tolist()
    return xs, ys


def test_the_curve_draws_both_lines_and_says_what_each_is(tmp_path: Path) -> None:
    outcomes = demo_outcomes()
    summary = rp.Summary("digits", "predict", 1, 1, 0, 18.0, outcomes)
    fig = rp.curve_figure(summary, window=100)
    (ax,) = fig.axes
    window, cumulative = ax.get_lines()
    assert window.get_label() == rp.window_label(100) == "last 100 examples"
    assert cumulative.get_label() == rp.CUMULATIVE_LABEL
    assert rp.CUMULATIVE_LABEL == "cumulative: mistakes so far / examples so far"
    legend = ax.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == [
        "last 100 examples",
        "cumulative: mistakes so far / examples so far",
    ]
    xs, rates, moving = rp.curve_points(outcomes, 100)
    # The cumulative line from the first example; the window's once it holds 100 examples.
    assert xy(cumulative) == (xs, rates)
    assert xy(window) == (xs[99:], moving[99:])
    assert xy(window)[1][0] == 0.54 and xy(window)[1][-1] == 0.10
    assert ax.get_title() == "digits (predict + feedback): 293 mistakes in 1797 examples (16.3%)"
    assert ax.get_xlabel() == "examples"
    path = rp.write_curve(summary, tmp_path / "curve.png")
    assert path.read_bytes().startswith(b"\x89PNG")

    # A replay that continued a model says so; one shorter than the window has a window of
    # all its examples (one point).
    again = rp.Summary("d", "learn", 1, 1, 0, 1.0, outcomes[:30], rp.Before(1797, 293, 293))
    (ax,) = rp.curve_figure(again, window=100).axes
    window, _ = ax.get_lines()
    assert window.get_label() == "last 30 examples" and xy(window)[0] == [30]
    assert "continued: the model had learned 1797 examples before" in ax.get_title()
    assert ax.get_xlabel() == "examples of this replay"


# --- a replay into a model that has learned before --------------------------------------------


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessService]:
    """The service in-process; the command's replays reach it (whatever --url says)."""
    s = InProcessService(Settings(auth=False, default_model=False)).start()
    monkeypatch.setattr(command, "replay", partial(rp.replay, transport=s.async_transport()))
    yield s
    s.stop()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def lines(text: str) -> dict[str, str]:
    """The summary's table: its keys and their values."""
    return {line[:14].strip(): line[14:] for line in text.splitlines()}


IRIS = ["--dataset", "iris", "--shuffle", "1", "--limit", "30", "--model", "again", "--quiet"]


def test_a_second_replay_says_up_front_that_it_continues_the_model(
    service: InProcessService,
) -> None:
    code, out, err = run_main(IRIS)
    first = lines(out)
    assert (code, err, first["examples"]) == (0, "", "30")
    assert "continued" not in first and "model total" not in first
    with Client(BASE_URL, transport=service.transport()) as c:
        info = c.read_model("again")
    m, v = info.counters.mistakes, info.version
    assert first["mistakes"] == str(m) and info.counters.seen == 30

    code, out, err = run_main(IRIS)
    assert code == 0
    assert err == (
        f"perceptron replay: model 'again' already has 30 labelled examples ({m} mistakes, "
        f"version {v}); continuing to train it: add --reset to start from zero weights.\n"
    )
    second = lines(out)
    assert second["continued"] == (
        f"the model had learned 30 examples ({m} mistakes) before this replay (--reset: from zero)"
    )
    again = int(second["mistakes"])
    assert again < m  # it goes on learning: fewer mistakes the second time
    assert second["model total"] == f"60 examples, {m + again} mistakes (before + this replay)"
    assert list(second)[:3] == ["model", "continued", "examples"]

    code, out, err = run_main([*IRIS, "--json"])
    before = json.loads(out)["before"]
    assert before == {"examples": 60, "mistakes": m + again, "version": before["version"]}
    assert "already has 60 labelled examples" in err

    code, out, err = run_main([*IRIS, "--reset"])  # from zero: as the first time, silently
    assert (code, err) == (0, "") and lines(out)["mistakes"] == str(m)
    assert "continued" not in lines(out)


def test_the_notice_comes_before_the_progress_bar_ends(service: InProcessService) -> None:
    assert run_main(IRIS)[0] == 0
    code, _, err = run_main(IRIS[:-1], Terminal())  # a bar on a terminal
    assert code == 0
    notice = err.index("perceptron replay: model 'again' already has 30 labelled examples")
    assert notice < err.index("30/30 [") and BAR_END.search(err)
    assert err.count("already has") == 1


def test_the_replay_reports_what_the_model_had(service: InProcessService) -> None:
    data = rp.load_dataset("iris").shuffled(1).head(30)
    options = rp.ReplayOptions(BASE_URL, model="m", multiclass="ovr")
    transport = service.async_transport()
    said: list[str] = []
    first = rp.replay(data, options, transport=transport, notice=said.append)
    assert said == [] and first.before == rp.Before() and not first.before.trained
    # Asked for another strategy, the existing model keeps its own, and the notice says so.
    options = rp.ReplayOptions(BASE_URL, model="m")
    second = rp.replay(data, options, transport=transport, notice=said.append)
    assert second.before == rp.Before(30, first.mistakes, second.before.version, "ovr")
    assert second.before.version > 0 and second.before.trained
    assert said == [
        f"model 'm' already has 30 labelled examples ({first.mistakes} mistakes, version "
        f"{second.before.version}); continuing to train it: add --reset to start from zero "
        "weights (it keeps its multiclass='ovr', not 'multiclass')."
    ]

    # An imported model comes with its counts: the notice names them.
    with Client(BASE_URL, transport=service.transport()) as c:
        c.import_model("copy", c.export_model("m"))
        info = c.read_model("copy")
    said.clear()
    copy = rp.ReplayOptions(BASE_URL, model="copy", multiclass="ovr")
    third = rp.replay(data, copy, transport=transport, notice=said.append)
    assert third.before == rp.Before(60, info.counters.mistakes, info.version, "ovr")
    assert len(said) == 1 and said[0].startswith("model 'copy' already has 60 labelled examples")

    # Weights that counted no example (never so through the API, but a store may hold them).
    weights_only = rp.Before(version=7)
    assert weights_only.trained and weights_only.notice("w") == (
        "model 'w' already has trained weights (version 7); continuing to train it: add "
        "--reset to start from zero weights."
    )
    text = rp.Summary("w", "learn", 1, 1, 0, 1.0, [True, False], weights_only).text()
    assert lines(text)["continued"] == (
        "the model had learned weights of version 7 before this replay (--reset: from zero)"
    )
    assert lines(text)["model total"] == "2 examples, 1 mistake (before + this replay)"


def test_the_drift_demo_detects_the_turn_as_docs_metrics_md_says(service: InProcessService) -> None:
    """docs/metrics.md's "A drift, detected": an averaged perceptron with DDM replayed through
    the turning stream, 100 examples a request: 7 % mistakes before the turn, 29 % after, one
    drift at example 6,092 and 22 warnings, as its summary says and its curve draws (the last
    200 under 16 % before the turn, 42 % at most after it, 25.5 % at the end)."""
    with Client(BASE_URL, transport=service.transport()) as c:
        c.create_model("turning", n_features=10, averaged=True, drift={"detector": "ddm"})
    stream = rp.StreamOptions("learn", batch=100)
    options = rp.ReplayOptions(BASE_URL, model="turning", stream=stream)
    summary = rp.replay(rp.load_dataset("turning"), options, transport=service.async_transport())
    o = summary.outcomes
    assert (round(sum(o[:6000]) / 6000, 2), round(sum(o[6000:]) / 6000, 2)) == (0.07, 0.29)
    assert summary.drift is not None
    assert [at for at, kind in summary.drift if kind == "drift"] == [6092]
    assert sum(kind == "warning" for _, kind in summary.drift) == 22
    assert min(at for at, kind in summary.drift if kind == "warning") == 6033
    assert "drift         1 drift (at example 6,092); 22 warnings\n" in summary.text()
    _, _, last_200 = rp.curve_points(o, 200)  # (what the curve of the docs' command draws)
    assert max(last_200[199:6000]) < 0.16 and max(last_200[6000:]) == 0.42
    assert last_200[-1] == 0.255
    # From the command line, --drift watches a model the replay makes.
    code, out, err = run_main(["--dataset", "turning", "--model", "again", "--mode", "learn",
                               "--batch", "100", "--drift", "ddm", "--json"])  # fmt: skip
    assert (code, err) == (0, "") and json.loads(out)["drift"]
    with Client(BASE_URL, transport=service.transport()) as c:
        assert c.read_model("again").config.drift == c.drift("again").drift
    code, out, _ = run_main(["--dataset", "turning", "--model", "plain", "--limit", "50"])
    assert code == 0 and "drift" not in lines(out)  # (a model without a detector)


def test_the_retraining_demo_heals_as_docs_metrics_md_says(service: InProcessService) -> None:
    """docs/metrics.md's "and healed": the same model and stream, retraining at a drift
    ("on_drift": "retrain"): the background learner, trained through the warnings, replaces the
    served learner at the drift (example 6,092), and the mistakes after the turn fall from 29 %
    to 9 % (the last 200 at most 30.5 %, 8.5 % at the end); summary and curve say so."""
    with Client(BASE_URL, transport=service.transport()) as c:
        drift = {"detector": "ddm", "on_drift": "retrain"}
        c.create_model("turning", n_features=10, averaged=True, drift=drift)
    stream = rp.StreamOptions("learn", batch=100)
    options = rp.ReplayOptions(BASE_URL, model="turning", stream=stream)
    summary = rp.replay(rp.load_dataset("turning"), options, transport=service.async_transport())
    o = summary.outcomes
    assert (round(sum(o[:6000]) / 6000, 2), round(sum(o[6000:]) / 6000, 2)) == (0.07, 0.09)
    assert summary.drift is not None
    assert [(at, kind) for at, kind in summary.drift if kind != "warning"] == [(6092, "retrained")]
    assert "drift         1 drift (at example 6,092), 1 retrained; 4 warnings\n" in summary.text()
    _, _, last_200 = rp.curve_points(o, 200)
    assert (max(last_200[6000:]), last_200[-1]) == (0.305, 0.085)
    figure = rp.curve_figure(summary, 200)
    labels = figure.axes[0].get_legend_handles_labels()[1]
    assert "drift detected: retrained" in labels and "drift detected" not in labels
