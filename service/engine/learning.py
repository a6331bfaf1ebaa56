"""Learning: predict, feedback and learn, on this worker's replicas and the store."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from service.contract.learn_wire import Labelled
from service.contract.names import PredictionId, new_token
from service.contract.store_protocol import NO_CLASS, pending_life_s
from service.contract.store_values import Held, Made
from service.engine.batcher import Batcher, batcher_of
from service.engine.default_labels import DefaultLabels
from service.engine.feedback_answers import BadLabel, Feedback, answers, delay
from service.engine.feedback_answers import late_s as late_of
from service.engine.learn_commits import Learned, time_bucket
from service.engine.replica import Replica
from service.engine.replicas import Replicas
from service.engine.writer import Writers
from service.errors import (
    InvalidInput,
    ModelBusy,
    ModelNotFound,
    PredictionNotFound,
    ServiceError,
    TooLarge,
)
from service.learner import Example, FeatureError, Label, ModelConfig
from service.learner.features import Features, Rows, encode, encode_many, encode_matrix
from service.learner.perceptron import seen_depended
from service.settings import Settings
from service.store import Store, StoreError
from service.store.refusals import service_error

log = logging.getLogger("perceptron")

# A batch: examples one by one, or a dense model's feature values laid end to end (packed).
Batch = Sequence[Features] | np.ndarray
# The longest one wait of feedback for a model its writer holds, before it looks again.
HOLD_WAIT_S = 0.1
# Feedback calls of one worker for one model (and key name) in flight at once: those that
# arrive while one waits on the writer's hold go to Redis too, and wait for the same wake-up.
FEEDBACK_IN_FLIGHT = 2


@dataclass(frozen=True, slots=True)
class Predicted:
    prediction_id: str
    label: Label
    scores: np.ndarray
    version: int


class Learning:
    """What each learning endpoint does; one per worker process."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        replicas: Replicas,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings
        self.replicas = replicas
        self.clock = clock
        self.writers = Writers(store, settings, clock, replicas)
        self.defaults = DefaultLabels(store, settings, replicas, clock)

    async def close(self) -> None:
        await self.writers.close()

    def encode_batch(self, config: ModelConfig, batch: Batch) -> Sequence[Example]:
        """A batch's examples, checked and encoded; at least one (the HTTP schemas ask for
        one already: this is for callers in Python)."""
        if not len(batch):
            raise InvalidInput("At least one example is needed.", code="empty_batch")
        s = self.settings
        if isinstance(batch, np.ndarray):
            return _encode_packed(config, batch, s.max_batch)
        for features in batch:
            if type(features) is not list and not isinstance(features, Mapping):
                continue  # not an example at all: the learner names it
            if len(features) > s.max_features:
                raise TooLarge(
                    f"An example holds at most {s.max_features} features "
                    f"(PERCEPTRON_MAX_FEATURES); got {len(features)}.",
                    code="too_many_features",
                )
            if type(features) is not list:  # a mapping: named features
                for name in features:
                    if isinstance(name, str) and len(name) > s.max_name_length:
                        raise InvalidInput(
                            f"Feature names are at most {s.max_name_length} characters "
                            f"(PERCEPTRON_MAX_NAME_LENGTH); got one of {len(name)}.",
                            code="feature_name_too_long",
                        )
        return _encode_list(config, batch, s.max_batch)

    # -- learning ----------------------------------------------------------------------

    async def predict(self, name: str, batch: Batch) -> tuple[ModelConfig, Sequence[Predicted]]:
        """Predict each example with the model's latest weights; keep them for feedback."""
        for attempt in self.replicas.attempts(name):
            async with attempt as rep:
                xs = self.encode_batch(rep.config, batch)
                queue = batcher_of(rep.queues, "predict", self.settings.max_batch)
                predicted = queue.put(xs)
                if queue.needs_committer():
                    queue.add_committer(asyncio.create_task(self._commit_predictions(rep, queue)))
                return rep.config, await predicted
        raise self.replicas.busy(name)

    async def _commit_predictions(
        self, rep: Replica, queue: Batcher[Sequence[Example], Predicted]
    ) -> None:
        """The replica's group commits of predictions, while any are queued."""
        with queue.committing():
            while batch := queue.next_batch():
                with batch:
                    batch.results = await self._predict(rep, batch.items)

    async def _predict(self, rep: Replica, xs: Sequence[Example]) -> list[Predicted]:
        self.replicas.check_current(rep)
        r2 = max(x.sq_norm for x in xs)
        now_ms = int(1000 * self.clock())
        tokens = [new_token(now_ms) for _ in xs]
        config = rep.config
        defaults = config.default_label is not None
        if defaults:
            self.defaults.note(rep.name, rep.epoch, config)
        for force in (False, True):
            if force and rep.weights.version < 0:  # never serve a copy that holds no weights
                raise ModelBusy(f"Model {rep.name!r} could not be loaded; retry shortly.")
            preds = [rep.predict(x) for x in xs]
            seen = seen_depended(rep.config, rep.weights)
            made = Made(rep.weights.version, "" if seen is None else seen, r2)
            stale = await self.store.commit_predictions(
                rep.name,
                epoch=rep.epoch,
                made=made,
                tokens=tokens,
                records=[p.record for p in preds],
                ttl_s=pending_life_s(config.feedback_ttl_s, defaults),
                max_pending_bytes=self.settings.max_pending_bytes,
                force=force,
                deadline_ms=now_ms + 1000 * config.feedback_ttl_s if defaults else 0,
            )
            if stale is None:
                classes = rep.config.classes
                return [
                    Predicted(
                        str(PredictionId(rep.name, tok)), classes[p.served], p.scores, made.version
                    )
                    for tok, p in zip(tokens, preds, strict=True)
                ]
            self.replicas.apply_sync(rep, stale)
        raise AssertionError("a forced commit always stores")

    async def submit_feedback(
        self, items: Sequence[tuple[PredictionId | None, Label]], source: str = ""
    ) -> list[Feedback | ServiceError]:
        """Apply true labels to predictions; each item's result or its error, in order;
        ``source``: the name of the key that sends them, which the history records.

        An id is None where the text given could not be one (:meth:`PredictionId.parse`):
        that item is not found."""
        _check_batch_size(len(items), self.settings.max_batch, "items")
        groups: dict[str, list[tuple[int, str]]] = {}  # model -> (item, its token)
        results: list[Feedback | ServiceError] = [PredictionNotFound() for _ in items]
        for i, (pid, _) in enumerate(items):
            if pid is not None:
                groups.setdefault(pid.model, []).append((i, pid.token))
        applied = False  # whether a model's items were applied: errors then go per item
        for name, group in groups.items():
            tokens, labels = [token for _, token in group], [items[i][1] for i, _ in group]
            try:
                answers = await self._feedback_of_model(name, tokens, labels, source)
            except ModelNotFound:
                continue  # the prediction's model is gone: each of its items stays not found
            except (ServiceError, StoreError) as e:
                if not applied:
                    raise  # nothing applied: the whole request fails, and may be sent again
                # Other models' items were applied: this model's items each carry the error.
                error = e if isinstance(e, ServiceError) else service_error(e)
                answers = [error] * len(group)
            applied = True
            for (i, _), answer in zip(group, answers, strict=True):
                results[i] = answer
        return results

    async def _feedback_of_model(
        self, name: str, tokens: list[str], labels: list[Label], source: str
    ) -> list[Feedback | ServiceError]:
        """One model's items of a feedback request, in the group commit of its key's feedback."""
        for attempt in self.replicas.attempts(name):
            async with attempt as rep:
                # A label that is none of the classes goes to the store too (as NO_CLASS):
                # only the store knows whether the prediction is of this model at all.
                labelled = [
                    (token, _class_of(rep.config, label))
                    for token, label in zip(tokens, labels, strict=True)
                ]
                # One group commit per key name: a commit records one source.
                queue = batcher_of(
                    rep.queues, f"feedback:{source}", self.settings.max_batch, FEEDBACK_IN_FLIGHT
                )
                applied = queue.put(labelled)
                if queue.needs_committer():
                    commits = self._commit_feedback(rep, queue, source)
                    queue.add_committer(asyncio.create_task(commits))
                answers = await applied
                return [
                    _unknown_label(rep.config, label) if isinstance(a, BadLabel) else a
                    for a, label in zip(answers, labels, strict=True)
                ]
        raise self.replicas.busy(name)

    async def _commit_feedback(
        self,
        rep: Replica,
        queue: Batcher[list[tuple[str, int]], Feedback | ServiceError],
        source: str,
    ) -> None:
        """The replica's group commits of one key's feedback, while any is queued."""
        with queue.committing():
            while batch := queue.next_batch():
                with batch:
                    batch.results = await self._feedback(rep, batch.items, source)

    async def _feedback(
        self, rep: Replica, labelled: list[tuple[str, int]], source: str
    ) -> list[Feedback | ServiceError]:
        self.replicas.check_current(rep)
        deadline = self.clock() + self.settings.learn_wait_s
        ttl_s = rep.config.feedback_ttl_s
        tokens = [token for token, _ in labelled]
        now_ms = int(1000 * self.clock())
        late_s = [late_of(token, ttl_s, now_ms) for token in tokens]
        late = "".join("0" if s is None else "1" for s in late_s)
        default = rep.config.default_index
        delays = ",".join(delay(token, now_ms) for token in tokens)
        wait_s = 0.0
        while True:
            batch = await self.store.commit_feedback(
                rep.name,
                epoch=rep.epoch,
                tokens=tokens,
                labels=[t for _, t in labelled],
                when=time_bucket(self.settings, self.clock()),
                life_s=pending_life_s(ttl_s, default is not None),
                source=source,
                now_ms=int(1000 * self.clock()),
                averaged=rep.config.counts_seen or rep.config.retrains,
                wait_s=wait_s,
                late=late,
                default=NO_CLASS if default is None else default,
                delays=delays,
                detector=rep.config.drift_spec,
            )
            if not isinstance(batch, Held):
                break
            # The model's writer holds it for one commit (milliseconds; HOLD_MS if it died):
            # sent again behind a wait that its commit wakes, in one round trip.
            left = deadline - self.clock()
            if left <= 0:
                raise ModelBusy(f"Model {rep.name!r} stayed held by its writer; retry shortly.")
            wait_s = min(batch.ms / 1000, HOLD_WAIT_S, left)
        out = answers(rep.config, batch, late_s)
        self.replicas.compact_after(rep.name, batch.log_length, batch.label_log)
        return out

    async def learn(
        self, name: str, batch: Batch, labels: Sequence[Label], source: str = ""
    ) -> Sequence[Learned]:
        """Predict then learn each example in order, atomically, as a sequential perceptron;
        ``source``: the name of the key that sends them, which the history records."""

        for attempt in self.replicas.attempts(name):
            async with attempt as rep:
                xs = self.encode_batch(rep.config, batch)
                if len(xs) != len(labels):
                    raise InvalidInput(
                        f"Got {len(xs)} examples and {len(labels)} labels: each example takes one.",
                        code="length_mismatch",
                    )
                ts = _class_indices(rep.config, labels)
                return await self.writers.learn(rep, Labelled.of(xs, ts, source))
        raise self.replicas.busy(name)


def _check_batch_size(n: int, limit: int, what: str = "examples") -> None:
    if n > limit:
        raise TooLarge(
            f"A batch holds at most {limit} {what} (PERCEPTRON_MAX_BATCH); got {n}.",
            code="batch_too_large",
        )


def _encode_list(config: ModelConfig, batch: Sequence[Features], limit: int) -> list[Example]:
    _check_batch_size(len(batch), limit)
    try:
        xs = encode_many(config, batch)
    except FeatureError:
        for i, features in enumerate(batch):  # name the first example that is wrong
            try:
                encode(config, features)
            except FeatureError as e:
                where = f"Example {i}: " if len(batch) > 1 else ""
                raise InvalidInput(where + str(e), code=e.code) from e
        raise
    return xs


def _encode_packed(config: ModelConfig, values: np.ndarray, limit: int) -> Rows:
    try:
        xs = encode_matrix(config, values)
    except FeatureError as e:
        raise InvalidInput(str(e), code=e.code) from e
    _check_batch_size(len(xs), limit)
    return xs


def _class_indices(config: ModelConfig, labels: Sequence[Label]) -> list[int]:
    ts = config.class_indices(labels)
    if None in ts:  # the first label that is not one of the classes
        raise _unknown_label(config, labels[ts.index(None)])
    return cast(list[int], ts)


def _class_of(config: ModelConfig, label: Label) -> int:
    t = config.class_index(label)
    return NO_CLASS if t is None else t


def _unknown_label(config: ModelConfig, label: Label) -> InvalidInput:
    return InvalidInput(
        f"Label {label!r} is not one of this model's classes {list(config.classes)}.",
        code="unknown_label",
    )
