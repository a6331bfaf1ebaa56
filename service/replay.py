"""``perceptron replay``: stream a dataset through a running service and report its mistakes.

Each example is sent as a prediction whose true label follows as feedback (the default), or
to /learn (``mode="learn"``); one at a time or in batches, from one or more concurrent
clients, with labels optionally arriving ``delay`` examples late. The summary counts the
examples and the mistakes the service reported; ``write_curve`` draws the learning curve.

Datasets: a CSV file, a LIBSVM file, or one bundled with an installed package
(scikit-learn's breast_cancer, digits, iris, wine; River's Phishing: the ``replay`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import os
import re
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, TextIO, TypeVar

import httpx

from .client import (
    DEFAULT_URL,
    AsyncClient,
    Label,
    NotFoundError,
    PerceptronError,
    UnavailableError,
    error_from_item,
)

Mode = Literal["predict", "learn"]
MODES: tuple[Mode, ...] = ("predict", "learn")
DATASETS = ("breast_cancer", "digits", "iris", "wine", "phishing")
T = TypeVar("T")


class ReplayError(Exception):
    """The dataset cannot be read, or does not fit the model of that name."""


# --- datasets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """Dense examples (rows of floats) and their labels, in file order."""

    name: str
    rows: list[list[float]]
    labels: Sequence[Label]

    def __post_init__(self) -> None:
        if not self.rows:
            raise ReplayError(f"The dataset {self.name!r} has no examples.")
        if len(self.rows) != len(self.labels):
            raise ReplayError(f"{len(self.rows)} examples but {len(self.labels)} labels.")
        width = len(self.rows[0])
        if width == 0 or any(len(r) != width for r in self.rows):
            raise ReplayError(f"The examples of {self.name!r} are not all of one length >= 1.")
        kinds = {type(y) for y in self.labels}
        if len(kinds) > 1:
            raise ReplayError(f"The labels of {self.name!r} mix numbers and strings.")

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def n_features(self) -> int:
        return len(self.rows[0])

    @property
    def classes(self) -> list[Label]:
        """The distinct labels, sorted (so a binary model's positive class is the larger)."""
        return sorted(set(self.labels))  # one kind of label, checked above

    def shuffled(self, seed: int) -> Dataset:
        import numpy as np

        order = np.random.default_rng(seed).permutation(len(self.rows)).tolist()
        return Dataset(self.name, [self.rows[i] for i in order], [self.labels[i] for i in order])

    def head(self, n: int) -> Dataset:
        return Dataset(self.name, self.rows[:n], self.labels[:n])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _labels(raw: Sequence[str]) -> list[Label]:
    """Integers when every label is an integer ("1", "-1", "+1", "2.0"); strings otherwise."""
    ints: list[Label] = []
    for text in raw:
        try:
            value = float(text)
        except ValueError:
            return [t.strip() for t in raw]
        if not math.isfinite(value) or value != int(value):
            return [t.strip() for t in raw]
        ints.append(int(value))
    return ints


def _feature(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ReplayError(f"{where}: {text!r} is not a number.") from None
    if not math.isfinite(value):
        raise ReplayError(f"{where}: {text!r} is not a finite number.")
    return value


def model_name_for(stem: str) -> str:
    """A valid model name (1-64 of letters, digits, ``_-.``) made from a file's name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:64].strip(".") or "replay"


def load_csv(path: str | Path, label_column: str | int | None = None) -> Dataset:
    """A CSV file: every column a number but the label's (by name or index; default last).

    The first row is a header when the label column is given by name, or when one of its
    feature fields is not a number.
    """
    path = Path(path)
    with path.open(newline="", encoding="utf-8-sig") as f:
        records = [
            (n, row) for n, row in enumerate(csv.reader(f), 1) if any(c.strip() for c in row)
        ]
    if not records:
        raise ReplayError(f"{path}: no rows.")
    first = records[0][1]
    width = len(first)
    if width < 2:
        raise ReplayError(f"{path}: a row needs at least one feature and a label.")

    def index_of(column: int) -> int:
        if not -width <= column < width:
            raise ReplayError(f"{path}: no column {column} (rows have {width}).")
        return column % width

    column = label_column if label_column is not None else -1
    by_name = isinstance(column, str) and not re.fullmatch(r"[+-]?\d+", column.strip())
    if by_name:
        names = [c.strip() for c in first]
        if str(column).strip() not in names:
            raise ReplayError(f"{path}: no column named {column!r} in the header {names}.")
        label_at = names.index(str(column).strip())
        header = True
    else:
        label_at = index_of(int(column))
        header = any(not _is_number(c) for i, c in enumerate(first) if i != label_at)
    body = records[1:] if header else records
    if not body:
        raise ReplayError(f"{path}: a header but no examples.")
    rows, raw = [], []
    for n, row in body:
        if len(row) != width:
            raise ReplayError(f"{path}, line {n}: {len(row)} fields, the first row has {width}.")
        rows.append([_feature(c, f"{path}, line {n}") for i, c in enumerate(row) if i != label_at])
        raw.append(row[label_at].strip())
    return Dataset(model_name_for(path.stem), rows, _labels(raw))


def load_libsvm(path: str | Path) -> Dataset:
    """A LIBSVM (svmlight) file: ``label index:value ...``, made dense.

    Indices are 1-based unless some index is 0; the number of features is the largest
    index seen. ``qid:`` fields and ``#`` comments are ignored.
    """
    path = Path(path)
    sparse: list[dict[int, float]] = []
    raw: list[str] = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            tokens = line.split("#", 1)[0].split()
            if not tokens:
                continue
            raw.append(tokens[0])
            example: dict[int, float] = {}
            for token in tokens[1:]:
                key, sep, value = token.partition(":")
                if not sep:
                    raise ReplayError(f"{path}, line {n}: {token!r} is not 'index:value'.")
                if key == "qid":
                    continue
                if not key.isdigit():
                    raise ReplayError(f"{path}, line {n}: {key!r} is not a feature index.")
                example[int(key)] = _feature(value, f"{path}, line {n}")
            sparse.append(example)
    if not sparse:
        raise ReplayError(f"{path}: no examples.")
    indices = {i for example in sparse for i in example}
    if not indices:
        raise ReplayError(f"{path}: no features.")
    offset = 0 if 0 in indices else 1
    width = max(indices) + 1 - offset
    rows = []
    for example in sparse:
        row = [0.0] * width
        for i, v in example.items():
            row[i - offset] = v
        rows.append(row)
    return Dataset(model_name_for(path.stem), rows, _labels(raw))


def load_dataset(name: str) -> Dataset:
    """A dataset bundled with an installed package (no download): see ``DATASETS``."""
    key = name.strip().lower()
    if key == "phishing":
        try:
            from river.datasets import Phishing
        except ImportError as e:
            raise ReplayError(
                "The Phishing dataset comes with River: pip install 'perceptron-service[replay]'."
            ) from e
        rows: list[list[float]] = []
        labels: list[Label] = []
        for x, y in Phishing():
            rows.append([float(v) for v in x.values()])
            labels.append(int(y))
        return Dataset("phishing", rows, labels)
    if key not in DATASETS:
        raise ReplayError(f"Unknown dataset {name!r}; bundled: {', '.join(DATASETS)}.")
    try:
        from sklearn import datasets  # type: ignore[import-untyped]
    except ImportError as e:
        raise ReplayError(
            f"The {key} dataset comes with scikit-learn: pip install 'perceptron-service[replay]'."
        ) from e
    X, y = getattr(datasets, f"load_{key}")(return_X_y=True)
    return Dataset(key, X.astype(float).tolist(), [int(v) for v in y])


# --- progress -----------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on a terminal; on anything else, a line every 10%."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._last_tenth = 0
        self._last_done = -1

    def update(self, done: int, mistakes: int, final: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            if not final and now - self._last_draw < 0.1:
                return
        else:
            tenth = done * 10 // max(self.total, 1)
            if tenth <= self._last_tenth and not (final and done != self._last_done):
                return
            self._last_tenth = tenth
        self._last_done = done
        self._last_draw = now
        width = 24
        filled = width * done // max(self.total, 1)
        rate = f"{mistakes / done:6.2%}" if done else "   -  "
        speed = done / max(now - self.start, 1e-9)
        line = (
            f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
            f"mistakes {mistakes} ({rate}) {speed:,.0f} ex/s"
        )
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K" + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# --- the replay ---------------------------------------------------------------------------


@dataclass
class Summary:
    """What a replay saw: one entry of ``outcomes`` per example (True: a mistake)."""

    model: str
    mode: Mode
    batch: int
    concurrency: int
    delay: int
    seconds: float
    outcomes: list[bool] = field(repr=False)

    @property
    def examples(self) -> int:
        return len(self.outcomes)

    @property
    def mistakes(self) -> int:
        return sum(self.outcomes)

    @property
    def mistake_rate(self) -> float:
        return self.mistakes / self.examples if self.examples else 0.0

    @property
    def throughput(self) -> float:
        """Labelled examples per second."""
        return self.examples / self.seconds if self.seconds > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "mode": self.mode,
            "batch": self.batch,
            "concurrency": self.concurrency,
            "delay": self.delay,
            "examples": self.examples,
            "mistakes": self.mistakes,
            "mistake_rate": self.mistake_rate,
            "seconds": self.seconds,
            "throughput": self.throughput,
        }

    def text(self) -> str:
        how = "predict + feedback" if self.mode == "predict" else "learn"
        clients = f"{self.concurrency} client{'s' if self.concurrency > 1 else ''}"
        lines = [
            ("model", f"{self.model} ({how}; {clients}; batch {self.batch}; delay {self.delay})"),
            ("examples", str(self.examples)),
            ("mistakes", str(self.mistakes)),
            ("mistake rate", f"{self.mistake_rate:.2%}"),
            ("time", f"{self.seconds:.2f} s"),
            ("throughput", f"{self.throughput:,.1f} examples/s"),
        ]
        return "".join(f"{k:<14}{v}\n" for k, v in lines)


async def _retrying(call: Callable[[], Awaitable[T]], retries: int) -> T:
    """Retry an answer 503 (store or model busy), waiting as the service asks."""
    for attempt in range(retries):
        try:
            return await call()
        except UnavailableError as e:
            await asyncio.sleep(min(e.retry_after or 0.5, 5.0) * (1 + attempt) / 2)
    return await call()


async def ensure_model(
    client: AsyncClient, name: str, data: Dataset, multiclass: str = "multiclass"
) -> bool:
    """Create the model for ``data`` unless one fits already; True when created."""
    try:
        info = await client.read_model(name)
    except NotFoundError:
        config: dict[str, Any] = {"classes": data.classes, "n_features": data.n_features}
        if len(data.classes) > 2:
            config["multiclass"] = multiclass
        await client.create_model(name, **config)
        return True
    have = info.config
    if have.n_features != data.n_features:
        raise ReplayError(
            f"Model {name!r} exists with n_features={have.n_features}, the data has "
            f"{data.n_features}: choose another --model, or --reset it."
        )
    missing = [c for c in data.classes if c not in have.classes]
    if missing:
        raise ReplayError(
            f"Model {name!r} exists with classes {have.classes}, which lack {missing}: "
            "choose another --model, or --reset it."
        )
    return False


async def replay_async(
    client: AsyncClient,
    model: str,
    data: Dataset,
    *,
    mode: Mode = "predict",
    batch: int = 1,
    concurrency: int = 1,
    delay: int = 0,
    rate: float | None = None,
    retries: int = 5,
    progress: Progress | None = None,
) -> Summary:
    """Stream ``data`` through ``model`` (which must exist) and count the mistakes.

    ``delay`` (predict mode): each true label is sent once ``delay`` more predictions have
    been answered, as labels arrive late in a real stream; the last ones at the end.
    ``rate``: at most that many examples a second (to watch a replay on the dashboard).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    if batch < 1 or concurrency < 1 or delay < 0 or (rate is not None and rate <= 0):
        raise ValueError("batch and concurrency must be >= 1, delay >= 0, rate > 0")
    if delay and mode != "predict":
        raise ValueError("delay applies to predict mode: /learn takes the label at once")
    n = len(data)
    outcomes: list[bool | None] = [None] * n
    done = [0, 0]  # labelled examples, mistakes

    def record(i: int, mistake: bool) -> None:
        outcomes[i] = mistake
        done[0] += 1
        done[1] += mistake

    def tick() -> None:
        if progress is not None:
            progress.update(done[0], done[1])

    chunks = iter([list(range(s, min(s + batch, n))) for s in range(0, n, batch)])
    pending: deque[tuple[int, str]] = deque()  # (example, prediction_id) awaiting its label

    async def send_feedback(items: list[tuple[int, str]]) -> None:
        if batch == 1:
            for i, pid in items:
                r = await _retrying(partial(client.feedback, pid, data.labels[i]), retries)
                record(i, r.mistake)
        else:
            pairs = [(pid, data.labels[i]) for i, pid in items]
            rb = await _retrying(partial(client.feedback_batch, pairs), retries)
            for (i, _), result in zip(items, rb.results, strict=True):
                if result.error is not None:
                    raise error_from_item(result.error)
                record(i, bool(result.mistake))
        tick()

    async def step(chunk: list[int]) -> None:
        rows = [data.rows[i] for i in chunk]
        labels = [data.labels[i] for i in chunk]
        if mode == "learn":
            if batch == 1:
                r = await _retrying(partial(client.learn, model, rows[0], labels[0]), retries)
                record(chunk[0], r.mistake)
            else:
                rb = await _retrying(partial(client.learn_batch, model, rows, labels), retries)
                for i, mistake in zip(chunk, rb.mistakes, strict=True):
                    record(i, mistake)
            tick()
            return
        if batch == 1:
            p = await _retrying(partial(client.predict, model, rows[0]), retries)
            pending.append((chunk[0], p.prediction_id))
        else:
            pb = await _retrying(partial(client.predict_batch, model, rows), retries)
            pending.extend(zip(chunk, (p.prediction_id for p in pb.predictions), strict=True))
        # Take the overdue labels before any await: concurrent workers share ``pending``.
        due = [pending.popleft() for _ in range(max(0, len(pending) - delay))]
        if due:
            await send_feedback(due)

    sent = [0]

    async def pace(examples: int) -> None:
        if rate:
            due = start + sent[0] / rate
            sent[0] += examples
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)

    async def worker() -> None:
        for chunk in chunks:  # one iterator shared by the workers: each chunk goes once
            await pace(len(chunk))
            await step(chunk)

    start = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    rest = list(pending)
    groups = iter([rest[s : s + batch] for s in range(0, len(rest), batch)])

    async def flusher() -> None:
        for group in groups:
            await send_feedback(group)

    await asyncio.gather(*(flusher() for _ in range(concurrency)))
    seconds = time.monotonic() - start
    if progress is not None:
        progress.update(done[0], done[1], final=True)
    missing = [i for i, o in enumerate(outcomes) if o is None]
    if missing:  # cannot happen: every example is predicted, then labelled once
        raise AssertionError(f"{len(missing)} examples got no answer")
    return Summary(model, mode, batch, concurrency, delay, seconds, [bool(o) for o in outcomes])


def replay(
    data: Dataset,
    *,
    url: str = DEFAULT_URL,
    api_key: str | None = None,
    model: str | None = None,
    multiclass: str = "multiclass",
    reset: bool = False,
    mode: Mode = "predict",
    batch: int = 1,
    concurrency: int = 1,
    delay: int = 0,
    rate: float | None = None,
    timeout: float = 30.0,
    progress: Progress | None = None,
) -> Summary:
    """Create the model when missing (after deleting it with ``reset``), then replay."""
    name = model or data.name

    async def run() -> Summary:
        async with AsyncClient(url, api_key, timeout, max_connections=concurrency * 2) as client:
            if reset:
                try:
                    await client.delete_model(name)
                except NotFoundError:
                    pass
            await ensure_model(client, name, data, multiclass)
            return await replay_async(
                client,
                name,
                data,
                mode=mode,
                batch=batch,
                concurrency=concurrency,
                delay=delay,
                rate=rate,
                progress=progress,
            )

    return asyncio.run(run())


# --- the learning curve -------------------------------------------------------------------


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


# --- command line -------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


DESCRIPTION = """\
Stream a dataset through a running service and report its mistakes.

Each example is predicted (POST /predict) and its true label sent as feedback (POST /feedback),
or sent to POST /learn with --mode learn; in batches with --batch N. The model is created when
missing: dense, n_features and classes from the data. The summary counts examples and the
mistakes the service reported.

examples:
  perceptron replay --dataset breast_cancer --curve curve.png
  perceptron replay --dataset digits --multiclass ovr --mode learn --batch 100
  perceptron replay --csv data.csv --label-column y --delay 5 --concurrency 4
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``perceptron replay``."""
    d = p.add_argument_group("data: one of --dataset, --csv, --libsvm")
    source = d.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", metavar="NAME", help=f"bundled: {', '.join(DATASETS)}")
    source.add_argument("--csv", metavar="FILE", help="numeric CSV; header optional")
    source.add_argument("--libsvm", metavar="FILE", help="LIBSVM / svmlight file")
    d.add_argument(
        "--label-column", metavar="COL", help="CSV label column: name or index (default: last)"
    )
    d.add_argument("--shuffle", metavar="SEED", type=int, help="shuffle with this seed")
    d.add_argument("--limit", metavar="N", type=_positive, help="replay only the first N")
    m = p.add_argument_group("model")
    m.add_argument("--model", metavar="NAME", help="model name (default: the dataset's name)")
    m.add_argument(
        "--multiclass",
        choices=["multiclass", "ovr", "ovo"],
        default="multiclass",
        help="strategy for more than two classes, when the model is created",
    )
    m.add_argument("--reset", action="store_true", help="delete the model first if it exists")
    s = p.add_argument_group("stream")
    s.add_argument(
        "--mode",
        choices=MODES,
        default="predict",
        help="predict then feedback (default), or /learn",
    )
    s.add_argument("--batch", metavar="N", type=_positive, default=1, help="examples a request")
    s.add_argument(
        "--concurrency", metavar="K", type=_positive, default=1, help="concurrent clients"
    )
    s.add_argument(
        "--delay",
        metavar="K",
        type=_non_negative,
        default=0,
        help="labels arrive K examples late (predict mode)",
    )
    s.add_argument(
        "--rate",
        metavar="R",
        type=_positive_float,
        help="at most R examples a second (to watch it on the dashboard)",
    )
    o = p.add_argument_group("output")
    o.add_argument("--curve", metavar="FILE.png", help="write the learning curve to a PNG")
    o.add_argument(
        "--window", metavar="N", type=_positive, default=100, help="moving window of the curve"
    )
    o.add_argument("--json", action="store_true", help="print the summary as JSON")
    o.add_argument("--quiet", action="store_true", help="no progress bar")
    c = p.add_argument_group("service")
    c.add_argument("--url", default=DEFAULT_URL, help=f"service URL (default {DEFAULT_URL})")
    c.add_argument(
        "--api-key",
        metavar="KEY",
        default=None,
        help="API key (default: the PERCEPTRON_API_KEY variable)",
    )
    c.add_argument("--timeout", metavar="S", type=float, default=30.0, help="seconds per request")


def _load(args: argparse.Namespace) -> Dataset:
    if args.dataset:
        data = load_dataset(args.dataset)
    elif args.csv:
        data = load_csv(args.csv, args.label_column)
    else:
        data = load_libsvm(args.libsvm)
    if args.shuffle is not None:
        data = data.shuffled(args.shuffle)
    if args.limit is not None:
        data = data.head(args.limit)
    return data


def run(args: argparse.Namespace) -> int:
    """``perceptron replay``: 0 when done, 1 when the service failed, 2 on bad input."""
    err = sys.stderr
    if args.delay and args.mode != "predict":
        err.write("perceptron replay: --delay applies to --mode predict only.\n")
        return 2
    if args.label_column is not None and not args.csv:
        err.write("perceptron replay: --label-column applies to --csv only.\n")
        return 2
    try:
        data = _load(args)
    except (ReplayError, OSError) as e:
        err.write(f"perceptron replay: {e}\n")
        return 2
    name = args.model or data.name
    progress = None if args.quiet else Progress(len(data), name)
    api_key = args.api_key or os.environ.get("PERCEPTRON_API_KEY") or None
    try:
        summary = replay(
            data,
            url=args.url,
            api_key=api_key,
            model=name,
            multiclass=args.multiclass,
            reset=args.reset,
            mode=args.mode,
            batch=args.batch,
            concurrency=args.concurrency,
            delay=args.delay,
            rate=args.rate,
            timeout=args.timeout,
            progress=progress,
        )
    except ReplayError as e:
        err.write(f"perceptron replay: {e}\n")
        return 2
    except PerceptronError as e:
        err.write(f"perceptron replay: the service answered {e}\n")
        return 1
    except httpx.TransportError as e:
        err.write(f"perceptron replay: cannot reach {args.url} ({type(e).__name__}: {e})\n")
        return 1
    if args.curve:
        try:
            write_curve(summary, args.curve, args.window)
        except (ReplayError, OSError) as e:
            err.write(f"perceptron replay: {e}\n")
            return 2
    out = summary.as_dict()
    if args.json:
        if args.curve:
            out["curve"] = str(args.curve)
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        sys.stdout.write(summary.text())
        if args.curve:
            sys.stdout.write(f"{'curve':<14}{args.curve}\n")
    sys.stdout.flush()
    return 0
