"""Learning a sequence: the binary loop against the general one and a plain reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from service.contract.store_protocol import RECENT_KEPT
from service.engine.sequence import LearnedSequence, _run_binary, _run_general, run_sequence
from service.learner import Example, ModelConfig, Weights, encode
from service.learner.codec import entry_provenance, provenance, unpack_entry
from service.learner.perceptron import apply

EPOCH = "e" * 16

BINARY = [
    pytest.param({"n_features": 5}, "int", id="dense-ints"),
    pytest.param({"n_features": 7}, "float", id="dense-floats"),
    pytest.param({"n_features": 5, "margin": 1.5, "learning_rate": 0.25}, "float", id="margin"),
    pytest.param({"n_features": 5, "fit_bias": False}, "int", id="no-bias"),
    pytest.param({"hash_bits": 4}, "int", id="named-ints"),
    pytest.param({"hash_bits": 6, "classes": ["no", "yes"]}, "float", id="named-floats"),
]


def stream(config: ModelConfig, kind: str, n: int, seed: int) -> tuple[list[Example], list[int]]:
    rng = np.random.default_rng(seed)
    xs, ts = [], []
    for _ in range(n):
        if config.dense:
            assert config.n_features is not None
            v = (
                rng.integers(-2, 3, config.n_features)
                if kind == "int"
                else rng.normal(size=config.n_features).round(3)
            )
            features: Any = v.tolist()
        else:
            names = rng.choice(30, size=int(rng.integers(1, 8)), replace=False)
            features = {
                f"f{k}": int(rng.integers(-2, 3)) if kind == "int" else float(rng.normal())
                for k in names
            }
        xs.append(encode(config, features))
        ts.append(int(rng.integers(2)))
    return xs, ts


def reference(
    config: ModelConfig, w: np.ndarray, b: float, xs: list[Example], ts: list[int]
) -> tuple[np.ndarray, float, list[int], list[bool], list[float]]:
    """The binary perceptron written out plainly, with the conventions of docs/conventions.md."""
    w = w.copy()
    served, updated, scores = [], [], []
    for x, t in zip(xs, ts, strict=True):
        cols = w if x.index is None else w[x.index]
        s = float((cols[None, :] @ x.values)[0] + b)
        y = 1.0 if t == 1 else -1.0
        served.append(1 if s > 0 else 0)
        scores.append(s)
        update = y * s <= config.margin
        updated.append(update)
        if update:
            delta = config.learning_rate * y * x.values
            if x.index is None:
                w += delta
            else:
                w[x.index] += delta
            if config.fit_bias:
                b += config.learning_rate * y
    return w, b, served, updated, scores


def finished(config: ModelConfig, seq: LearnedSequence, xs: list[Example]) -> Weights:
    """The weights once the store accepted the sequence: the last update applied too."""
    w = seq.work.copy()
    if seq.last is not None:
        apply(config, w, xs[-1], seq.last, w.seen + 1)
    return w


def start(config: ModelConfig, seed: int) -> Weights:
    weights = Weights.zeros(config)
    weights.w[:] = np.random.default_rng(seed).integers(-3, 4, weights.w.shape)
    weights.b[:] = 1.0
    weights.version, weights.seen = 40, 90
    return weights


@pytest.mark.parametrize(("params", "kind"), BINARY)
@pytest.mark.parametrize("n", [1, 2, 37, 250])
def test_binary_loop_is_the_general_loop_bit_for_bit(
    params: dict[str, Any], kind: str, n: int
) -> None:
    config = ModelConfig.from_dict(params)
    xs, ts = stream(config, kind, n, seed=n)
    base = start(config, seed=n)
    before = base.copy()
    # with each example's provenance, as the learn commit gives them (two keys in turn)
    provs = [provenance(("alice", "bob")[i % 2], 1_764_000_000_000 + i) for i in range(n)]
    fast = _run_binary(config, EPOCH, base, xs=xs, ts=ts, provs=provs)
    slow = _run_general(config, EPOCH, base, xs=xs, ts=ts, provs=provs)
    assert fast.served == slow.served
    assert fast.updated == slow.updated
    assert fast.batch == slow.batch  # counts, marks, cells and every log entry, byte for byte
    a, b = finished(config, fast, xs), finished(config, slow, xs)
    assert a.w.tobytes() == b.w.tobytes() and a.b.tobytes() == b.b.tobytes()
    assert (a.version, a.seen) == (b.version, b.seen)
    for entry in fast.batch.entries:  # who and when, read back from each entry
        _, _, source, ms = entry_provenance(entry)
        assert ms is not None and source == ("alice", "bob")[(ms - 1_764_000_000_000) % 2]
    assert a.version == 40 + sum(fast.updated)
    # The starting weights are never changed: a refused commit costs nothing.
    assert base.w.tobytes() == before.w.tobytes() and base.b.tobytes() == before.b.tobytes()
    assert base.version == before.version

    w, bias, served, updated, scores = reference(config, before.w[0], float(before.b[0]), xs, ts)
    assert fast.served == served and fast.updated == updated
    assert a.w[0].tobytes() == w.tobytes() and float(a.b[0]) == bias
    # Each update's log entry replays to the same update: its raw score and example.
    logged = [unpack_entry(config, e) for e in fast.batch.entries]
    assert [s for s, u in zip(scores, updated, strict=True) if u] == [r[0] for _, _, r, _ in logged]
    assert len(fast.batch.recent) == min(n, RECENT_KEPT)


def test_binary_sequence_counts_mistakes_and_cells() -> None:
    config = ModelConfig(n_features=2)
    xs = [encode(config, v) for v in ([1, 0], [1, 0], [0, 1], [-1, 0])]
    seq = run_sequence(config, EPOCH, Weights.zeros(config), xs=xs, ts=[1, 1, 0, 0])
    # 0 scores -1; learns +x: then [1,0] scores 2 (right), [0,1] scores 1 (wrong), learns -x.
    assert seq.served == [0, 1, 1, 0]
    assert seq.updated == [True, False, True, False]
    assert seq.batch.marks == b"1010"
    assert seq.batch.mistakes == 2
    assert seq.batch.cells == {"cm:0:1": 1, "cm:1:1": 1, "cm:1:0": 1, "cm:0:0": 1}
