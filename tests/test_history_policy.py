"""What a model's history keeps (service/admin/retention.py's policy), on generated histories."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from service.admin.retention import KEEP_LAST, Kept, policy
from service.contract.store_protocol import Checkpoint, Reason
from service.settings import Settings
from service.store.ops.history import HistoryState

HOUR = 3_600_000


@st.composite
def histories(draw: Any) -> tuple[HistoryState, Settings, int]:
    """Checkpoints made in order (versions, times and retained-log bytes never go back); the
    first few made before a reset or a rollback, the rest on the model's current line but
    perhaps the last, made before a rollback (its log is its tail: off the line)."""
    n = draw(st.integers(0, 40))
    before = draw(st.integers(0, n))
    version = ms = past_in = 0
    made = []
    for i in range(1, n + 1):
        version += draw(st.integers(0, 30_000))
        ms += draw(st.integers(0, 5 * HOUR))
        past_in += draw(st.integers(0, 10_000_000))
        reason = Reason.BEFORE_RESET if i <= before else Reason.SCHEDULED
        size = draw(st.integers(0, 4_000_000))
        made.append(Checkpoint(i, version, version, 0, ms, reason, 0, 0, size, past_in, "{}"))
    if made and draw(st.booleans()):
        tail = draw(st.integers(1, 1000))
        made[-1] = dataclasses.replace(
            made[-1], reason=Reason.BEFORE_ROLLBACK, version=version + tail, base=version
        )
        version += tail
    line = [c for c in made if c.reason == Reason.SCHEDULED]
    base = line[0] if line else None
    now_ms = ms + draw(st.integers(0, 10 * HOUR))
    state = HistoryState(
        epoch="e" * 16,
        config="{}",
        version=version + draw(st.integers(0, 30_000)),
        snap_version=version,
        base=base.id if base else None,
        past_version=base.version if base else version,
        past_in=past_in + draw(st.integers(0, 1_000_000)),
        checkpoints=made,
    )
    config = Settings(
        history_keep_s=draw(st.sampled_from([0, 60, 3600, 86_400])),
        history_keep_updates=draw(st.sampled_from([0, 1000, 100_000])),
        history_max_bytes=draw(st.sampled_from([0, 10**6, 10**8, 10**12])),
    )
    return state, config, now_ms


def kept_bytes(state: HistoryState, kept: Kept) -> int:
    by_id = {c.id: c for c in state.checkpoints}
    held = sum(c.bytes for c in state.checkpoints if c.id not in kept.drop)
    return held + (state.past_in - by_id[kept.base].past_in if kept.base is not None else 0)


def newest(state: HistoryState) -> int | None:
    """The newest checkpoint but the one the retained log starts from."""
    others = [c for c in state.checkpoints if c.id != state.base]
    return max(others, key=lambda c: (c.ms, c.id)).id if others else None


def after(state: HistoryState, kept: Kept) -> HistoryState:
    return dataclasses.replace(
        state,
        base=kept.base,
        past_version=kept.base_version,
        checkpoints=[c for c in state.checkpoints if c.id not in kept.drop],
    )


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_retained_log_starts_at_a_kept_checkpoint_of_the_line_and_only_moves_up(
    case: tuple[HistoryState, Settings, int],
) -> None:
    state, config, now_ms = case
    kept = policy(state, config, now_ms)
    assert set(kept.drop) <= {c.id for c in state.checkpoints}
    if state.base is None:
        assert kept.base is None
        return
    assert kept.base is not None and kept.base not in kept.drop
    new = next(c for c in state.checkpoints if c.id == kept.base)
    assert new.reason == Reason.SCHEDULED and new.id >= state.base
    assert kept.base_version == new.version >= state.past_version


@settings(max_examples=300, deadline=None)
@given(histories())
def test_within_its_bytes_every_version_of_the_kept_hour_or_updates_stays_restorable(
    case: tuple[HistoryState, Settings, int],
) -> None:
    state, config, now_ms = case
    config = config.model_copy(update={"history_max_bytes": 10**15})
    kept = policy(state, config, now_ms)
    if kept.base is None or kept.base == state.base:
        return
    new = next(c for c in state.checkpoints if c.id == kept.base)
    # It moved only to a checkpoint older than the kept updates, or than the kept time.
    assert (
        config.history_keep_updates == 0
        or new.version <= state.version - config.history_keep_updates
        or new.ms <= now_ms - 1000 * config.history_keep_s
    )
    newest = sorted(state.checkpoints, key=lambda c: (c.ms, c.id))[-KEEP_LAST:]
    assert not {c.id for c in newest} & set(kept.drop)


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_bytes_bound_holds_unless_nothing_more_can_go(
    case: tuple[HistoryState, Settings, int],
) -> None:
    state, config, now_ms = case
    kept = policy(state, config, now_ms)
    if kept_bytes(state, kept) <= config.history_max_bytes:
        return
    # Over the bound only with every checkpoint gone but the newest, and the newest of the
    # line, which the model's own updates since follow.
    remaining = {c.id for c in state.checkpoints if c.id not in kept.drop}
    assert remaining - {kept.base} <= {newest(state)}
    line = [c.version for c in state.checkpoints if c.reason == Reason.SCHEDULED]
    assert kept.base is None or kept.base_version == max(line)


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(1, 10**9))
def test_room_is_made_for_what_is_about_to_be_written(
    case: tuple[HistoryState, Settings, int], adding: int
) -> None:
    state, config, now_ms = case
    kept = policy(state, config, now_ms, adding)
    if kept_bytes(state, kept) + adding <= config.history_max_bytes:
        return
    # Past it only with every checkpoint gone but the newest of the line, which the model's
    # own updates since follow (the newest of all goes too: a newer one is coming).
    remaining = {c.id for c in state.checkpoints if c.id not in kept.drop}
    assert remaining <= ({kept.base} if kept.base is not None else set())


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_newest_checkpoint_stays_whatever_its_size(
    case: tuple[HistoryState, Settings, int],
) -> None:
    state, config, now_ms = case
    kept = policy(state, config, now_ms)
    assert newest(state) not in kept.drop


@settings(max_examples=300, deadline=None)
@given(histories())
def test_what_the_policy_keeps_it_keeps_again(case: tuple[HistoryState, Settings, int]) -> None:
    state, config, now_ms = case
    kept = policy(state, config, now_ms)
    again = policy(after(state, kept), config, now_ms)
    assert again.drop == [] and again.base == kept.base
