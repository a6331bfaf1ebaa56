"""This worker's replica of each model it serves: loaded from the store, kept within a byte
budget (least recently used dropped first), brought up to date, and compacted into the store's
snapshot once a model's log is long."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from service.contract.names import check_name
from service.contract.store_values import SyncData
from service.engine.replica import Replica
from service.errors import InvalidInput, ModelBusy, ModelNotFound, ServiceError, StaleModel
from service.learner.codec import pack_weights, unpack_weights
from service.metrics.prometheus import record_replicas
from service.models.retention import prune
from service.settings import Settings
from service.store import Store, StoreError

log = logging.getLogger("perceptron")
_ATTEMPTS = 3  # a request's tries on a replica that was replaced meanwhile
UNPACK_IN_THREAD = 1 << 20  # a snapshot of more bytes is unpacked off the event loop


class Replicas:
    """One per worker process. ``guard`` raises when the store may serve no model now."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        guard: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self._guard = guard
        # Least recently used first; their weights' bytes add up to at most the budget (but
        # the one model in use, whatever its size).
        self._kept: OrderedDict[str, Replica] = OrderedDict()
        self._kept_bytes = 0
        self._compacting: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- the cache -----------------------------------------------------------------------

    def keep(self, rep: Replica) -> Replica:
        """Keep ``rep``; drop the least recently used others past the memory budget."""
        self.drop(rep.name)
        self._kept[rep.name] = rep
        self._kept_bytes += rep.nbytes
        evicted = 0
        while self._kept_bytes > self.settings.replica_memory_bytes and len(self._kept) > 1:
            _, old = self._kept.popitem(last=False)
            self._kept_bytes -= old.nbytes
            evicted += 1
        record_replicas(len(self._kept), self._kept_bytes, evicted)
        return rep

    def drop(self, name: str) -> None:
        rep = self._kept.pop(name, None)
        if rep is not None:
            self._kept_bytes -= rep.nbytes
            record_replicas(len(self._kept), self._kept_bytes)

    def peek(self, name: str) -> Replica | None:
        """The replica kept for ``name``, if any, without loading or touching it."""
        return self._kept.get(name)

    def is_kept(self, rep: Replica) -> bool:
        """Whether ``rep`` is still the replica this worker serves its model from."""
        return self._kept.get(rep.name) is rep

    def check_current(self, rep: Replica) -> None:
        """A queued commit runs on the replica it was queued for, or not at all."""
        if not self.is_kept(rep):
            raise StaleModel(rep.name)

    @property
    def kept_bytes(self) -> int:
        return self._kept_bytes

    def kept_models(self) -> list[str]:
        """The models this worker keeps in memory, least recently used first."""
        return list(self._kept)

    async def get(self, name: str) -> Replica:
        """The model's replica, loaded when this worker keeps none (not caught up)."""
        self._guard()
        rep = self._kept.get(name)
        if rep is not None:
            self._kept.move_to_end(name)
            return rep
        meta = await self.store.read_meta(check_name(name))
        if meta is None:
            raise ModelNotFound(name)
        # Another request may have loaded it meanwhile: every request shares one replica.
        return self._kept.get(name) or self.keep(Replica.from_meta(name, meta))

    async def on(self, name: str, op: Callable[[Replica], Any]) -> Any:
        """Run ``op(replica)``; again on a fresh replica if the model was re-created (or this
        worker dropped its replica to stay within its memory budget).

        A request this replica's configuration refuses (InvalidInput: a label none of its
        classes, features of another dimension) is refused only once the store confirms the
        replica is still the model: one deleted or made anew elsewhere, which this worker has
        not noticed yet, answers as the model is now (404, or the new one's answer)."""
        for _ in range(_ATTEMPTS):
            rep = await self.get(name)
            try:
                return await op(rep)
            except StaleModel:
                self.drop(name)
            except InvalidInput:
                if (await self.store.epochs([name]))[0] == rep.epoch:
                    raise
                self.drop(name)
        raise ModelBusy(
            f"Model {name!r} was replaced under every one of {_ATTEMPTS} attempts; retry shortly."
        )

    async def current(self, name: str) -> Replica:
        """This worker's replica brought up to the model's latest version."""

        async def run(rep: Replica) -> Replica:
            data = await self.store.sync(name, rep.weights.version)
            unpacked = None
            if rep.needs_snapshot(data) and len(data.snapshot or b"") > UNPACK_IN_THREAD:
                # (off the event loop: a large model's snapshot takes a while to unpack)
                unpacked = await asyncio.to_thread(
                    unpack_weights, rep.config, data.snapshot or b"", data.base, rep.weights.seen
                )
            rep.catch_up(data, unpacked)
            return rep

        result: Replica = await self.on(name, run)
        return result

    async def forget_changed(self) -> list[str]:
        """Drop the replicas of models deleted, reset or imported (a new epoch) elsewhere."""
        names = list(self._kept)
        if not names:
            return []
        epochs = await self.store.epochs(names)
        gone = []
        for name, epoch in zip(names, epochs, strict=True):
            rep = self._kept.get(name)
            if rep is not None and rep.epoch != epoch:
                self.drop(name)
                gone.append(name)
        return gone

    # -- upkeep --------------------------------------------------------------------------

    def catch_up(self, rep: Replica, data: SyncData) -> None:
        rep.catch_up(data)
        self.maybe_compact(rep, len(data.entries))

    def maybe_compact(self, rep: Replica, log_length: int) -> None:
        self.compact_after(rep.name, log_length)

    def compact_after(self, name: str, log_length: int) -> None:
        """Compact the model once its log holds ``compact_every`` entries."""
        if log_length < self.settings.compact_every or name in self._compacting:
            return
        self._compacting.add(name)
        task = asyncio.create_task(self._compact(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _compact(self, name: str) -> None:
        try:
            rep = await self.current(name)
            if rep.weights.version > 0:
                s, now_ms = self.settings, int(1000 * self.clock())
                data = pack_weights(rep.weights)
                keep = s.history_keep_updates > 0
                every_ms = 1000 * s.checkpoint_every_s
                if await self.store.compact(
                    name, rep.epoch, rep.weights.version, data, now_ms, keep,
                    s.checkpoint_every, every_ms,
                ):  # fmt: skip
                    await prune(self.store, name, s, now_ms)
        except (StoreError, ServiceError) as e:  # the store away, full or busy: one line
            log.warning("compacting model %r failed (%s); it will be tried again", name, e)
        except Exception:  # compaction is an optimisation: never let it hurt a request
            log.exception("compacting model %r failed; it will be tried again", name)
        finally:
            self._compacting.discard(name)

    async def close(self) -> None:
        tasks = list(self._tasks)  # cancelled again until each has ended (Models.close)
        while pending := [t for t in tasks if not t.done()]:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=0.1)
        await asyncio.gather(*tasks, return_exceptions=True)
