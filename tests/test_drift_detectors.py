"""The drift detectors against River's: fed the same mistakes, the same warnings and drifts at
the same examples (River's two flags after each), on streams of the kinds a model meets (stable,
an abrupt change, a slow one) and on any stream; a state carried as its floats (as the model
keeps it) goes on as if it had not been; and configurations that cannot be are refused."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from river import drift

from service.learner import kernel
from service.learner.drift_detectors import (
    DDM,
    DETECTORS,
    EDDM,
    Detector,
    DetectorError,
    check_state,
    detector_of,
    feed,
    spec_of,
    status_of,
)
from service.store.ops.drift import DRIFT
from service.store.script import Script


def river_of(detector: Detector) -> Any:
    if isinstance(detector, DDM):
        return drift.binary.DDM(
            warm_start=detector.warm_start,
            warning_threshold=detector.warning_threshold,
            drift_threshold=detector.drift_threshold,
        )
    return drift.binary.EDDM(
        warm_start=detector.warm_start, alpha=detector.alpha, beta=detector.beta
    )


def flags_both(detector: Detector, mistakes: list[int]) -> tuple[list[Any], list[Any]]:
    """Each detector's flags after each mistake; and its numbers, bit for bit, as River's."""
    ours, theirs = [], []
    state, river = detector.start(), river_of(detector)
    for m in mistakes:
        state = detector.update(state, m)
        river.update(m)
        ours.append(detector.flags(state))
        theirs.append((river.warning_detected, river.drift_detected))
        assert numbers(detector, state) == rivers_numbers(river)
    return ours, theirs


def numbers(detector: Detector, state: list[float]) -> list[float]:
    if isinstance(detector, DDM):
        _, n, mean, p_min, s_min, ps_min = state
        return [n, mean] + ([p_min, s_min, ps_min] if ps_min != math.inf else [])
    _, n, last, errors, count, mean, sq, most, _ = state
    return [n, last, errors, count, mean, sq, most]


def rivers_numbers(river: Any) -> list[float]:
    if isinstance(river, drift.binary.DDM):
        warm = [river._p_min, river._s_min, river._ps_min] if river._p_min is not None else []
        return [river._p.n, river._p.get()] + warm
    d = river._error_distances
    return [river._n, river._last_error, river._n_errors, d.mean.n, d.mean.get(), d._S,
            river._p2s_prime_max]  # fmt: skip


def stream(kind: str, n: int, seed: int) -> list[int]:
    """Mistakes of a learner whose rate is 0.1 throughout (stable), jumps to 0.4 at the middle
    (abrupt), or climbs from 0.1 to 0.4 over the second half (slow)."""
    rng = np.random.default_rng(seed)
    at = np.arange(n)
    if kind == "stable":
        rate = np.full(n, 0.1)
    elif kind == "abrupt":
        rate = np.where(at < n // 2, 0.1, 0.4)
    else:
        rate = 0.1 + 0.3 * np.clip((at - n // 2) / (n // 2), 0, 1)
    return [int(m) for m in rng.random(n) < rate]


@pytest.mark.parametrize("kind", ["stable", "abrupt", "slow"])
@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_each_detector_flags_the_examples_rivers_does(name: str, kind: str) -> None:
    detector = DETECTORS[name]()
    for seed in range(4):
        mistakes = stream(kind, 12_000, seed)
        ours, theirs = flags_both(detector, mistakes)
        assert ours == theirs
        if kind == "abrupt" and name == "ddm":  # (the stream is one that DDM sees change)
            assert any(d for _, d in theirs[6_000:])


def drawn(name: str, warm_start: int, data: st.DataObject) -> Detector:
    """A detector of ``name`` whose thresholds are drawn close together or far apart."""
    if name == "ddm":
        low = data.draw(st.floats(0.1, 5))
        return DDM(warm_start, low, data.draw(st.floats(low, 8)))
    beta = data.draw(st.floats(0.05, 1))
    return EDDM(warm_start, data.draw(st.floats(beta, 1)), beta)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 1), max_size=400),
    st.sampled_from(sorted(DETECTORS)),
    st.integers(1, 40),
    st.data(),
)
def test_any_stream_and_parameters_flag_as_rivers(
    mistakes: list[int], name: str, warm_start: int, data: st.DataObject
) -> None:
    """Runs of mistakes, warm starts from 1, thresholds close together or far apart."""
    detector = drawn(name, warm_start, data)
    ours, theirs = flags_both(detector, mistakes)
    assert ours == theirs


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_a_state_carried_as_floats_goes_on_as_if_kept(name: str) -> None:
    """Cut anywhere, the state sent through float64 bytes (as the store keeps it) gives the
    same flags after as a detector never cut."""
    detector = DETECTORS[name]()
    mistakes = stream("abrupt", 3_000, 1)
    whole, _ = flags_both(detector, mistakes)
    for cut in (1, 29, 30, 31, 1_500, 2_999):
        state = detector.start()
        for m in mistakes[:cut]:
            state = detector.update(state, m)
        state = np.frombuffer(np.array(state, dtype="<f8").tobytes(), dtype="<f8").tolist()
        after = []
        for m in mistakes[cut:]:
            state = detector.update(state, m)
            after.append(detector.flags(state))
        assert after == whole[cut:]


def test_a_drift_starts_the_detector_afresh_at_the_next_example() -> None:
    detector = DDM()
    state, statuses = detector.start(), []
    for m in stream("abrupt", 12_000, 0):
        state = detector.update(state, m)
        statuses.append(status_of(detector, state))
        if statuses[-1] == "drift":
            break
    assert statuses[-1] == "drift" and "warning" in statuses
    after = detector.update(state, 0)
    assert after == [0.0, 1.0, 0.0, 0.0, 0.0, math.inf] and status_of(detector, after) == "stable"


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"detector": "adwin"},
        {"detector": "ddm", "on_drift": "heal"},
        {"detector": "ddm", "warm_start": 0},
        {"detector": "ddm", "warm_start": 1_000_001},
        {"detector": "ddm", "warm_start": 3.0},
        {"detector": "ddm", "warm_start": True},
        {"detector": "ddm", "warning_threshold": 0},
        {"detector": "ddm", "drift_threshold": math.inf},
        {"detector": "ddm", "drift_threshold": math.nan},
        {"detector": "ddm", "warning_threshold": 3.5},
        {"detector": "ddm", "alpha": 0.9},
        {"detector": "ddm", "name": "x"},
        {"detector": "eddm", "alpha": 0.8, "beta": 0.9},
        {"detector": "eddm", "beta": 0},
        {"detector": "eddm", "alpha": 1.01},
    ],
    ids=str,
)
def test_a_detector_that_cannot_be_is_refused(config: dict[str, Any]) -> None:
    with pytest.raises(DetectorError):
        detector_of(config)


def test_the_defaults_are_rivers() -> None:
    assert detector_of({"detector": "ddm"}) == (DDM(30, 2.0, 3.0), "alert")
    assert detector_of({"detector": "eddm", "on_drift": "retrain"}) == (
        EDDM(30, 0.95, 0.9),
        "retrain",
    )
    assert detector_of({"detector": "ddm", "warm_start": 1, "drift_threshold": 2.0})[0] == DDM(
        1, 2.0, 2.0
    )


# The same detectors in the store's Lua (store/ops/drift.py), run by a real redis-server.
PROBE = Script(
    name="drift_probe",
    keys=(),
    args=("spec", "state", "marks"),
    parts=(DRIFT,),
    body="local state, events = drift.feed(SPEC, STATE, MARKS)\nreturn {state, events}\n",
)


def fed_in_lua(client: Any, detector: Detector, mistakes: list[int], cuts: list[int]) -> Any:
    """The state and events after ``mistakes`` fed through the Lua in pieces cut at ``cuts``
    (as commits feed it), each piece from the state the last one left; and each piece's state,
    as the store keeps it, bit for bit the detector's."""
    state, events, start = b"", [], 0
    ours = detector.start()
    for end in [*sorted(set(cuts)), len(mistakes)]:
        marks = "".join(map(str, mistakes[start:end]))
        state, got = client.eval(PROBE.lua, 0, spec_of(detector), state, marks)
        events += [(start + got[i], STATUS[got[i + 1]]) for i in range(0, len(got), 2)]
        ours, _ = feed(detector, ours, mistakes[start:end])
        assert [float(v) for v in state.split()] == ours, end
        assert state.decode() == " ".join(f"{v:.17g}" for v in ours)
        start = end
    return [float(v) for v in state.split()], events


STATUS = {1: "warning", 2: "drift"}


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_the_stores_lua_decides_as_the_detector_bit_for_bit(redis_url: str, name: str) -> None:
    """The state's every bit, and each flag raised, on streams of every kind fed in pieces."""
    client = redis.Redis.from_url(redis_url)
    detector = DETECTORS[name]()
    rng = np.random.default_rng(3)
    for kind in ("stable", "abrupt", "slow"):
        mistakes = stream(kind, 6_000, 2)
        state, events = feed(detector, detector.start(), mistakes)
        cuts = rng.integers(0, len(mistakes), size=400).tolist()
        got_state, got_events = fed_in_lua(client, detector, mistakes, cuts)
        assert got_state == state
        assert got_events == [(i, kind) for i, kind in events]
        assert events or kind == "stable"


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.integers(0, 1), min_size=1, max_size=300),
    st.sampled_from(sorted(DETECTORS)),
    st.integers(1, 20),
    st.lists(st.integers(0, 300), max_size=4),
)
def test_any_stream_decides_alike_in_lua(
    redis_url: str, mistakes: list[int], name: str, warm_start: int, cuts: list[int]
) -> None:
    detector = DDM(warm_start, 1.5, 2.5) if name == "ddm" else EDDM(warm_start, 0.97, 0.93)
    state, events = feed(detector, detector.start(), mistakes)
    client = redis.Redis.from_url(redis_url)
    cuts = [c for c in cuts if c <= len(mistakes)]
    got_state, got_events = fed_in_lua(client, detector, mistakes, cuts)
    assert got_state == state
    assert got_events == [(i, kind) for i, kind in events]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1), max_size=600), st.sampled_from(sorted(DETECTORS)))
def test_every_state_a_detector_reaches_passes_its_check(mistakes: list[int], name: str) -> None:
    """An import checks a detector's state against bounds every real one keeps: each state on
    any stream keeps them (and so can be exported and imported back)."""
    detector = DETECTORS[name](warm_start=3)
    state = detector.start()
    check_state(detector, state)
    for m in mistakes:
        state = detector.update(state, m)
        check_state(detector, state)


@pytest.mark.parametrize(
    ("name", "state"),
    [
        ("eddm", "0 40 0 40 1 1e308 0 0 0"),  # (a mean distance past its examples: sq overflows)
        ("eddm", "0 40 1000 40 40 0 0 0 0"),  # (a last mistake after its examples)
        ("eddm", "0 40 10 41 41 2 0 3 0"),  # (more mistakes than examples)
        ("eddm", "0 40 10 5 5 2 -1 3 0"),  # (a negative sum of squared deviations)
        ("eddm", "0 40 10 5 5 2 1 1000 0"),  # (a largest p' + 2 s' past what it can be)
        ("ddm", "0 40 0.5 2 0 inf"),  # (a best mistake rate past 1)
        ("ddm", "0 40 0.5 0.1 0.9 inf"),  # (a deviation past 0.5)
        ("ddm", "0 40 0.5 0.1 0.1 7"),  # (a best p + s past 1.5)
    ],
)
def test_a_state_no_detector_reaches_is_refused(name: str, state: str) -> None:
    """Such a state, imported, would overflow or never flag again: it is refused instead."""
    with pytest.raises(DetectorError):
        check_state(DETECTORS[name](), [float(v) for v in state.split()])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.booleans(), max_size=500),
    st.sampled_from(sorted(DETECTORS)),
    st.integers(1, 40),
    st.integers(0, 500),
    st.data(),
)
def test_the_compiled_loop_decides_as_the_detector_bit_for_bit(
    mistakes: list[bool], name: str, warm_start: int, cut: int, data: st.DataObject
) -> None:
    """A challenger's replay feeds its detector through the compiled loop (``drift_loop.py``):
    the same state, bit for bit, and the same flags as ``feed``, from a state carried over."""
    detector = drawn(name, warm_start, data)
    cut = min(cut, len(mistakes))
    ours, events = feed(detector, detector.start(), [int(m) for m in mistakes[:cut]])
    state, later = feed(detector, ours, [int(m) for m in mistakes[cut:]])
    got, got_later = kernel.drift_feed(detector, ours, np.array(mistakes[cut:], dtype=bool))
    assert kernel._DRIFT is not None  # (compiled here: numba is installed)
    assert [v.hex() for v in got] == [v.hex() for v in state]
    assert got_later == later
