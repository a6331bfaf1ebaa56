"""A model's history, as the API serves it: its checkpoints and kept updates listed, a rollback
to a kept version or checkpoint, an undo of a key's or a time range's updates. What is kept is
``retention.py``'s; how it lives in Redis, ``store/ops/history.py``'s."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from service.admin.models import EXPORT_ATTEMPTS, Models, pack_snapshot
from service.admin.retention import make_room, prune_quietly, rebuild
from service.contract.names import check_name
from service.errors import Conflict, ModelBusy, ModelNotFound, ModelStateLost, NotFound, StaleModel
from service.learner import ModelConfig, Weights
from service.learner.codec import PENDING, RESTARTED, entry_kind, entry_provenance, new_epoch
from service.store.ops.history import HistoryState, Restorable


@dataclass(frozen=True, slots=True)
class Undone:
    version: int  # the model's version now
    removed: int  # updates left out
    before: int | None  # the checkpoint of the model as it was (None: nothing was undone)


@dataclass(frozen=True, slots=True)
class KeptUpdateList:
    version: int
    first_kept: int
    updates: list[dict[str, Any]]


def _rebuilt(restorable: Restorable) -> tuple[ModelConfig, Weights, bytes]:
    """``rebuild``, with the weights packed too (run in a thread: for the largest models this
    takes long enough to stall every request of the worker)."""
    config, weights = rebuild(restorable)
    return config, weights, pack_snapshot(weights)


def _undone(
    entries: list[bytes], source: str | None, from_time: float | None, to_time: float | None
) -> list[int]:
    """Where the kept updates caused by the key named ``source`` (None: any) from
    ``from_time`` to before ``to_time`` (Unix seconds; None: any) are among ``entries``; one
    kept from before updates recorded their source never is, nor a retrain's (the examples a
    learner that replaced the served one at a drift learned afresh: that learner stays whole)."""
    start = -math.inf if from_time is None else from_time * 1000
    stop = math.inf if to_time is None else to_time * 1000
    drops = []
    for i, entry in enumerate(entries):
        by, ms = entry_provenance(entry)[2:]
        if entry_kind(entry) != PENDING:
            continue
        if ms is not None and (source is None or by == source) and start <= ms < stop:
            drops.append(i)
    return drops


class History:
    """One per worker process, beside its ``Models``: the history routes' operations."""

    def __init__(self, models: Models) -> None:
        self.models = models
        self.store = models.store
        self.settings = models.settings
        self.clock = models.clock

    async def checkpoints(self, name: str) -> HistoryState:
        """The model's checkpoints, and the versions it can be rolled back to."""
        return await self.store.read_history(check_name(name))

    async def updates(self, name: str, first: int | None, limit: int) -> KeptUpdateList:
        """The model's kept updates from version ``first`` (None: the last ``limit``), each with
        who caused it and when."""
        kept = await self.store.read_updates(check_name(name), first, limit)
        config = ModelConfig.from_json(kept.config)
        listed = []
        for i, entry in enumerate(kept.entries):
            _, t, source, ms = entry_provenance(entry)
            listed.append(
                {
                    "version": kept.first + i,
                    "source": source,
                    "time": None if ms is None else ms / 1000,
                    "label": config.classes[t],
                }
            )
        return KeptUpdateList(kept.version, kept.first_kept, listed)

    async def _restorable(
        self, name: str, version: int | None, checkpoint: int | None
    ) -> tuple[str, Restorable]:
        """What restores ``version`` or ``checkpoint``, with the model's epoch then; the error
        that says it is not kept."""
        if checkpoint is not None:
            restorable = await self.store.read_checkpoint(name, checkpoint)
            epoch = (await self.store.epochs([name]))[0]
            if epoch is None:
                raise ModelNotFound(name)
            if restorable is None:
                raise NotFound(
                    f"Model {name!r} keeps no checkpoint {checkpoint}; GET "
                    f"/models/{name}/checkpoints lists those it keeps.",
                    code="checkpoint_not_found",
                )
            return epoch, restorable
        assert version is not None
        got = await self.store.read_kept(name, version)
        if got is None:
            h = await self.checkpoints(name)
            raise Conflict(
                f"Model {name!r} keeps versions {h.first_version} to {h.version}; "
                f"version {version} is not among them (GET /models/{name}/checkpoints "
                "lists its checkpoints).",
                code="version_not_kept",
            )
        epoch, _, restorable = got
        return epoch, restorable

    async def rollback(
        self, name: str, version: int | None, checkpoint: int | None
    ) -> tuple[int, int]:
        """Make the model exactly what it was at ``version`` (kept in its history), or what
        checkpoint ``checkpoint`` holds: (the version now, the checkpoint of the model as it
        was just before)."""
        self.models.guard()
        check_name(name)
        for _ in range(EXPORT_ATTEMPTS):
            epoch, restorable = await self._restorable(name, version, checkpoint)
            # (off the event loop: a large model's weights take a while to rebuild and pack)
            config, weights, packed = await asyncio.to_thread(_rebuilt, restorable)
            self.models.check_limits(config)
            if version is not None and weights.version != version:
                raise ModelStateLost(name, "its kept updates do not add up to their versions")
            keep = version is not None and self.settings.history_keep_updates > 0
            # It adds a checkpoint of the model as it is; kept, the log's entries up to the
            # version restored join the retained log (which starts at the snapshot if none).
            snap, log_bytes = await self.store.read_sizes(name)
            joining = sum(map(len, restorable.entries)) if keep and not restorable.past else 0
            now_ms = int(1000 * self.clock())
            adding, starting = snap + log_bytes + joining, snap if keep else 0
            room = await make_room(
                self.store, name, self.settings, now_ms=now_ms, adding=adding, starting=starting
            )
            kept_bytes = -1  # the retained log cut at the version: its bytes from its start
            if restorable.past:
                kept_bytes = sum(
                    map(len, restorable.entries[max(0, room.base_version - restorable.base) :])
                )
            # A model with no retained log yet starts one at its snapshot, read here.
            snapshot = restorable.weights if keep and room.base is None else None
            seen = await self._seen(name, config, restorable, version)
            try:
                before = await self.store.rollback(
                    name,
                    epoch=epoch,
                    new_epoch=new_epoch(),
                    version=weights.version,
                    weights=packed,
                    config=restorable.config,
                    now_ms=now_ms,
                    keep=keep,
                    kept_bytes=kept_bytes,
                    snapshot=snapshot,
                    seen=seen,
                )
            except StaleModel:
                continue  # reset, imported or rolled back meanwhile: look again
            self.models.replicas.drop(name)
            await prune_quietly(self.store, name, self.settings, now_ms)
            return weights.version, before
        raise ModelBusy(f"Model {name!r} kept changing during the rollback; retry shortly.")

    async def _seen(
        self, name: str, config: ModelConfig, restorable: Restorable, version: int | None
    ) -> int | None:
        """The labelled examples an averaged learner restored had seen, which its mean divides
        by: a checkpoint's count, else that of the last update restored (its ``k``), else one
        less than the next update's; None where the count stays (not averaged, or the version
        restored is the model's own)."""
        if not config.counts_seen:
            return None
        if version is None:
            return restorable.seen
        after = await self.store.read_updates(name, version + 1, 1)
        if not after.entries or after.first != version + 1:
            return None  # (the model's own version: its count stays)
        if restorable.entries:
            return entry_provenance(restorable.entries[-1])[0] or None
        if entry_kind(after.entries[0]) == RESTARTED:  # (its ordinal is a retrained learner's)
            return restorable.seen
        k = entry_provenance(after.entries[0])[0]
        return k - 1 if k > 0 else None

    async def undo(
        self, name: str, source: str | None, from_time: float | None, to_time: float | None
    ) -> Undone:
        """Leave out of the model the kept updates caused by the key named ``source`` and made
        from ``from_time`` to before ``to_time`` (Unix seconds; None: any): it becomes, at
        once and exactly, its oldest kept weights with every other kept update applied in
        order, and those stay its kept updates (renumbered). An update kept from before
        updates recorded their source is always kept."""
        self.models.guard()
        check_name(name)
        for _ in range(EXPORT_ATTEMPTS):
            got = await self.store.read_kept(name)
            assert got is not None  # (everything kept is always kept)
            epoch, version, kept = got
            drops = _undone(kept.entries, source, from_time, to_time)
            if not drops:
                return Undone(version, 0, None)
            gone = set(drops)
            entries = [e for i, e in enumerate(kept.entries) if i not in gone]
            rest = dataclasses.replace(kept, entries=entries)
            _, weights, packed = await asyncio.to_thread(_rebuilt, rest)
            # It adds a checkpoint of the model as it is, the log's entries join the retained
            # log, which starts at the snapshot if none does yet.
            snap, log_bytes = await self.store.read_sizes(name)
            now_ms = int(1000 * self.clock())
            adding = snap + 2 * log_bytes
            room = await make_room(
                self.store, name, self.settings, now_ms=now_ms, adding=adding, starting=snap
            )
            if room.base_version != kept.base:
                continue  # its oldest kept updates went: rebuild from those kept now
            try:
                done = await self.store.undo_updates(
                    name,
                    epoch=epoch,
                    new_epoch=new_epoch(),
                    expect=version,
                    start=kept.base,
                    drops=drops,
                    weights=packed,
                    version=weights.version,
                    kept_bytes=sum(map(len, entries)),
                    left_from=kept.base + drops[0] + 1,
                    now_ms=now_ms,
                    snapshot=None if kept.past else kept.weights,
                )
            except StaleModel:
                continue
            if done is None:
                continue  # its oldest kept updates moved meanwhile: read again
            self.models.replicas.drop(name)
            await prune_quietly(self.store, name, self.settings, now_ms)
            before, now_version = done
            return Undone(now_version, len(drops), before)
        raise ModelBusy(f"Model {name!r} kept changing during the undo; retry shortly.")
