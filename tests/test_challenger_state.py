"""A challenger's packed state (``learner/challenger.py``): what it counts, through a pack and
an unpack, and a state packed before ``served_mistakes`` was counted."""

from __future__ import annotations

import numpy as np

from service.learner import Example, ModelConfig
from service.learner.challenger import ChallengerState, pack_state, start_state, unpack_state

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
    old = b" ".join(head.split()[:-1]) + b"\n" + rest  # (nine numbers after the position)
    read = unpack_state(CONFIG, b"6 " + old)
    assert (read.seen, read.mistakes, read.served_mistakes) == (6, state.mistakes, None)
    taught(read)  # learning on does not start a count from the middle
    assert read.served_mistakes is None and read.seen == 12
    assert unpack_state(CONFIG, b"12 " + pack_state(read)).served_mistakes is None
