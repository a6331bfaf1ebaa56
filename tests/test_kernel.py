"""The learners' compiled kernel (service/learner/kernel.py) against their update plans, bit for
bit: on every learner and layout it takes, with examples at the edges the API accepts; as a
batch's learning (``run_sequence``: predictions, log entries, weights, the last update held) and
as a challenger's replay (its whole packed state)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from service.contract.store_protocol import DEFAULT_SOURCE
from service.engine.sequence import _run_binary, _run_general, run_sequence
from service.engine.standings import label_entries
from service.learner import Example, ModelConfig, Weights
from service.learner.challenger import ChallengerState, pack_state, start_state
from service.learner.codec import (
    entry_provenance,
    entry_served,
    provenance,
    read_logged,
    unpack_entry,
)
from service.learner.features import Rows
from service.learner.kernel import Packed, compiled, learn_sequence
from service.learner.perceptron import predict_index

TAKEN: list[dict[str, Any]] = [
    {"n_features": 20},
    {"n_features": 20, "margin": 0.5, "learning_rate": 0.3, "fit_bias": False},
    {"hash_bits": 6},
    {"n_features": 20, "averaged": True},
    {"hash_bits": 6, "averaged": True, "margin": 0.3, "learning_rate": 0.7},
    {"n_features": 20, "averaged": True, "fit_bias": False},
    {"n_features": 20, "algorithm": "pa1", "C": 0.01},
    {"n_features": 20, "algorithm": "pa2", "C": 1e6},
    {"hash_bits": 5, "algorithm": "pa1", "fit_bias": False},
    {"hash_bits": 5, "algorithm": "pa2", "C": 0.1, "classes": (0, 1, 2), "multiclass": "ovr"},
    {"n_features": 20, "algorithm": "pa1", "classes": (0, 1, 2, 3), "multiclass": "ovr"},
    {"n_features": 20, "algorithm": "logistic"},
    {"n_features": 20, "algorithm": "logistic", "learning_rate": 1e6, "fit_bias": False},
    {"hash_bits": 5, "algorithm": "logistic", "classes": (0, 1, 2), "multiclass": "ovr"},
]
NOT_TAKEN: list[dict[str, Any]] = [
    {"n_features": 2, "classes": (0, 1, 2)},
    {"n_features": 2, "classes": (0, 1, 2), "averaged": True, "multiclass": "ovo"},
    {"n_features": 2, "classes": (0, 1, 2), "multiclass": "ovr"},  # (a perceptron's gemv)
    {"n_features": 2, "classes": (0, 1, 2), "multiclass": "ovo", "algorithm": "pa1"},
    {"n_features": 2, "classes": (0, 1, 2), "algorithm": "pa2"},
    {"n_features": 2, "algorithm": "arow"},
]


def examples(config: ModelConfig, n: int, seed: int) -> tuple[list[Example], list[int]]:
    """A stream with the edges the API accepts: zeros, subnormals, ±1e15, scales apart."""
    rng = np.random.default_rng(seed)
    edges = [0.0, 5e-324, -1e-300, 1e15, -1e15]
    xs = []
    for i in range(n):
        k = config.dim if config.dense else int(rng.integers(0, 6))
        values = rng.normal(size=k) * float(rng.choice([1e-3, 1.0, 1e3]))
        if i % 7 == 0 and k:
            values[rng.integers(0, k)] = float(rng.choice(edges))
        if i % 53 == 0:
            values[:] = 0.0
        index = None if config.dense else np.sort(rng.choice(config.dim, k, replace=False))
        xs.append(Example(values, None if index is None else index.astype(np.int64)))
    ts = rng.integers(0, config.n_classes, size=n).tolist()
    return xs, ts


def planned(config: ModelConfig, w: Weights, xs: list[Example], ts: list[int]) -> tuple[Any, ...]:
    """The update plans' account, one example at a time."""
    predicted, updated, raws = [], [], []
    for x, t in zip(xs, ts, strict=True):
        raw = config.learner.raw_scores(config, w, x)
        predicted.append(predict_index(config, config.learner.served_scores(config, w, x)))
        raws.append(raw.copy())
        plan = config.learner.update_plan(config, raw, t, x, w)
        updated.append(bool(plan))
        w.seen += 1
        if plan:
            config.learner.apply(config, w, x, plan, w.seen)
    return predicted, updated, np.array(raws)


def test_the_kernel_is_there() -> None:
    assert compiled() is not None  # (numba is a dependency: a test that skips would hide it)


@pytest.mark.parametrize("params", TAKEN, ids=str)
def test_the_kernel_learns_as_the_update_plans_bit_for_bit(params: dict[str, Any]) -> None:
    config = ModelConfig(**params)
    rule = config.learner.kernel(config)
    assert rule is not None
    for seed in range(3):
        xs, ts = examples(config, 1500, seed)
        fast, slow = Weights.zeros(config), Weights.zeros(config)
        got = learn_sequence(rule, config.fit_bias, fast, xs=xs, ts=ts)
        fast.seen += len(xs)
        assert got is not None
        predicted, updated, raws = planned(config, slow, xs, ts)
        assert got.predicted.tolist() == predicted and got.updated.tolist() == updated
        assert np.array_equal(got.raws, raws)
        assert all(np.array_equal(a, b) for a, b in zip(fast.arrays(), slow.arrays(), strict=True))
        assert fast.version == slow.version and all(np.isfinite(a).all() for a in fast.arrays())


@pytest.mark.parametrize("params", NOT_TAKEN, ids=str)
def test_the_others_learn_through_their_plans(params: dict[str, Any]) -> None:
    config = ModelConfig(**params)
    assert config.learner.kernel(config) is None


@pytest.mark.parametrize("params", TAKEN, ids=str)
def test_a_batch_learns_through_the_kernel_as_through_the_plans(params: dict[str, Any]) -> None:
    config = ModelConfig(**params)
    xs, ts = examples(config, 400, 7)
    provs = [b"~k|%d|" % i for i in range(len(xs))]
    base = Weights.zeros(config)
    rng = np.random.default_rng(1)
    for a in base.arrays():
        a[:] = rng.normal(size=a.shape)
    base.seen, base.version = 17, 9
    kernel = run_sequence(config, "0" * 16, base, xs=xs, ts=ts, provs=provs)
    if config.dense:  # a packed batch: its rows one matrix, learned and logged alike
        rows = Rows(np.stack([x.values for x in xs]), np.array([x.sq_norm for x in xs]))
        packed = run_sequence(config, "0" * 16, base, xs=rows, ts=ts, provs=provs)
        assert packed.batch == kernel.batch and packed.served == kernel.served
        assert packed.updated == kernel.updated and packed.work.seen == kernel.work.seen
        pairs = zip(kernel.work.arrays(), packed.work.arrays(), strict=True)
        assert all(np.array_equal(a, b) for a, b in pairs)
    own_loop = config.binary and config.algorithm == "perceptron" and not config.averaged
    slow = _run_binary if own_loop else _run_general
    plans = slow(cfg=config, epoch="0" * 16, base=base, xs=xs, ts=ts, provs=provs)
    assert kernel.batch == plans.batch and kernel.served == plans.served
    assert kernel.updated == plans.updated
    pairs = zip(kernel.work.arrays(), plans.work.arrays(), strict=True)
    assert all(np.array_equal(a, b) for a, b in pairs) and kernel.work.seen == plans.work.seen
    assert kernel.work.version == plans.work.version
    assert (kernel.last is None) == (plans.last is None)
    if kernel.last is not None and plans.last is not None:
        assert np.array_equal(kernel.last.rows, plans.last.rows)
        assert np.array_equal(kernel.last.coefs, plans.last.coefs)


@pytest.mark.parametrize("params", TAKEN, ids=str)
def test_a_challenger_replays_through_the_kernel_as_one_at_a_time(
    params: dict[str, Any],
) -> None:
    config = ModelConfig(**params)
    xs, ts = examples(config, 2500, 3)  # (past 100 curve points: its spacing doubles)
    rng = np.random.default_rng(5)
    defaults = (rng.random(len(xs)) < 0.2).tolist()
    served = rng.integers(0, config.n_classes, size=len(xs)).tolist()
    one, many = start_state(config, None), start_state(config, None)
    many.since = one.since = 3
    for x, t, d, s in zip(xs, ts, defaults, served, strict=True):
        one.learn(x, t, d, s)
    for start in range(0, len(xs), 611):  # in pieces, as the log is read
        part = slice(start, start + 611)
        many.learn_all(xs[part], ts[part], defaults[part], served[part])
    assert isinstance(many, ChallengerState) and pack_state(many) == pack_state(one)
    assert (many.position, many.curve, many.every) == (one.position, one.curve, one.every)


@pytest.mark.parametrize(
    "params", [{"n_features": 5}, {"hash_bits": 5, "classes": (0, 1, 2), "multiclass": "ovr"}]
)
def test_a_read_log_is_what_each_entry_reads_as(params: dict[str, Any]) -> None:
    """``read_logged``, all entries in one pass, against each entry read on its own: with and
    without provenance, the default label's source and others, a '|' in the values' bytes."""
    config = ModelConfig(**params)
    xs, ts = examples(config, 300, 11)
    xs[0] = Example(np.full(len(xs[0].values), struct.unpack("<d", b"|" * 8)[0]), xs[0].index)
    sources = [DEFAULT_SOURCE if i % 3 == 0 else "key-1" if i % 3 == 1 else "" for i in range(300)]
    provs = [
        b"" if i % 7 == 0 else provenance(s, 1_796_000_000_000 + i) for i, s in enumerate(sources)
    ]
    served = [(t + i) % config.n_classes for i, t in enumerate(ts)]
    entries = label_entries(config, "0123456789abcdef", xs, ts=ts, served=served, provs=provs)
    logged = read_logged(config, entries, DEFAULT_SOURCE)
    assert logged.ts == [unpack_entry(config, e)[1] for e in entries] == ts
    assert logged.served == [entry_served(e) for e in entries] == served
    assert logged.by_default == [entry_provenance(e)[2] == DEFAULT_SOURCE for e in entries]
    for x, got in zip(xs, logged.packed.examples(), strict=True):
        assert np.array_equal(x.values, got.values)
        assert (x.index is None) == (got.index is None)
        if x.index is not None and got.index is not None:
            assert np.array_equal(x.index, got.index)


def test_without_the_kernel_the_plans_learn_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where numba cannot load (the kernel is None), a batch and a challenger learn through
    the plans: the same answers."""
    from service.learner import kernel

    config = ModelConfig(n_features=20, algorithm="pa1", C=0.01)
    xs, ts = examples(config, 300, 2)
    base = Weights.zeros(config)
    with_kernel = run_sequence(config, "0" * 16, base, xs=xs, ts=ts)
    one = start_state(config, None)
    one.learn_all(xs, ts, [False] * len(xs), ts)
    monkeypatch.setattr(kernel, "compiled", lambda: None)
    rule = config.learner.kernel(config)
    assert rule is not None
    assert learn_sequence(rule, True, Weights.zeros(config), xs=xs, ts=ts) is None
    without = run_sequence(config, "0" * 16, base, xs=xs, ts=ts)
    assert without.batch == with_kernel.batch and np.array_equal(without.work.w, with_kernel.work.w)
    other = start_state(config, None)
    other.learn_all(xs, ts, [False] * len(xs), ts)
    assert pack_state(other) == pack_state(one)


def test_after_load_no_form_of_input_compiles_the_kernel_again() -> None:
    """``kernel.load`` (each worker's start) compiles every form of input the service passes:
    numba compiles a read-only array apart, for seconds, and a serving worker that compiled
    one held its interpreter so long that uvicorn took it for hung and killed it."""
    from service.learner import kernel
    from service.learner.drift_detectors import DDM

    kernel.load()
    learn, drift = compiled(), kernel._DRIFT
    assert learn is not None and drift is not None
    forms = (set(learn.signatures), set(drift.feed.signatures))

    def read_only(a: np.ndarray) -> np.ndarray:
        return np.frombuffer(a.tobytes(), dtype=a.dtype)

    config = ModelConfig(n_features=3)
    rule = config.learner.kernel(config)
    assert rule is not None
    for dense in (True, False):
        values, index = np.array([1.0, -2.0, 0.5]), np.array([0, 1, 2], dtype=np.int64)
        offsets, ts = np.array([0, 3], dtype=np.int64), np.array([1], dtype=np.int64)
        for ro in range(16):  # every array read-only or not
            arrays = [
                read_only(a) if ro >> i & 1 else a
                for i, a in enumerate((values, index, offsets, ts))
            ]
            packed = Packed(arrays[0], arrays[1] if not dense else arrays[1][:0], arrays[2], dense)
            w = Weights.zeros(config)
            assert learn_sequence(rule, True, w, xs=packed, ts=arrays[3])
    kernel.drift_feed(DDM(), DDM().start(), read_only(np.array([True, False])))
    assert (set(learn.signatures), set(drift.feed.signatures)) == forms
