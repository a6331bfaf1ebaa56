"""A challenger's packed state (``learner/challenger.py``): what it counts, through a pack and
an unpack, a state packed before ``served_mistakes`` was counted or before a challenger had a
drift detector, and its detector."""

from __future__ import annotations

import numpy as np

from service.learner import Example, ModelConfig
from service.learner.challenger import ChallengerState, pack_state, start_state, unpack_state
from service.learner.drift_detectors import DDM, feed

CONFIG = ModelConfig(n_features=2)


def taught(state: ChallengerState) -> ChallengerState:
    """Six examples, each served as the index of its list (so the served learner's mistakes
    on them are known: 3)."""
    for x, t, served in [([1, 0], 1, 0), ([0, 1], 0, 0), ([1, 1], 1, 1), ([2, 0], 0, 1),
                         ([0, 2], 1, 0), ([1, 2], 0, 0)]:  # fmt: skip
        state.learn(Example(np.array(x, dtype=float)), t, served=served)
    return state


def test_the_served_learners_mistakes_are_counted_on_the_same_examples() -> None:
    state = taught(start_state(CONFIG, None))
    assert (state.seen, state.served_mistakes) == (6, 3)
    again = unpack_state(CONFIG, b"%d " % state.position + pack_state(state))
    assert (again.seen, again.mistakes, again.served_mistakes) == (6, state.mistakes, 3)
    assert pack_state(again) == pack_state(state)


def test_a_state_packed_before_served_mistakes_reads_as_not_counted() -> None:
    state = taught(start_state(CONFIG, None))
    head, rest = pack_state(state).split(b"\n", 1)
    old = b" ".join(head.split()[:-3]) + b"\n" + rest  # (nine numbers after the position)
    read = unpack_state(CONFIG, b"6 " + old)
    assert (read.seen, read.mistakes, read.served_mistakes) == (6, state.mistakes, None)
    taught(read)  # learning on does not start a count from the middle
    assert read.served_mistakes is None and read.seen == 12
    assert unpack_state(CONFIG, b"12 " + pack_state(read)).served_mistakes is None


def test_a_challengers_detector_is_fed_its_mistakes_and_packed_whole() -> None:
    """Fed one by one or in a sequence, a challenger's detector flags what the detector does
    on its progressive-validation mistakes; packed and read, it is the same; a state packed
    before challengers had detectors reads as a fresh one."""
    config = ModelConfig(n_features=2, drift={"detector": "ddm", "warm_start": 5})
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(400, 2))
    ts = (np.where(xs[:, 0] > 0, 1, 0) ^ (np.arange(400) >= 200)).tolist()
    one, many = start_state(config, None), start_state(config, None)
    marks = []
    for x, t in zip(xs, ts, strict=True):
        before = one.mistakes
        one.learn(Example(x), t)
        marks.append(one.mistakes - before)
    many.learn_all([Example(x) for x in xs], ts, [False] * 400, [0] * 400)
    state, events = feed(DDM(5), DDM(5).start(), marks)
    assert one.drift_events == many.drift_events == events and events
    assert one.drift_state == many.drift_state == state
    assert (one.drift_warnings, one.drifts) == (
        sum(k == "warning" for _, k in events),
        sum(k == "drift" for _, k in events),
    )
    again = unpack_state(config, b"%d " % one.position + pack_state(one))
    assert pack_state(again) == pack_state(one) and again.drift_events == events
    head, rest = pack_state(one).split(b"\n", 1)
    numbers = head.split()[:-1]  # (as packed before a learner's own count was kept apart)
    assert int(numbers[-1]) > 0
    kept = int(numbers[-4]) + int(numbers[-3])  # (its curve's and its window's bytes)
    packed = b" ".join(numbers[:-1]) + b"\n" + rest[:kept] + rest[kept + int(numbers[-1]) :]
    old = unpack_state(config, b"400 " + packed)
    assert old.drift_state is None and old.drift_events == [] and old.seen == 400
    assert old.drift_status() == "stable"
