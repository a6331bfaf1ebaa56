"""The learning curve of a replay: its mistake rate against examples, as points or a PNG."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from service.replay.replay_error import ReplayError
from service.replay.summary import Summary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CUMULATIVE_LABEL = "cumulative: mistakes so far / examples so far"
DRIFT_LABELS = {
    "warning": "drift warning",
    "drift": "drift detected",
    "retrained": "drift detected: retrained",
}
# (color, line width, line style) of each kind's line
DRIFT_STYLES = {
    "warning": ("#d08c2a", 0.8, ":"),
    "drift": ("#b3261e", 1.4, "-"),
    "retrained": ("#1b7f3b", 1.6, "-"),
}


def window_label(window: int) -> str:
    """The legend of the moving line."""
    return f"last {window} example{'s' if window != 1 else ''}"


def curve_points(
    outcomes: Sequence[bool], window: int
) -> tuple[list[int], list[float], list[float]]:
    """Examples 1..n, the cumulative mistake rate, and the rate over the last ``window``
    (over all the examples so far while there are fewer than ``window``)."""
    xs, cumulative, moving = [], [], []
    total = 0
    recent: deque[bool] = deque(maxlen=max(1, window))
    in_window = 0
    for n, mistake in enumerate(outcomes, 1):
        if len(recent) == recent.maxlen:
            in_window -= recent[0]
        recent.append(mistake)
        in_window += mistake
        total += mistake
        xs.append(n)
        cumulative.append(total / n)
        moving.append(in_window / len(recent))
    return xs, cumulative, moving


def _title(summary: Summary) -> str:
    how = "predict + feedback" if summary.mode == "predict" else "learn"
    title = (
        f"{summary.model} ({how}): {summary.mistakes} mistakes in {summary.examples} "
        f"examples ({summary.mistake_rate:.1%})"
    )
    if summary.before.trained:
        title += f"\ncontinued: the model had learned {summary.before.examples} examples before"
    return title


def curve_figure(summary: Summary, window: int = 100, title: str = "") -> Figure:
    """The figure of the learning curve: two labelled lines against the examples.

    "cumulative": the mistakes so far over the examples so far, from the first example;
    "last N examples": the mistakes among the last N (``window``) over N, from the N-th
    example on (N is the number of examples when there are fewer).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import PercentFormatter
    except ImportError as e:
        raise ReplayError(
            "--curve needs matplotlib: pip install 'perceptron-service[replay]'."
        ) from e
    window = max(1, min(window, summary.examples))
    xs, cumulative, moving = curve_points(summary.outcomes, window)
    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(
        xs[window - 1 :],
        moving[window - 1 :],
        color="#7fa7d0",
        linewidth=1.2,
        marker="o" if window == len(xs) else None,  # one point: seen as a dot
        label=window_label(window),
    )
    ax.plot(xs, cumulative, color="#1f4e79", linewidth=2.2, label=CUMULATIVE_LABEL)
    for kind, (color, width, style) in DRIFT_STYLES.items():  # the detector's, where they came
        ats = [at for at, k in summary.drift or () if k == kind]
        for i, at in enumerate(ats):
            label = DRIFT_LABELS[kind] if i == 0 else "_nolegend_"
            ax.axvline(at, color=color, linewidth=width, linestyle=style, label=label)
    ax.set_xlabel("examples" if not summary.before.trained else "examples of this replay")
    ax.set_ylabel("mistake rate")
    ax.set_xlim(1, max(2, len(xs)))
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right")
    ax.set_title(title or _title(summary), fontsize=11)
    fig.tight_layout()
    return fig


def write_curve(summary: Summary, path: str | Path, window: int = 100, title: str = "") -> Path:
    """Draw the learning curve (``curve_figure``) to a PNG (matplotlib's Agg backend)."""
    fig = curve_figure(summary, window, title)
    path = Path(path)
    fig.savefig(path, format="png")
    return path
