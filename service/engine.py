"""The service's operations: what each endpoint does, on the store and the worker's replicas."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import (
    Conflict,
    InvalidInput,
    ModelNotFound,
    PredictionNotFound,
    StaleModel,
    Unavailable,
)
from .learner import ConfigError, FeatureError, Label, ModelConfig
from .learner.codec import pack_payload, pack_weights
from .learner.features import encode
from .learner.perceptron import predict_index, raw_scores, served_scores, update_plan
from .replica import Replica
from .settings import Settings
from .store import Store, SyncData, valid_name

log = logging.getLogger("perceptron")

Features = Sequence[float] | Mapping[str, float]
ID_SEPARATOR = ":"


@dataclass(frozen=True, slots=True)
class Predicted:
    prediction_id: str
    label: Label
    scores: np.ndarray
    version: int
    config: ModelConfig


@dataclass(frozen=True, slots=True)
class Feedback:
    mistake: bool
    updated: bool
    version: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class Learned:
    label: Label  # the prediction made before learning
    mistake: bool
    updated: bool
    version: int


def check_name(name: str) -> str:
    if not valid_name(name):
        raise InvalidInput(
            f"Invalid model name {name[:80]!r}: use 1-64 letters, digits, '_', '-' or '.'.",
            code="invalid_model_name",
        )
    return name


class Engine:
    """One per worker process: the store, plus this worker's replica of each model it used."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._replicas: dict[str, Replica] = {}
        self._compacting: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- models ------------------------------------------------------------------------

    async def create_model(self, name: str, params: dict[str, Any]) -> tuple[ModelConfig, bool]:
        """Create a model; returns its config and whether it was new. 409 on another config."""
        check_name(name)
        try:
            config = ModelConfig.from_dict(params)
        except ConfigError as e:
            raise InvalidInput(str(e), code="invalid_config") from e
        existing = await self.store.create_model(
            name, json.dumps(config.to_dict()), secrets.token_hex(8)
        )
        if existing is None:
            return config, True
        current = ModelConfig.from_dict(json.loads(existing))
        if current != config:
            raise Conflict(
                f"Model {name!r} exists with another configuration; delete it first or use "
                "another name.",
                code="model_exists",
            )
        return current, False

    async def read_model(self, name: str) -> tuple[ModelConfig, dict[str, str]]:
        meta = await self.store.read_meta(check_name(name))
        if meta is None:
            raise ModelNotFound(name)
        return ModelConfig.from_dict(json.loads(meta["cfg"])), meta

    async def list_models(self) -> list[tuple[str, ModelConfig, dict[str, str]]]:
        names = await self.store.model_names()
        metas = await asyncio.gather(*(self.store.read_meta(n) for n in names))
        return [
            (n, ModelConfig.from_dict(json.loads(m["cfg"])), m)
            for n, m in zip(names, metas, strict=True)
            if m is not None
        ]

    async def delete_model(self, name: str) -> None:
        if not await self.store.delete_model(check_name(name)):
            raise ModelNotFound(name)
        self._replicas.pop(name, None)

    async def replica(self, name: str) -> Replica:
        rep = self._replicas.get(name)
        if rep is None:
            meta = await self.store.read_meta(check_name(name))
            if meta is None:
                raise ModelNotFound(name)
            rep = self._replicas[name] = Replica.from_meta(name, meta)
        return rep

    async def _retry_stale(self, name: str, op: Any) -> Any:
        """Run ``op(replica)``; once more on a fresh replica if the model was re-created."""
        try:
            return await op(await self.replica(name))
        except StaleModel:
            self._replicas.pop(name, None)
            return await op(await self.replica(name))

    # -- learning ----------------------------------------------------------------------

    async def predict(self, name: str, features: Features) -> Predicted:
        async def run(rep: Replica) -> Predicted:
            x = _encode(rep.config, features)
            token = secrets.token_urlsafe(12)
            for force in (False, True):
                p = rep.predict(x)
                stale = await self.store.commit_prediction(
                    name,
                    rep.epoch,
                    p.version,
                    rep.seen_guard,
                    token,
                    p.record,
                    rep.config.feedback_ttl_s,
                    force=force,
                )
                if stale is None:
                    label = rep.config.classes[p.served]
                    pid = f"{name}{ID_SEPARATOR}{token}"
                    return Predicted(pid, label, p.scores, p.version, rep.config)
                self._catch_up(rep, stale)
            raise AssertionError("a forced commit always stores")

        result: Predicted = await self._retry_stale(name, run)
        return result

    async def submit_feedback(self, prediction_id: str, label: Label) -> Feedback:
        name, _, token = prediction_id.partition(ID_SEPARATOR)
        if not valid_name(name) or not token:
            raise PredictionNotFound()

        async def run(rep: Replica) -> Feedback:
            t = _class_index(rep.config, label)
            try:
                res = await self.store.commit_feedback(
                    name, rep.epoch, token, t, rep.config.n_classes
                )
            except ValueError as e:  # a token that cannot name a key
                raise PredictionNotFound() from e
            self._maybe_compact(rep, res.log_length)
            return Feedback(res.mistake, res.updated, res.version, res.duplicate)

        try:
            result: Feedback = await self._retry_stale(name, run)
        except ModelNotFound as e:
            raise PredictionNotFound() from e
        return result

    async def learn(self, name: str, features: Features, label: Label) -> Learned:
        async def run(rep: Replica) -> Learned:
            cfg = rep.config
            x = _encode(cfg, features)
            t = _class_index(cfg, label)
            for _ in range(self.settings.learn_attempts):
                w = rep.weights
                version, seen = w.version, rep.seen_guard
                served = predict_index(cfg, served_scores(cfg, w, x))
                raw = raw_scores(w, x)
                plan = update_plan(cfg, raw, t)
                payload = pack_payload(cfg, raw, x) if plan else b""
                res = await self.store.commit_learn(
                    name, rep.epoch, version, seen, t, served, bool(plan), payload
                )
                if isinstance(res, SyncData):
                    self._catch_up(rep, res)
                    continue
                if plan:
                    rep.apply_own(x, raw, t, res.seen, res.version)
                rep.weights.seen = max(rep.weights.seen, res.seen)
                self._maybe_compact(rep, res.log_length)
                return Learned(cfg.classes[served], served != t, bool(plan), res.version)
            raise Unavailable(
                f"Model {name!r} changed under every one of {self.settings.learn_attempts} "
                "attempts to learn this example; retry shortly.",
                code="model_busy",
            )

        result: Learned = await self._retry_stale(name, run)
        return result

    async def current_replica(self, name: str) -> Replica:
        """This worker's replica brought up to the model's latest version."""

        async def run(rep: Replica) -> Replica:
            rep.catch_up(await self.store.sync(name, rep.weights.version))
            return rep

        result: Replica = await self._retry_stale(name, run)
        return result

    # -- upkeep ------------------------------------------------------------------------

    def _catch_up(self, rep: Replica, data: SyncData) -> None:
        rep.catch_up(data)
        self._maybe_compact(rep, len(data.entries))

    def _maybe_compact(self, rep: Replica, log_length: int) -> None:
        if log_length < self.settings.compact_every or rep.name in self._compacting:
            return
        self._compacting.add(rep.name)
        task = asyncio.create_task(self._compact(rep.name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _compact(self, name: str) -> None:
        try:
            rep = await self.current_replica(name)
            if rep.weights.version > 0:
                data = pack_weights(rep.weights)
                await self.store.compact(name, rep.epoch, rep.weights.version, data)
        except Exception:  # compaction is an optimisation: never let it hurt a request
            log.exception("compacting model %r failed; it will be tried again", name)
        finally:
            self._compacting.discard(name)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _encode(config: ModelConfig, features: Features) -> Any:
    try:
        return encode(config, features)
    except FeatureError as e:
        raise InvalidInput(str(e), code=e.code) from e


def _class_index(config: ModelConfig, label: Label) -> int:
    t = config.class_index(label)
    if t is None:
        raise InvalidInput(
            f"Label {label!r} is not one of this model's classes {list(config.classes)}.",
            code="unknown_label",
        )
    return t
