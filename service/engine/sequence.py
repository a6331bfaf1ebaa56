"""Learning a sequence of examples on a copy of a model's weights, as the store will log it.

``run_sequence`` is what ``/learn`` commits: for each example in order, the prediction made
before learning it, whether it updated the weights, and the log entries of the updates. The
weights it starts from are never changed, so a commit the store refuses costs nothing but the
work. A batch of a learner the compiled kernel takes (``learner/kernel.py``) is learned there;
without the kernel, binary perceptrons that are not averaged take a loop of their own that
skips the general update plans. Each makes the same floating-point operations in the same
order as the plans, so all give the same weights bit for bit (the tests compare them).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.contract.store_protocol import (
    RECENT_KEPT as RECENT,  # labelled examples kept for the margin estimate
)
from service.contract.store_protocol import cell_field
from service.contract.store_values import LearnBatch
from service.learner import Example, ModelConfig, Weights
from service.learner.codec import entry_head, pack_payload, pack_record
from service.learner.features import Rows
from service.learner.kernel import KernelRule, learn_sequence
from service.learner.perceptron import Plan, binary_plan, predict_index

_pack_f64 = struct.Struct("=d").pack  # native order, as numpy's tobytes


@dataclass
class LearnedSequence:
    """What learning a sequence of examples did, before the store accepts it."""

    work: Weights  # the weights after every example but the last
    batch: LearnBatch
    served: list[int]  # class index predicted before learning each example
    updated: list[bool]
    last: Plan | None  # the last example's update, applied once the store accepts the batch


def run_sequence(
    cfg: ModelConfig,
    epoch: str,
    base: Weights,
    *,
    xs: Sequence[Example],
    ts: Sequence[int],
    provs: Sequence[bytes] | None = None,
) -> LearnedSequence:
    """Learn ``xs`` in order on a copy of ``base``; ``base`` itself is never changed.
    ``provs``: each example's provenance (``codec.provenance``), which its log entry carries.

    Averaged models copy at once, since their served scores depend on the count of examples
    seen; the others copy at their first update. Log entries carry the example's ordinal ``k``
    for averaged models (whose commit is guarded by that count) and 0 for the others, which
    never use it.
    """
    if provs is None:
        provs = [b""] * len(xs)
    rule = cfg.learner.kernel(cfg)
    if rule is not None and len(xs) > 1:
        seq = _run_kernel(cfg=cfg, epoch=epoch, base=base, learned=(xs, ts, provs), rule=rule)
        if seq is not None:
            return seq
    if cfg.binary and cfg.algorithm == "perceptron" and not cfg.averaged:
        return _run_binary(cfg=cfg, epoch=epoch, base=base, xs=xs, ts=ts, provs=provs)
    return _run_general(cfg=cfg, epoch=epoch, base=base, xs=xs, ts=ts, provs=provs)


# What learning costs, about, on one core (measured with run_sequence on dense batches of
# 1,000): per example and per weight an example's values meet (its non-zero values times the
# learner's rows), through the compiled kernel and through the update plans; and per number of
# the model's arrays copied (the largest, 2^24 buckets averaged: 16 ns, its pages new).
KERNEL_US = (1.0, 0.01)
PLANS_US = (60.0, 0.03)
COPY_US = 0.016


def learning_ms(
    cfg: ModelConfig, xs: Sequence[Example], relearned_bytes: int = 0, copies: int = 1
) -> float:
    """About how long ``run_sequence`` takes to learn ``xs`` (and ``relearned_bytes`` of
    log entries learned again, as a retraining's background learner is), copying the model's
    arrays ``copies`` times, in ms."""
    per_example, per_weight = KERNEL_US if cfg.learner.kernel(cfg) is not None else PLANS_US
    values = xs.matrix.size if isinstance(xs, Rows) else sum(len(x.values) for x in xs)
    relearned = relearned_bytes // 8  # (each entry's raw scores and values, float64)
    arrays = 1 + sum(a.per_weight for a in cfg.learner.state(cfg))
    copied = copies * cfg.n_rows * cfg.dim * arrays * COPY_US
    learning = len(xs) * per_example + (values + relearned) * cfg.n_rows * per_weight
    return (learning + copied) / 1000


def _run_kernel(
    cfg: ModelConfig,
    epoch: str,
    base: Weights,
    learned: tuple[Sequence[Example], Sequence[int], Sequence[bytes]],
    rule: KernelRule,
) -> LearnedSequence | None:
    """``run_sequence`` through the compiled kernel (``learner/kernel.py``), for a learner it
    takes: the same predictions, updates and weights as the update plans, bit for bit. None
    where the kernel is not available."""
    xs, ts, provs = learned
    n = len(xs)
    work = base.copy()
    got = learn_sequence(rule, cfg.fit_bias, work, xs=xs, ts=ts, apply_last=False)
    if got is None:
        return None
    no_updates = [False] * cfg.n_classes
    records = [pack_record(epoch, p, no_updates, b"") for p in range(cfg.n_classes)]
    served = got.predicted.tolist()
    updated = got.updated.tolist()
    entries: list[bytes] = []
    recent: list[bytes] = []
    counted = cfg.counts_seen  # (an averaged learner's entries carry their ordinal k)
    logged = np.flatnonzero(got.updated | (np.arange(n) >= n - RECENT)).tolist()
    for i, payload in zip(logged, _payloads(got.raws, xs, logged), strict=True):
        k = base.seen + i + 1 if counted else 0
        entry = entry_head(k, ts[i]) + provs[i] + records[served[i]] + payload
        if updated[i]:
            entries.append(entry)
        if i >= n - RECENT:
            recent.append(entry)
    if got.moves or counted:  # (an averaged learner serves its mean: it counts each one)
        work.seen = base.seen + n - 1
    else:
        work = base  # (nothing moved before the last example: the weights stay those given)
    last = None
    if got.last is not None:
        rows = np.flatnonzero(got.last)
        last = Plan(rows, got.last[rows])
    batch = batch_of(got.predicted, ts, entries, recent)
    return LearnedSequence(work, batch, served, updated, last)


def _payloads(raws: np.ndarray, xs: Sequence[Example], at: list[int]) -> list[bytes]:
    """``pack_payload`` of the examples at ``at``: their raw scores, then the example; a packed
    batch's rows in one go."""
    if not isinstance(xs, Rows) or not at:
        return [pack_payload(raws[i], xs[i]) for i in at]
    rows = np.concatenate((raws[at], xs.matrix[at]), axis=1).tobytes()  # float64, C order
    size = len(rows) // max(len(at), 1)
    return [rows[j : j + size] for j in range(0, len(rows), size)]


def _run_general(
    cfg: ModelConfig,
    epoch: str,
    base: Weights,
    *,
    xs: Sequence[Example],
    ts: Sequence[int],
    provs: Sequence[bytes],
) -> LearnedSequence:
    """``run_sequence`` for any model, through the learner's update plans."""
    n = len(xs)
    counted = cfg.counts_seen
    work = base.copy() if counted and n > 1 else base
    copied = work is not base
    served_all: list[int] = []
    updated: list[bool] = []
    entries: list[bytes] = []
    recent: list[bytes] = []
    plan = None
    no_updates = [False] * cfg.n_classes  # the record's bitmap matters only while pending
    for i, (x, t) in enumerate(zip(xs, ts, strict=True)):
        scores = cfg.learner.served_scores(cfg, work, x)
        served = predict_index(cfg, scores)
        raw = cfg.learner.raw_scores(cfg, work, x) if counted else scores
        plan = cfg.learner.update_plan(cfg, raw, t, x, work)
        served_all.append(served)
        updated.append(bool(plan))
        if plan or i >= n - RECENT:
            k = base.seen + i + 1 if counted else 0
            record = pack_record(epoch, served, no_updates, pack_payload(raw, x))
            entry = entry_head(k, t) + provs[i] + record
            if plan:
                entries.append(entry)
            if i >= n - RECENT:
                recent.append(entry)
        if i < n - 1:
            if plan and not copied:
                work, copied = base.copy(), True
            if copied:
                work.seen += 1
            if copied and plan:
                cfg.learner.apply(cfg, work, x, plan, work.seen)
    if copied:
        work.seen = base.seen + n - 1
    batch = batch_of(served_all, ts, entries, recent)
    return LearnedSequence(work, batch, served_all, updated, plan if plan else None)


def _run_binary(
    cfg: ModelConfig,
    epoch: str,
    base: Weights,
    *,
    xs: Sequence[Example],
    ts: Sequence[int],
    provs: Sequence[bytes],
) -> LearnedSequence:
    """``run_sequence`` for a binary perceptron not averaged. Per example: the score ``w.x + b``
    (``ndarray.dot`` of the one weight row, as ``_dot`` for a one-row matrix), the binary rule
    of ``update_plan``, and ``apply``'s in-place ``w += (lr * y) * x``, ``b += lr * y``."""
    n = len(xs)
    lr, margin, fit_bias = cfg.learning_rate, cfg.margin, cfg.fit_bias
    work, copied, w = base, False, base.w[0]
    b = float(work.b[0])  # Python floats from here: the same IEEE operations, less overhead
    # Log entry heads ("k|t|" and the pending record's header) by served and true class;
    # the payload that follows is pack_payload's: the raw score, then the example.
    records = tuple(pack_record(epoch, p, [False, False], b"") for p in (0, 1))
    tags = tuple(entry_head(0, t) for t in (0, 1))
    served, updated = [0] * n, [False] * n
    entries: list[bytes] = []
    recent: list[bytes] = []
    first_recent = n - RECENT
    last: Plan | None = None
    for i in range(n):
        x = xs[i]
        values, index = x.values, x.index
        score = float(w.dot(values) if index is None else w[index].dot(values)) + b
        t = ts[i]
        sign = 1.0 if t == 1 else -1.0
        served[i] = p = 1 if score > 0 else 0
        update = sign * score <= margin
        if update or i >= first_recent:
            entry = _entry(x, tags[t] + provs[i] + records[p], score)
            if update:
                entries.append(entry)
            if i >= first_recent:
                recent.append(entry)
        if update:
            updated[i] = True
            coef = lr * sign
            if i == n - 1:
                last = binary_plan(cfg, t)
                break
            if not copied:
                work, copied = base.copy(), True
                w = work.w[0]
            if index is None:
                w += coef * values
            else:
                w[index] += coef * values
            if fit_bias:
                b += coef
            work.version += 1
    if copied:
        work.b[0] = b
        work.seen = base.seen + n - 1
    batch = batch_of(served, ts, entries, recent)
    return LearnedSequence(work, batch, served, updated, last)


def _entry(x: Example, head: bytes, score: float) -> bytes:
    """A log entry: its head (tag, provenance, record header), the raw score, the example."""
    values, index = x.values, x.index
    example = (
        values.tobytes() if index is None else index.astype(np.int32).tobytes() + values.tobytes()
    )
    return head + _pack_f64(score) + example


def batch_of(
    served: Sequence[int] | np.ndarray, ts: Sequence[int], entries: list[bytes], recent: list[bytes]
) -> LearnBatch:
    """The store's account of a learned sequence: mistake marks and confusion-matrix cells."""
    s = np.asarray(served, dtype=np.int64)
    t = np.asarray(ts, dtype=np.int64)
    wrong = s != t
    marks = np.where(wrong, 49, 48).astype(np.uint8).tobytes()  # b"1" a mistake, b"0" not
    k = int(max(s.max(), t.max())) + 1
    counts = np.bincount(s * k + t)
    cells = {cell_field(c // k, c % k): int(counts[c]) for c in np.flatnonzero(counts).tolist()}
    return LearnBatch(
        n=len(served),
        mistakes=int(wrong.sum()),
        marks=marks,
        cells=cells,
        entries=entries,
        recent=recent,
    )
