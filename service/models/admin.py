"""The models' lifecycle: create, read, list, export, import, reset, delete; and the watch on
the store's condition that keeps a worker from serving models it should not."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.contract.export_format import FileCheckpoint, export_document, parse_document
from service.contract.names import check_name
from service.contract.store_protocol import Checkpoint, Meta, Reason
from service.contract.store_values import Observations
from service.engine.replica import Replica
from service.engine.replica_cache import Replicas
from service.errors import (
    STORE_UNAVAILABLE,
    Conflict,
    InvalidInput,
    ModelBusy,
    ModelNotFound,
    ModelStateLost,
    NotFound,
    ServiceError,
    StaleModel,
    Unavailable,
    store_unavailable,
)
from service.learner import ConfigError, ModelConfig, Weights
from service.learner.codec import entry_provenance, new_epoch, pack_weights
from service.models.retention import make_room, prune, rebuild
from service.settings import Settings
from service.store import Condition, Store, StoreError
from service.store.ops.history import HistoryState, Restorable

log = logging.getLogger("perceptron")
_LOUD_EVERY = 12  # checks between two error lines while the store may evict keys
_EXPORT_ATTEMPTS = 20  # reads of a model's weights and counters that learning moved meanwhile
_RECHECK_TIMEOUT_S = 1.0  # a check of the store out of turn, before it answers anyway
# Answers that keys may have been evicted: checked against the store's policy at once.
# And a refusal for eviction, so that the store's recovery is seen by the client's retry.
_MAYBE_EVICTED = frozenset(
    {"model_not_found", "model_state_lost", "store_full", "store_evicts_keys"}
)


def _packed(weights: Weights) -> bytes:
    """The weights as a snapshot: zeros need none (b""), any other weights do."""
    arrays = (weights.w, weights.b, weights.wsum, weights.bsum)
    return pack_weights(weights) if any(a is not None and a.any() for a in arrays) else b""


def _rebuilt(restorable: Restorable) -> tuple[ModelConfig, Weights, bytes]:
    """``rebuild``, with the weights packed too (run in a thread: for the largest models this
    takes long enough to stall every request of the worker)."""
    config, weights = rebuild(restorable)
    return config, weights, _packed(weights)


def _carried(c: FileCheckpoint, config: ModelConfig) -> tuple[str, bytes]:
    """An imported checkpoint as the store keeps it: its record, and its weights packed (no
    tail, and outside the retained log: it restores its weights, not the updates around)."""
    packed = _packed(c.weights)
    v = c.weights.version
    record = Checkpoint(
        0, v, v, c.weights.seen, c.ms, c.reason, c.mistakes, c.window, len(packed), 0,
        config.to_json(),
    ).record()  # fmt: skip
    return record, packed


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


class Models:
    """One per worker process: the models in the store, and this worker's replicas of them."""

    def __init__(
        self, store: Store, settings: Settings, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.condition = Condition()  # the store's, as last checked by watch()
        self.replicas = Replicas(store, settings, self.guard, clock)
        self._tasks: set[asyncio.Task[None]] = set()

    def guard(self) -> None:
        """Serve no model from a store that may evict its keys."""
        if self.condition.code == "store_evicts_keys":
            raise Unavailable(self.condition.detail, code=self.condition.code)

    async def check_store(self) -> Condition:
        """Check the store now; log when its condition changes. Raises when it is down."""
        before, now = self.condition, await self.store.condition()
        self.condition = now
        if now.code and now.code != before.code:
            log.error("the store cannot serve models (%s): %s", now.code, now.detail)
        elif before.code and not now.code:
            log.warning("the store serves models again (%s is over)", before.code)
        return now

    async def readiness(self) -> Condition:
        """What /readyz answers and /metrics exports as ``perceptron_ready``: the store's
        condition now, ``store_unavailable`` when it does not answer."""
        try:
            return await self.check_store()
        except Exception as e:  # any failure to reach the store means not ready
            return Condition(
                STORE_UNAVAILABLE, f"The model store is not answering ({type(e).__name__})."
            )

    async def guard_now(self) -> None:
        """:meth:`guard` on the store's condition as it is now, not as the last watch saw it
        (one INFO command): before a change that must not happen on a store that may evict
        keys, such as making a model whose evicted keys left no trace."""
        try:
            await asyncio.wait_for(self.check_store(), _RECHECK_TIMEOUT_S)
        except TimeoutError:  # (a store that does not answer in time: as one that is down)
            raise store_unavailable() from None
        self.guard()

    async def explain(self, code: str) -> Unavailable | None:
        """The store's own reason for an answer that keys may have been evicted, when it has
        one: a policy switched to one that evicts since the last watch answers
        store_evicts_keys at once, not model_not_found or store_full until the next check."""
        if code not in _MAYBE_EVICTED:
            return None
        try:
            await self.guard_now()
        except Unavailable as e:
            return e
        except Exception:  # the store is away: the answer stands
            return None
        return None

    async def watch(self) -> None:
        """Every PERCEPTRON_STORE_CHECK_S: the store's condition, and models changed elsewhere.

        A store that may evict keys is logged as an error once a minute while it lasts.
        """
        rounds = 0
        while True:
            try:
                condition = await self.check_store()
                if condition.code and rounds and rounds % _LOUD_EVERY == 0:
                    log.error("still not serving models (%s): %s", condition.code, condition.detail)
                await self.replicas.forget_changed()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the store is away: requests say so; look again later
                log.debug("store check failed: %s", e)
            rounds += 1
            await asyncio.sleep(self.settings.store_check_s)

    def start(self) -> None:
        task = asyncio.create_task(self.watch())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- models ------------------------------------------------------------------------

    async def create_model(self, name: str, params: dict[str, Any]) -> tuple[ModelConfig, bool]:
        """Create a model; returns its config and whether it was new. 409 on another config."""
        await self.guard_now()
        check_name(name)
        try:
            config = ModelConfig.from_dict(params)
        except ConfigError as e:
            raise InvalidInput(str(e), code="invalid_config") from e
        self._check_limits(config)
        names = await self.store.model_names()
        if name not in names:
            if len(names) >= self.settings.max_models:
                raise InvalidInput(
                    f"The store holds at most {self.settings.max_models} models "
                    "(PERCEPTRON_MAX_MODELS); delete one first.",
                    code="too_many_models",
                )
        existing = await self.store.create_model(name, config.to_json(), new_epoch())
        if existing is None:
            return config, True
        current = ModelConfig.from_json(existing)
        if current != config:
            raise Conflict(
                f"Model {name!r} exists with another configuration; delete it first or use "
                "another name.",
                code="model_exists",
            )
        return current, False

    def _check_limits(self, config: ModelConfig) -> None:
        s = self.settings
        if not config.dense and config.hash_bits > s.max_hash_bits:
            raise InvalidInput(
                f"hash_bits is at most {s.max_hash_bits} (PERCEPTRON_MAX_HASH_BITS); "
                f"got {config.hash_bits}.",
                code="invalid_config",
            )
        if config.n_classes > s.max_classes:
            raise InvalidInput(
                f"A model has at most {s.max_classes} classes (PERCEPTRON_MAX_CLASSES); "
                f"got {config.n_classes}.",
                code="invalid_config",
            )
        if config.n_rows * config.dim > s.max_weights:  # every worker holds them in memory
            raise InvalidInput(
                f"A model has at most {s.max_weights} weights (PERCEPTRON_MAX_WEIGHTS); this "
                f"configuration needs {config.n_rows} x {config.dim}: fewer classes, 'ovr' "
                "rather than 'ovo', or a smaller n_features or hash_bits.",
                code="invalid_config",
            )
        if config.dense and config.dim > s.max_features:
            raise InvalidInput(
                f"n_features is at most {s.max_features} (PERCEPTRON_MAX_FEATURES); "
                f"got {config.dim}.",
                code="invalid_config",
            )

    async def read_model(self, name: str) -> tuple[ModelConfig, dict[str, str]]:
        self.guard()
        meta = await self.store.read_meta(check_name(name))
        if meta is None:
            if await self.store.lost(name):  # its keys are gone, not the model
                raise ModelStateLost(name, "it is listed but its keys are gone (evicted?)")
            raise ModelNotFound(name)
        return ModelConfig.from_json(meta[Meta.CONFIG]), meta

    async def list_models(self) -> list[tuple[str, ModelConfig, dict[str, str]]]:
        self.guard()
        names = await self.store.model_names()
        metas = await asyncio.gather(*(self.store.read_meta(n) for n in names))
        models = []
        for n, m in zip(names, metas, strict=True):
            if m is None:  # listed, but deleted meanwhile (or its creation failed)
                continue
            try:
                models.append((n, ModelConfig.from_json(m[Meta.CONFIG]), m))
            except (KeyError, ValueError, TypeError) as e:  # one odd model hides no other
                log.error("model %r has an unreadable configuration (%s); not listed", n, e)
        return models

    async def export_model(self, name: str, checkpoints: bool = False) -> dict[str, Any]:
        """The model's configuration, weights and counters, consistent at one version; with
        ``checkpoints``, those of its checkpoints made under its configuration too."""
        kept = await self._file_checkpoints(name) if checkpoints else None
        for _ in range(_EXPORT_ATTEMPTS):
            rep = await self.replicas.current(name)
            config, meta = await self.read_model(name)
            if int(meta[Meta.VERSION]) == rep.weights.version and meta[Meta.EPOCH] == rep.epoch:
                rep.weights.seen = int(meta[Meta.SEEN])
                return export_document(name, config, rep.weights, meta, kept)
        raise ModelBusy(f"Model {name!r} kept changing during the export; retry shortly.")

    async def _file_checkpoints(self, name: str) -> list[FileCheckpoint]:
        """The model's checkpoints of its present configuration, oldest first, each with its
        weights rebuilt (one let go meanwhile is left out)."""
        h = await self.history(name)
        out = []
        for c in sorted(h.checkpoints, key=lambda c: c.id):
            restorable = await self.store.read_checkpoint(name, c.id)
            if restorable is None or restorable.config != h.config:
                continue
            _, weights = rebuild(restorable)
            weights.seen = c.seen
            out.append(FileCheckpoint(weights, c.ms, c.reason, c.mistakes, c.window))
        return out

    async def import_model(self, name: str, document: Any) -> ModelConfig:
        """Make model ``name`` what the export says; refused whole when anything is off."""
        self.guard()
        check_name(name)
        file = parse_document(document)
        self._check_limits(file.config)
        meta = await self.store.read_meta(name)
        if meta is not None and ModelConfig.from_json(meta[Meta.CONFIG]) != file.config:
            raise Conflict(
                f"Model {name!r} exists with another configuration than the file's; delete "
                "it first or import under another name.",
                code="model_exists",
            )
        carried = [_carried(c, file.config) for c in file.checkpoints]
        await self._replace(
            name,
            file.config,
            file.weights,
            file.counters,
            file.created,
            Reason.BEFORE_IMPORT,
            carried,
        )
        return file.config

    async def reset_model(self, name: str) -> None:
        """Zero the weights and counters; pending predictions lapse."""
        config, meta = await self.read_model(name)
        created = int(meta.get(Meta.CREATED, 0))
        await self._replace(name, config, Weights.zeros(config), {}, created, Reason.BEFORE_RESET)

    async def _replace(
        self,
        name: str,
        config: ModelConfig,
        weights: Weights,
        counters: dict[str, str],
        created: int,
        reason: str,
        checkpoints: list[tuple[str, bytes]] | None = None,
    ) -> None:
        data, now_ms = _packed(weights), int(1000 * self.clock())
        carried = checkpoints or ()
        if await self.store.read_meta(name) is not None:  # kept first as a checkpoint
            snap, log_bytes = await self.store.read_sizes(name)
            adding = snap + log_bytes + sum(len(packed) for _, packed in carried)
            await make_room(self.store, name, self.settings, now_ms, adding)
        await self.store.replace_model(
            name,
            config.to_json(),
            new_epoch(),
            created or int(self.clock()),
            weights.version,
            weights.seen,
            data,
            counters,
            now_ms,
            reason,
            carried,
        )
        self.replicas.drop(name)
        await self._prune(name, now_ms)

    async def _prune(self, name: str, now_ms: int) -> None:
        """After an operation that added to the model's history: let go of what the policy
        no longer keeps (done: a failure here is the next operation's to make up)."""
        try:
            await prune(self.store, name, self.settings, now_ms)
        except (StoreError, ServiceError) as e:
            log.warning("letting model %r's old history go failed (%s)", name, e)

    async def history(self, name: str) -> HistoryState:
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

    async def rollback(
        self, name: str, version: int | None, checkpoint: int | None
    ) -> tuple[int, int]:
        """Make the model exactly what it was at ``version`` (kept in its history), or what
        checkpoint ``checkpoint`` holds: (the version now, the checkpoint of the model as it
        was just before)."""
        self.guard()
        check_name(name)
        for _ in range(_EXPORT_ATTEMPTS):
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
            else:
                assert version is not None
                got = await self.store.read_kept(name, version)
                if got is None:
                    h = await self.history(name)
                    raise Conflict(
                        f"Model {name!r} keeps versions {h.first_version} to {h.version}; "
                        f"version {version} is not among them (GET /models/{name}/checkpoints "
                        "lists its checkpoints).",
                        code="version_not_kept",
                    )
                epoch, _, restorable = got
            # (off the event loop: a large model's weights take a while to rebuild and pack)
            config, weights, packed = await asyncio.to_thread(_rebuilt, restorable)
            self._check_limits(config)
            if version is not None and weights.version != version:
                raise ModelStateLost(name, "its kept updates do not add up to their versions")
            keep = version is not None and self.settings.history_keep_updates > 0
            # It adds a checkpoint of the model as it is; kept, the log's entries up to the
            # version restored join the retained log (which starts at the snapshot if none).
            snap, log_bytes = await self.store.read_sizes(name)
            joining = sum(map(len, restorable.entries)) if keep and not restorable.past else 0
            now_ms = int(1000 * self.clock())
            adding, starting = snap + log_bytes + joining, snap if keep else 0
            room = await make_room(self.store, name, self.settings, now_ms, adding, starting)
            kept_bytes = -1  # the retained log cut at the version: its bytes from its start
            if restorable.past:
                kept_bytes = sum(
                    map(len, restorable.entries[max(0, room.base_version - restorable.base) :])
                )
            # A model with no retained log yet starts one at its snapshot, read here.
            snapshot = restorable.weights if keep and room.base is None else None
            try:
                before = await self.store.rollback(
                    name,
                    epoch,
                    new_epoch(),
                    weights.version,
                    packed,
                    restorable.config,
                    now_ms,
                    keep=keep,
                    kept_bytes=kept_bytes,
                    snapshot=snapshot,
                )
            except StaleModel:
                continue  # reset, imported or rolled back meanwhile: look again
            self.replicas.drop(name)
            await self._prune(name, now_ms)
            return weights.version, before
        raise ModelBusy(f"Model {name!r} kept changing during the rollback; retry shortly.")

    async def undo(
        self, name: str, source: str | None, from_time: float | None, to_time: float | None
    ) -> Undone:
        """Leave out of the model the kept updates caused by the key named ``source`` and made
        from ``from_time`` to before ``to_time`` (Unix seconds; None: any): it becomes, at
        once and exactly, its oldest kept weights with every other kept update applied in
        order, and those stay its kept updates (renumbered). An update kept from before
        updates recorded their source is always kept."""
        self.guard()
        check_name(name)
        start = -math.inf if from_time is None else from_time * 1000
        stop = math.inf if to_time is None else to_time * 1000

        def undone(by: str | None, ms: int | None) -> bool:
            if ms is None or (source is not None and by != source):
                return False
            return start <= ms < stop

        for _ in range(_EXPORT_ATTEMPTS):
            got = await self.store.read_kept(name)
            assert got is not None  # (everything kept is always kept)
            epoch, version, kept = got
            drops = [i for i, e in enumerate(kept.entries) if undone(*entry_provenance(e)[2:])]
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
            room = await make_room(
                self.store, name, self.settings, now_ms, snap + 2 * log_bytes, snap
            )
            if room.base_version != kept.base:
                continue  # its oldest kept updates went: rebuild from those kept now
            try:
                done = await self.store.undo_updates(
                    name,
                    epoch,
                    new_epoch(),
                    version,
                    kept.base,
                    drops,
                    packed,
                    weights.version,
                    sum(map(len, entries)),
                    kept.base + drops[0] + 1,
                    now_ms,
                    snapshot=None if kept.past else kept.weights,
                )
            except StaleModel:
                continue
            if done is None:
                continue  # its oldest kept updates moved meanwhile: read again
            self.replicas.drop(name)
            await self._prune(name, now_ms)
            before, now_version = done
            return Undone(now_version, len(drops), before)
        raise ModelBusy(f"Model {name!r} kept changing during the undo; retry shortly.")

    async def delete_model(self, name: str) -> None:
        self.guard()
        if not await self.store.delete_model(check_name(name)):
            raise ModelNotFound(name)
        self.replicas.drop(name)

    async def observe(self, name: str) -> tuple[Replica, Observations]:
        """The model's replica, caught up, and its counters and outcome records."""
        obs = await self.store.read_observations(check_name(name))
        if obs is None:
            raise ModelNotFound(name)
        return await self.replicas.current(name), obs

    async def close(self) -> None:
        # Cancelled again until each has ended: a cancellation can be lost (on Python 3.11,
        # asyncio.wait_for swallows one that comes as what it awaits completes, and the
        # embedded store's client awaits so, e.g. within watch()'s store check).
        tasks = list(self._tasks)
        while pending := [t for t in tasks if not t.done()]:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=0.1)
        await asyncio.gather(*tasks, return_exceptions=True)
