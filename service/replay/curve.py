"""The learning curve of a replay: its mistake rate against examples, as points or a PNG."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path

from .errors import ReplayError
from .summary import Summary


def curve_points(
    outcomes: Sequence[bool], window: int
) -> tuple[list[int], list[float], list[float]]:
    """Examples 1..n, the cumulative mistake rate, and the rate over the last ``window``."""
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


def write_curve(summary: Summary, path: str | Path, window: int = 100, title: str = "") -> Path:
    """Draw the mistake rate against examples (cumulative and moving) to a PNG (Agg)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import PercentFormatter
    except ImportError as e:
        raise ReplayError(
            "--curve needs matplotlib: pip install 'perceptron-service[replay]'."
        ) from e
    xs, cumulative, moving = curve_points(summary.outcomes, window)
    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(xs, moving, color="#9bb7d4", linewidth=1, label=f"last {window} examples")
    ax.plot(xs, cumulative, color="#1f4e79", linewidth=2, label="cumulative")
    ax.set_xlabel("examples")
    ax.set_ylabel("mistake rate")
    ax.set_xlim(1, max(2, len(xs)))
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right")
    how = "predict + feedback" if summary.mode == "predict" else "learn"
    ax.set_title(
        title
        or f"{summary.model} ({how}): {summary.mistakes} mistakes in {summary.examples} "
        f"examples ({summary.mistake_rate:.1%})"
    )
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png")
    return path
