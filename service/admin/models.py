"""The models' lifecycle: create, read, list, export, import, reset, delete; and the watch on
the store's condition that keeps a worker from serving models it should not."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from service.admin.retention import make_room, prune, prune_quietly, rebuild
from service.contract.export_format import FileCheckpoint, export_document, parse_document
from service.contract.names import check_name
from service.contract.store_protocol import Checkpoint, Meta, Reason
from service.contract.store_values import Observations
from service.engine.replica import Replica
from service.engine.replicas import Replicas
from service.engine.tasks import cancel_all
from service.errors import (
    STORE_UNAVAILABLE,
    Conflict,
    InvalidInput,
    ModelBusy,
    ModelNotFound,
    ModelStateLost,
    Unavailable,
    store_unavailable,
)
from service.learner import ConfigError, ModelConfig, Weights
from service.learner.codec import new_epoch, pack_weights
from service.settings import Settings
from service.store import Condition, Store

log = logging.getLogger("perceptron")
_LOUD_EVERY = 12  # checks between two error lines while the store may evict keys
WATCH_TASK = "store watch"  # the watch's task name (a probe of requests leaves it out)
EXPORT_ATTEMPTS = 20  # reads of a model's weights and counters that learning moved meanwhile
_RECHECK_TIMEOUT_S = 1.0  # a check of the store out of turn, before it answers anyway
# Answers that keys may have been evicted: checked against the store's policy at once.
# And a refusal for eviction, so that the store's recovery is seen by the client's retry.
_MAYBE_EVICTED = frozenset(
    {"model_not_found", "model_state_lost", "store_full", "store_evicts_keys"}
)


def pack_snapshot(weights: Weights) -> bytes:
    """The weights as a snapshot: zeros need none (b""), any other weights do."""
    return pack_weights(weights) if any(a.any() for a in weights.arrays()) else b""


def _carried(c: FileCheckpoint, config: ModelConfig) -> tuple[str, bytes]:
    """An imported checkpoint as the store keeps it: its record, and its weights packed (no
    tail, and outside the retained log: it restores its weights, not the updates around)."""
    packed = pack_snapshot(c.weights)
    v = c.weights.version
    record = Checkpoint(
        id=0,
        version=v,
        base=v,
        seen=c.weights.seen,
        ms=c.ms,
        reason=c.reason,
        mistakes=c.mistakes,
        window=c.window,
        bytes=len(packed),
        past_in=0,
        config=config.to_json(),
    ).record()
    return record, packed


class Models:
    """One per worker process: the models in the store, and this worker's replicas of them."""

    def __init__(
        self, store: Store, settings: Settings, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.replicas = Replicas(
            store, settings, clock, prune=lambda name, now_ms: prune(store, name, settings, now_ms)
        )
        self.condition = Condition()  # the store's, as last checked by watch()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def condition(self) -> Condition:
        return self._condition

    @condition.setter
    def condition(self, now: Condition) -> None:
        self._condition = now
        # Serve no model from a store that may evict its keys: the replicas refuse each request
        self.replicas.refusing = now if now.code == "store_evicts_keys" else None

    def guard(self) -> None:
        """Serve no model from a store that may evict its keys."""
        self.replicas.guard()

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
        task = asyncio.create_task(self.watch(), name=WATCH_TASK)
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
        self.check_limits(config)
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
                f"Model {name!r} exists with another configuration ({current.differences(config)}"
                "); delete it first or use another name.",
                code="model_exists",
            )
        return current, False

    def check_limits(self, config: ModelConfig) -> None:
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
        for _ in range(EXPORT_ATTEMPTS):
            rep = await self.replicas.current(name)
            config, meta = await self.read_model(name)
            background = await self.store.read_background(name) if config.retrains else None
            if int(meta[Meta.VERSION]) == rep.weights.version and meta[Meta.EPOCH] == rep.epoch:
                # (the served learner's own count: an averaged one's may be apart)
                rep.weights.seen = int(meta[Meta.SEEN]) - int(meta.get(Meta.SEEN_OFFSET, 0))
                if background is None or (background.version, background.seen) == (
                    rep.weights.version,
                    rep.weights.seen,
                ):
                    items = background.items if background else None
                    return export_document(name, config, rep.weights, meta, kept, background=items)
        raise ModelBusy(f"Model {name!r} kept changing during the export; retry shortly.")

    async def _file_checkpoints(self, name: str) -> list[FileCheckpoint]:
        """The model's checkpoints of its present configuration, oldest first, each with its
        weights rebuilt (one let go meanwhile is left out)."""
        h = await self.store.read_history(check_name(name))
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
        self.check_limits(file.config)
        meta = await self.store.read_meta(name)
        current = None if meta is None else ModelConfig.from_json(meta[Meta.CONFIG])
        if current is not None and current != file.config:
            raise Conflict(
                f"Model {name!r} exists with another configuration than the file's "
                f"({current.differences(file.config)}); delete it first or import under "
                "another name.",
                code="model_exists",
            )
        carried = [_carried(c, file.config) for c in file.checkpoints]
        await self._replace(
            name=name,
            config=file.config,
            weights=file.weights,
            counters=file.counters | file.drift,
            created=file.created,
            reason=Reason.BEFORE_IMPORT,
            checkpoints=carried,
            background=file.background,
        )
        return file.config

    async def reset_model(self, name: str) -> None:
        """Zero the weights and counters; pending predictions lapse."""
        config, meta = await self.read_model(name)
        created = int(meta.get(Meta.CREATED, 0))
        await self._replace(
            name=name,
            config=config,
            weights=Weights.zeros(config),
            counters={},
            created=created,
            reason=Reason.BEFORE_RESET,
        )

    async def _replace(
        self,
        name: str,
        config: ModelConfig,
        weights: Weights,
        *,
        counters: dict[str, str],
        created: int,
        reason: str,
        checkpoints: list[tuple[str, bytes]] | None = None,
        background: list[bytes] | None = None,
    ) -> None:
        data, now_ms = pack_snapshot(weights), int(1000 * self.clock())
        carried = checkpoints or ()
        if await self.store.read_meta(name) is not None:  # kept first as a checkpoint
            snap, log_bytes = await self.store.read_sizes(name)
            adding = snap + log_bytes + sum(len(packed) for _, packed in carried)
            await make_room(self.store, name, self.settings, now_ms=now_ms, adding=adding)
        await self.store.replace_model(
            name,
            config_json=config.to_json(),
            epoch=new_epoch(),
            created=created or int(self.clock()),
            version=weights.version,
            seen=weights.seen,
            weights=data,
            counters=counters,
            now_ms=now_ms,
            reason=reason,
            checkpoints=carried,
            background=background or [],
        )
        self.replicas.drop(name)
        await prune_quietly(self.store, name, self.settings, now_ms)

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
        await cancel_all(self._tasks)
