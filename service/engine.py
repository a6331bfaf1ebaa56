"""The service's operations: what each endpoint does, on the store and the worker's replicas."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import numpy as np

from .errors import (
    Conflict,
    InvalidInput,
    ModelNotFound,
    PredictionNotFound,
    ServiceError,
    StaleModel,
    TooLarge,
    Unavailable,
)
from .learner import ConfigError, Example, FeatureError, Label, ModelConfig, Weights
from .learner.codec import pack_payload, pack_weights
from .learner.features import encode
from .learner.perceptron import apply, predict_index, raw_scores, served_scores, update_plan
from .replica import Replica
from .settings import Settings
from .store import (
    APPLIED,
    UNKNOWN,
    Bucket,
    Learnt,
    Made,
    Observations,
    Store,
    SyncData,
    valid_name,
)
from .transfer import config_json, export_document, parse_document

log = logging.getLogger("perceptron")

Features = Sequence[float] | Mapping[str, float]
ID_SEPARATOR = ":"
RECENT = 100  # labelled examples kept for the margin estimate
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Predicted:
    prediction_id: str
    label: Label
    scores: np.ndarray
    version: int


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

    def __init__(
        self, store: Store, settings: Settings, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
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
        self._check_limits(config)
        names = await self.store.model_names()
        if name not in names:
            if len(names) >= self.settings.max_models:
                raise InvalidInput(
                    f"The store holds at most {self.settings.max_models} models "
                    "(PERCEPTRON_MAX_MODELS); delete one first.",
                    code="too_many_models",
                )
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
        if config.dense and config.dim > s.max_features:
            raise InvalidInput(
                f"n_features is at most {s.max_features} (PERCEPTRON_MAX_FEATURES); "
                f"got {config.dim}.",
                code="invalid_config",
            )

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

    async def export_model(self, name: str) -> dict[str, Any]:
        """The model's configuration, weights and counters, consistent at one version."""
        for _ in range(self.settings.learn_attempts):
            rep = await self.current_replica(name)
            config, meta = await self.read_model(name)
            if int(meta["version"]) == rep.weights.version and meta["epoch"] == rep.epoch:
                rep.weights.seen = int(meta["seen"])
                return export_document(name, config, rep.weights, meta)
        raise Unavailable(
            f"Model {name!r} kept changing during the export; retry shortly.", code="model_busy"
        )

    async def import_model(self, name: str, document: Any) -> ModelConfig:
        """Make model ``name`` what the export says; refused whole when anything is off."""
        check_name(name)
        file = parse_document(document)
        self._check_limits(file.config)
        meta = await self.store.read_meta(name)
        if meta is not None and ModelConfig.from_dict(json.loads(meta["cfg"])) != file.config:
            raise Conflict(
                f"Model {name!r} exists with another configuration than the file's; delete "
                "it first or import under another name.",
                code="model_exists",
            )
        await self._replace(name, file.config, file.weights, file.counters, file.created)
        return file.config

    async def reset_model(self, name: str) -> None:
        """Zero the weights and counters; pending predictions lapse."""
        config, meta = await self.read_model(name)
        await self._replace(name, config, Weights.zeros(config), {}, int(meta.get("created", 0)))

    async def _replace(
        self,
        name: str,
        config: ModelConfig,
        weights: Weights,
        counters: dict[str, str],
        created: int,
    ) -> None:
        data = pack_weights(weights) if weights.version else b""
        await self.store.replace_model(
            name,
            config_json(config),
            secrets.token_hex(8),
            created or int(self.clock()),
            weights.version,
            weights.seen,
            data,
            counters,
        )
        self._replicas.pop(name, None)

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

    async def _on_replica(self, name: str, op: Callable[[Replica], Any]) -> Any:
        """Run ``op(replica)``; once more on a fresh replica if the model was re-created."""
        try:
            return await op(await self.replica(name))
        except StaleModel:
            self._replicas.pop(name, None)
            return await op(await self.replica(name))

    async def current_replica(self, name: str) -> Replica:
        """This worker's replica brought up to the model's latest version."""

        async def run(rep: Replica) -> Replica:
            rep.catch_up(await self.store.sync(name, rep.weights.version))
            return rep

        result: Replica = await self._on_replica(name, run)
        return result

    async def observe(self, name: str) -> tuple[Replica, Observations]:
        """The model's replica, caught up, and its counters and outcome records."""
        obs = await self.store.read_observations(check_name(name))
        if obs is None:
            raise ModelNotFound(name)
        return await self.current_replica(name), obs

    def _encode_all(self, config: ModelConfig, batch: Sequence[Features]) -> list[Example]:
        s = self.settings
        for features in batch:
            if len(features) > s.max_features:
                raise TooLarge(
                    f"An example holds at most {s.max_features} features "
                    f"(PERCEPTRON_MAX_FEATURES); got {len(features)}.",
                    code="too_many_features",
                )
            if isinstance(features, Mapping):
                for name in features:
                    if isinstance(name, str) and len(name) > s.max_name_length:
                        raise InvalidInput(
                            f"Feature names are at most {s.max_name_length} characters "
                            f"(PERCEPTRON_MAX_NAME_LENGTH); got one of {len(name)}.",
                            code="feature_name_too_long",
                        )
        return _encode_all(config, batch, s.max_batch)

    def _bucket(self) -> Bucket:
        s = self.settings
        return Bucket(int(self.clock() // s.series_bucket_s), s.series_keep_s // s.series_bucket_s)

    # -- learning ----------------------------------------------------------------------

    async def predict(
        self, name: str, batch: Sequence[Features]
    ) -> tuple[ModelConfig, list[Predicted]]:
        """Predict each example with the model's latest weights; keep them for feedback."""

        async def run(rep: Replica) -> tuple[ModelConfig, list[Predicted]]:
            xs = self._encode_all(rep.config, batch)
            r2 = max(x.sq_norm for x in xs)
            tokens = [secrets.token_urlsafe(12) for _ in xs]
            for force in (False, True):
                preds = [rep.predict(x) for x in xs]
                made = Made(rep.weights.version, rep.seen_guard, r2)
                stale = await self.store.commit_predictions(
                    name,
                    rep.epoch,
                    made,
                    tokens,
                    [p.record for p in preds],
                    rep.config.feedback_ttl_s,
                    force=force,
                )
                if stale is None:
                    classes = rep.config.classes
                    return rep.config, [
                        Predicted(
                            f"{name}{ID_SEPARATOR}{tok}", classes[p.served], p.scores, made.version
                        )
                        for tok, p in zip(tokens, preds, strict=True)
                    ]
                self._catch_up(rep, stale)
            raise AssertionError("a forced commit always stores")

        result: tuple[ModelConfig, list[Predicted]] = await self._on_replica(name, run)
        return result

    async def submit_feedback(
        self, items: Sequence[tuple[str, Label]]
    ) -> list[Feedback | ServiceError]:
        """Apply true labels to predictions; each item's result or its error, in order."""
        if len(items) > self.settings.max_batch:
            raise TooLarge(
                f"A batch holds at most {self.settings.max_batch} items (PERCEPTRON_MAX_BATCH); "
                f"got {len(items)}.",
                code="batch_too_large",
            )
        groups: dict[str, list[int]] = {}
        results: list[Feedback | ServiceError] = [PredictionNotFound() for _ in items]
        tokens: list[str] = []
        for i, (pid, _) in enumerate(items):
            name, _, token = pid.partition(ID_SEPARATOR)
            tokens.append(token)
            if valid_name(name) and token and _token_ok(token):
                groups.setdefault(name, []).append(i)
        for name, idx in groups.items():
            try:
                await self._on_replica(
                    name,
                    partial(
                        self._feedback_group, items=items, tokens=tokens, idx=idx, results=results
                    ),
                )
            except ModelNotFound:
                pass  # the prediction's model is gone: each of its items stays not found
        return results

    async def _feedback_group(
        self,
        rep: Replica,
        items: Sequence[tuple[str, Label]],
        tokens: list[str],
        idx: list[int],
        results: list[Feedback | ServiceError],
    ) -> None:
        labels = [_class_index(rep.config, items[i][1]) for i in idx]
        batch = await self.store.commit_feedback(
            rep.name,
            rep.epoch,
            [tokens[i] for i in idx],
            labels,
            rep.config.n_classes,
            self._bucket(),
        )
        for i, item in zip(idx, batch.items, strict=True):
            if item.status == UNKNOWN:
                continue
            if item.status < 0:
                given = rep.config.classes[item.version]
                results[i] = Conflict(
                    f"This prediction already has the true label {given!r}; a prediction "
                    "takes one true label.",
                    code="feedback_conflict",
                )
                continue
            results[i] = Feedback(
                bool(item.mistake), bool(item.updated), item.version, item.status != APPLIED
            )
        self._maybe_compact(rep, batch.log_length)

    async def learn(
        self, name: str, batch: Sequence[Features], labels: Sequence[Label]
    ) -> list[Learned]:
        """Predict then learn each example in order, atomically, as a sequential perceptron."""

        async def run(rep: Replica) -> list[Learned]:
            cfg = rep.config
            xs = self._encode_all(cfg, batch)
            ts = [_class_index(cfg, label) for label in labels]
            r2 = max(x.sq_norm for x in xs)
            for _ in range(self.settings.learn_attempts):
                base = rep.weights
                made = Made(base.version, rep.seen_guard, r2)
                work, learnt, last = _run_sequence(cfg, base, xs, ts)
                res = await self.store.commit_learn(name, rep.epoch, made, self._bucket(), learnt)
                if isinstance(res, SyncData):
                    self._catch_up(rep, res)
                    continue
                if rep.weights is base and base.version == made.version:
                    rep.weights = work
                    if last is not None:
                        apply(cfg, work, xs[-1], last, res.seen)
                rep.weights.seen = max(rep.weights.seen, res.seen)
                self._maybe_compact(rep, res.log_length)
                version = made.version
                out = []
                for e in learnt:
                    version += e.updated
                    out.append(Learned(cfg.classes[e.served], e.served != e.t, e.updated, version))
                return out
            raise Unavailable(
                f"Model {name!r} changed under every one of {self.settings.learn_attempts} "
                "attempts to learn; retry shortly.",
                code="model_busy",
            )

        result: list[Learned] = await self._on_replica(name, run)
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


def _run_sequence(
    cfg: ModelConfig, base: Any, xs: list[Example], ts: list[int]
) -> tuple[Any, list[Learnt], Any]:
    """Learn ``xs`` in order on a copy of ``base`` (copied only once an update happens).

    Returns the weights after every example but the last, what the store logs for each
    example, and the last example's update plan (applied once the store has accepted it).
    """
    work, copied = base, False
    learnt: list[Learnt] = []
    n = len(xs)
    plan = None
    for i, (x, t) in enumerate(zip(xs, ts, strict=True)):
        scores = served_scores(cfg, work, x)
        served = predict_index(cfg, scores)
        raw = raw_scores(work, x) if cfg.averaged else scores
        plan = update_plan(cfg, raw, t)
        keep = bool(plan) or i >= n - RECENT
        learnt.append(Learnt(t, served, bool(plan), pack_payload(cfg, raw, x) if keep else b""))
        if i < n - 1:
            if plan and not copied:
                work, copied = base.copy(), True
            work.seen += 1
            apply(cfg, work, x, plan, work.seen)
    if not copied:
        work = base.copy() if n > 1 else base
        if n > 1:
            work.seen += n - 1
    return work, learnt, (plan if plan else None)


def _token_ok(token: str) -> bool:
    from .store.keys import TOKEN_RE

    return TOKEN_RE.match(token) is not None


def _encode_all(config: ModelConfig, batch: Sequence[Features], limit: int) -> list[Example]:
    if len(batch) > limit:
        raise TooLarge(
            f"A batch holds at most {limit} examples (PERCEPTRON_MAX_BATCH); got {len(batch)}.",
            code="batch_too_large",
        )
    xs = []
    for i, features in enumerate(batch):
        try:
            xs.append(encode(config, features))
        except FeatureError as e:
            where = f"Example {i}: " if len(batch) > 1 else ""
            raise InvalidInput(where + str(e), code=e.code) from e
    if not xs:
        raise InvalidInput("At least one example is needed.", code="empty_batch")
    return xs


def _class_index(config: ModelConfig, label: Label) -> int:
    t = config.class_index(label)
    if t is None:
        raise InvalidInput(
            f"Label {label!r} is not one of this model's classes {list(config.classes)}.",
            code="unknown_label",
        )
    return t
