"""This worker's replica of each model it serves: loaded from the store, kept within a byte
budget (least recently used dropped first), brought up to date, and compacted into the store's
snapshot once a model's log is long."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator

from service.contract.names import check_name
from service.contract.store_values import SyncData
from service.engine.replica import Replica
from service.engine.standings import Standings, fold_quietly
from service.engine.tasks import cancel_all
from service.errors import (
    InvalidInput,
    ModelBusy,
    ModelNotFound,
    ServiceError,
    StaleModel,
    Unavailable,
)
from service.learner.codec import pack_weights, unpack_weights
from service.metrics.prometheus import record_replicas
from service.settings import Settings
from service.store import Condition, Store, StoreError

log = logging.getLogger("perceptron")
_ATTEMPTS = 3  # a request's tries on a replica that was replaced meanwhile, at least
# and more while the model keeps being replaced for less than this long (promotions one after
# another, each holding the model a few ms: a request waits through them), MOST_ATTEMPTS at most
REPLACED_FOR_S = 10.0
MOST_ATTEMPTS = 20
UNPACK_IN_THREAD = 1 << 20  # a snapshot of more bytes is unpacked off the event loop


class Replicas:
    """One per worker process."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        clock: Callable[[], float] = time.time,
        prune: Callable[[str, int], Awaitable[object]] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        # What a compaction runs after, given the model and the time in ms: the history's
        # policy, handed in by the layer that keeps it (``models/retention.py``)
        self.prune = prune
        # The store's condition while it may serve no model (it may evict keys: set by the
        # worker's watch, ``models/models.py``): every request is refused with it.
        self.refusing: Condition | None = None
        # Least recently used first; their weights' bytes add up to at most the budget (but
        # the one model in use, whatever its size).
        self._kept: OrderedDict[str, Replica] = OrderedDict()
        self._kept_bytes = 0
        self._compacting: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        # Each model's challengers as this worker last saw them (their learns fold from here)
        self.standings = Standings(store)

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
        if self.refusing is not None:
            self.guard()
        rep = self._kept.get(name)
        if rep is not None:
            self._kept.move_to_end(name)
            return rep
        meta = await self.store.read_meta(check_name(name))
        if meta is None:
            raise ModelNotFound(name)
        # Another request may have loaded it meanwhile: every request shares one replica.
        return self._kept.get(name) or self.keep(Replica.from_meta(name, meta))

    def attempts(self, name: str) -> Iterator[Attempt]:
        """A request's attempts on the model's replica: each loads it (``async with``), and
        one that finds the replica replaced is given up for the next; the caller's body runs
        in place, and returns from the first that holds::

            for attempt in replicas.attempts(name):
                async with attempt as rep:
                    return await work_on(rep)
            raise replicas.busy(name)

        The model was re-created, or this worker dropped its replica to stay within its
        memory budget: StaleModel gives the attempt up. A request this replica's configuration
        refuses (InvalidInput: a label none of its classes, features of another dimension) is
        refused only once the store confirms the replica is still the model: one deleted or
        made anew elsewhere, which this worker has not noticed yet, answers as the model is
        now (404, or the new one's answer). It tries _ATTEMPTS times, and again while the
        model was replaced for less than REPLACED_FOR_S (by this worker's clock)."""
        start = self.clock()
        for n in range(MOST_ATTEMPTS):
            if n >= _ATTEMPTS and self.clock() - start > REPLACED_FOR_S:
                return
            yield Attempt(self, name)

    def busy(self, name: str) -> ModelBusy:
        """The error of a request whose every attempt found the model replaced."""
        return ModelBusy(
            f"Model {name!r} was replaced under every attempt for {REPLACED_FOR_S:g} s; retry "
            "shortly."
        )

    async def current(self, name: str) -> Replica:
        """This worker's replica brought up to the model's latest version."""
        for attempt in self.attempts(name):
            async with attempt as rep:
                data = await self.store.sync(name, rep.weights.version)
                unpacked = None
                if rep.needs_snapshot(data) and len(data.snapshot or b"") > UNPACK_IN_THREAD:
                    # (off the event loop: a large model's snapshot takes a while to unpack)
                    unpacked = await asyncio.to_thread(
                        unpack_weights,
                        rep.config,
                        data.snapshot or b"",
                        data.base,
                        rep.weights.seen,
                    )
                rep.catch_up(data, unpacked)
                return rep
        raise self.busy(name)

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

    def guard(self) -> None:
        """Raise while the store may serve no model."""
        if self.refusing is not None:
            raise Unavailable(self.refusing.detail, code=self.refusing.code)

    # -- upkeep --------------------------------------------------------------------------

    def apply_sync(self, rep: Replica, data: SyncData) -> None:
        """Bring ``rep`` up to what the store sent; compact the model once its log is long."""
        rep.catch_up(data)
        self.compact_after(rep.name, len(data.entries))

    def compact_after(self, name: str, log_length: int, label_log: int = -1) -> None:
        """Compact the model once its log holds ``compact_every`` entries; fold its
        challengers' states forward once their labels' log (``label_log`` long) does."""
        if label_log >= self.settings.compact_every:
            self._fold(name)
        if log_length < self.settings.compact_every or name in self._compacting:
            return
        self._compacting.add(name)
        task = asyncio.create_task(self._compact(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _fold(self, name: str) -> None:
        key = "challengers:" + name
        if key in self._compacting:
            return
        self._compacting.add(key)
        task = asyncio.create_task(fold_quietly(self.standings, name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: self._compacting.discard(key))

    async def _compact(self, name: str) -> None:
        try:
            rep = await self.current(name)
            if rep.weights.version > 0:
                s, now_ms = self.settings, int(1000 * self.clock())
                data = pack_weights(rep.weights)
                keep = s.history_keep_updates > 0
                every_ms = 1000 * s.checkpoint_every_s
                if (
                    await self.store.compact(
                        name,
                        epoch=rep.epoch,
                        version=rep.weights.version,
                        data=data,
                        now_ms=now_ms,
                        keep=keep,
                        every=s.checkpoint_every,
                        every_ms=every_ms,
                    )
                    and self.prune is not None
                ):
                    await self.prune(name, now_ms)
        except (StoreError, ServiceError) as e:  # the store away, full or busy: one line
            log.warning("compacting model %r failed (%s); it will be tried again", name, e)
        except Exception:  # compaction is an optimisation: never let it hurt a request
            log.exception("compacting model %r failed; it will be tried again", name)
        finally:
            self._compacting.discard(name)

    async def close(self) -> None:
        await cancel_all(self._tasks)


class Attempt:
    """One attempt of a request on a model's replica (``Replicas.attempts``)."""

    __slots__ = ("_replicas", "_name", "_rep")

    def __init__(self, replicas: Replicas, name: str) -> None:
        self._replicas, self._name = replicas, name
        self._rep: Replica | None = None

    async def __aenter__(self) -> Replica:
        self._rep = await self._replicas.get(self._name)
        return self._rep

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        """Whether the attempt is given up for the next (its error swallowed)."""
        if kind is None or self._rep is None:
            return False
        replicas = self._replicas
        if issubclass(kind, StaleModel):
            replicas.drop(self._name)
            return True
        if issubclass(kind, InvalidInput):
            if (await replicas.store.epochs([self._name]))[0] == self._rep.epoch:
                return False  # the replica is the model: the request is refused
            replicas.drop(self._name)
            return True
        return False
