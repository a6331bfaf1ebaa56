"""The learning protocol: predict, feedback and learn, on the store and the replicas."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from .catalog import Catalog
from .errors import (
    Conflict,
    InvalidInput,
    ModelNotFound,
    PredictionNotFound,
    ServiceError,
    TooLarge,
    Unavailable,
)
from .learner import Example, FeatureError, Label, ModelConfig
from .learner.codec import pack_payload
from .learner.features import encode
from .learner.perceptron import apply, predict_index, raw_scores, served_scores, update_plan
from .replica import Replica
from .store import (
    APPLIED,
    UNKNOWN,
    Bucket,
    Learnt,
    Made,
    SyncData,
    valid_name,
)

log = logging.getLogger("perceptron")

Features = Sequence[float] | Mapping[str, float]
ID_SEPARATOR = ":"
RECENT = 100  # labelled examples kept for the margin estimate


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


class Engine(Catalog):
    """What each learning endpoint does; one per worker process."""

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


def _run_sequence(
    cfg: ModelConfig, base: Any, xs: list[Example], ts: list[int]
) -> tuple[Any, list[Learnt], Any]:
    """Learn ``xs`` in order on a copy of ``base``; ``base`` itself is never changed.

    Returns the weights after every example but the last, what the store logs for each
    example, and the last example's update plan (applied once the store has accepted it).
    Averaged models copy at once, since their served scores depend on the count of examples
    seen; the others copy at their first update.
    """
    n = len(xs)
    work = base.copy() if cfg.averaged and n > 1 else base
    copied = work is not base
    learnt: list[Learnt] = []
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
            if copied:
                work.seen += 1
                apply(cfg, work, x, plan, work.seen)
    if copied:
        work.seen = base.seen + n - 1
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
