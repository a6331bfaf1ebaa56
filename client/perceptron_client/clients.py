"""``Client`` and ``AsyncClient``: the same operations, sent with httpx's sync or async client.

Each method builds its operation's ``Call`` (``calls.py``) and sends it; only the sending
differs between the two classes.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from . import calls
from .answers import (
    ChallengerInfo,
    Challengers,
    Checkpoints,
    DriftReport,
    FeedbackBatchResponse,
    FeedbackResponse,
    Health,
    LearnBatchResponse,
    LearnerList,
    LearnResponse,
    ModelInfo,
    ModelList,
    ModelMetrics,
    PredictBatchResponse,
    PredictResponse,
    Promotion,
    RollbackResponse,
    UndoResponse,
    Updates,
    WeightsResponse,
)
from .calls import Batch, Call, Features, LabelIn
from .event_streams import ModelEvent, aiter_events, iter_events

__all__ = ["DEFAULT_TIMEOUT", "DEFAULT_URL", "AsyncClient", "Client"]

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 30.0

T = TypeVar("T")


def _options(
    base_url: str, api_key: str | None, timeout: float | None, headers: Mapping[str, str] | None
) -> dict[str, Any]:
    all_headers = {"accept": "application/json", **(headers or {})}
    if api_key:
        all_headers["authorization"] = f"Bearer {api_key}"
    return {"base_url": base_url.rstrip("/"), "headers": all_headers, "timeout": timeout}


# --- the two clients: only the I/O differs ----------------------------------------------------


class Client:
    """Synchronous client. ``api_key`` is sent as ``Authorization: Bearer <key>``.

    ``transport`` (an ``httpx.BaseTransport``) is for tests and custom networking.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        api_key: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        *,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            **_options(base_url, api_key, timeout, headers), transport=transport
        )

    @property
    def base_url(self) -> str:
        return str(self._http.base_url).rstrip("/")

    def _send(self, call: Call[T]) -> T:
        return call.result(
            self._http.request(call.method, call.path, json=call.body, params=call.params)
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def create_model(self, name: str, **config: Any) -> ModelInfo:
        """Create a model (or confirm one with the same configuration); see ``ModelSpec``.
        ``drift`` may name its detector alone (``drift="ddm"``)."""
        return self._send(calls.create_model(name, config))

    def list_models(self) -> ModelList:
        return self._send(calls.list_models())

    def learners(self) -> LearnerList:
        """The learners a model's ``algorithm`` may name, with their settings."""
        return self._send(calls.learners())

    def read_model(self, name: str) -> ModelInfo:
        return self._send(calls.read_model(name))

    def delete_model(self, name: str) -> None:
        self._send(calls.delete_model(name))

    def reset_model(self, name: str) -> ModelInfo:
        """Zero the model's weights and counters; its pending predictions lapse."""
        return self._send(calls.reset_model(name))

    def export_model(self, name: str, checkpoints: bool = False) -> dict[str, Any]:
        """The model as an export document (configuration, weights, counters, checksum);
        with ``checkpoints``, its checkpoints too (each its whole weights)."""
        return self._send(calls.export_model(name, checkpoints))

    def import_model(self, name: str, document: Mapping[str, Any]) -> ModelInfo:
        """Create the model from an export document, or overwrite one of its configuration."""
        return self._send(calls.import_model(name, document))

    def from_sklearn(self, name: str, estimator: Any, **options: Any) -> ModelInfo:
        """Create model ``name`` (or overwrite one of the same configuration) from a fitted
        scikit-learn linear classifier: it predicts what the estimator predicts and learns on
        from there. ``options``: ``multiclass``, ``learning_rate``, ``margin``, ``averaged``,
        ``feedback_ttl_s``, ``algorithm``, ``C`` (an ``SGDClassifier`` with ``learning_rate``
        ``"pa1"`` or ``"pa2"`` makes a PA model of its ``eta0``). Needs the extra ``sklearn``."""
        return self._send(calls.from_sklearn(name, estimator, options))

    def to_sklearn(self, name: str) -> Any:
        """The model as a fitted ``sklearn.linear_model.Perceptron`` (a PA model: an
        ``SGDClassifier(loss="hinge", penalty=None, learning_rate=algorithm, eta0=C)``) that
        predicts what the service predicts (a dense binary, ``ovr`` or ``multiclass`` model).
        Needs the extra ``sklearn``."""
        return self._send(calls.to_sklearn(name))

    def checkpoints(self, name: str) -> Checkpoints:
        """The model's checkpoints, and the versions it can be rolled back to."""
        return self._send(calls.checkpoints(name))

    def rollback(
        self, name: str, version: int | None = None, checkpoint: int | None = None
    ) -> RollbackResponse:
        """Make the model exactly what it was at ``version``, or at ``checkpoint``."""
        return self._send(calls.rollback(name, version, checkpoint))

    def updates(self, name: str, from_version: int | None = None, limit: int = 100) -> Updates:
        """The model's kept updates from ``from_version`` (None: the last ``limit``), each
        with the name of the key that caused it and when."""
        return self._send(calls.updates(name, from_version, limit))

    def undo(
        self,
        name: str,
        source: str | None = None,
        from_time: float | None = None,
        to_time: float | None = None,
    ) -> UndoResponse:
        """Leave out of the model the kept updates of the key named ``source`` (and/or of a
        time range, Unix seconds), rebuilt exactly without them."""
        return self._send(calls.undo(name, source, from_time, to_time))

    def drift(self, name: str) -> DriftReport:
        """The model's drift detector, each learner's state (stable, warning, drift) and
        their last warnings and drifts, oldest first."""
        return self._send(calls.drift(name))

    def events(self, name: str, reconnect: bool = True) -> Generator[ModelEvent, None, None]:
        """The model's events as they come (``event_streams.py``): its metrics, checkpoints,
        challengers and drift, each at once and whenever it changes; iterate until done
        (``break`` closes the stream). ``reconnect``: open it again when the service ends it,
        as a browser's EventSource does. The model deleted: ``NotFoundError``."""
        return iter_events(self._http, name, reconnect)

    def challengers(self, name: str, weights: bool = False) -> Challengers:
        """The served learner and each challenger side by side, each counted over the
        examples it has seen (``ChallengerInfo.since``: the model's labels before it joined);
        ``weights``: each challenger's weights and biases too (``ChallengerInfo.weights``)."""
        return self._send(calls.challengers(name, weights))

    def challenger(self, name: str, id: str, weights: bool = False) -> ChallengerInfo:
        """Challenger ``id`` (``NotFoundError`` code ``challenger_not_found`` when none);
        ``weights``: its weights and biases too."""
        return self._send(calls.challenger(name, id, weights))

    def add_challenger(
        self, name: str, id: str, from_served: bool = False, **settings: Any
    ) -> ChallengerInfo:
        """Add challenger ``id``: a learner of ``settings`` (algorithm, C, learning_rate,
        margin, averaged, multiclass; each left out the model's where its rule uses it) that
        learns every label of the model from now on, from zero weights or, ``from_served``,
        a copy of the served ones. ``ConflictError`` (409): ``challenger_exists``,
        ``too_many_challengers``; ``InvalidInputError`` (422): ``invalid_challenger``,
        ``invalid_challenger_id``, ``invalid_config``."""
        return self._send(calls.add_challenger(name, id, settings, from_served))

    def delete_challenger(self, name: str, id: str) -> None:
        """Remove challenger ``id``, its weights and figures (``challenger_not_found``)."""
        self._send(calls.delete_challenger(name, id))

    def promote(self, name: str, challenger: str, demote_as: str | None = None) -> Promotion:
        """Serve ``challenger`` from the next request on, its weights exactly as they are; the
        learner that served stays as the challenger ``demote_as`` (default served-<checkpoint>),
        and the answer's ``checkpoint`` (a rollback to it undoes the promotion once the
        demoted challenger is removed) holds the model as it was. ``ConflictError`` (409):
        ``promotion_layout``, ``challenger_exists``, ``too_many_promotions``."""
        return self._send(calls.promote(name, challenger, demote_as))

    def weights(self, name: str) -> WeightsResponse:
        return self._send(calls.weights(name))

    def metrics(self, name: str) -> ModelMetrics:
        return self._send(calls.metrics(name))

    def predict(self, model: str, features: Features) -> PredictResponse:
        return self._send(calls.predict(model, features))

    def predict_batch(self, model: str, features_list: Batch) -> PredictBatchResponse:
        return self._send(calls.predict_batch(model, features_list))

    def feedback(self, prediction_id: str, label: LabelIn) -> FeedbackResponse:
        return self._send(calls.feedback(prediction_id, label))

    def feedback_batch(self, items: Sequence[tuple[str, LabelIn]]) -> FeedbackBatchResponse:
        """Items are ``(prediction_id, label)``; per-item errors stay in the results."""
        return self._send(calls.feedback_batch(items))

    def learn(self, model: str, features: Features, label: LabelIn) -> LearnResponse:
        return self._send(calls.learn(model, features, label))

    def learn_batch(
        self, model: str, features_list: Batch, labels: Sequence[LabelIn]
    ) -> LearnBatchResponse:
        return self._send(calls.learn_batch(model, features_list, labels))

    def healthz(self) -> Health:
        return self._send(calls.healthz())

    def readyz(self) -> Health:
        """The store answers; raises ``UnavailableError`` when it does not."""
        return self._send(calls.readyz())


class AsyncClient:
    """Asynchronous client: the same methods as ``Client``, to be awaited."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        api_key: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        *,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 100,
    ) -> None:
        self._http = httpx.AsyncClient(
            **_options(base_url, api_key, timeout, headers),
            transport=transport,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    @property
    def base_url(self) -> str:
        return str(self._http.base_url).rstrip("/")

    async def _send(self, call: Call[T]) -> T:
        return call.result(
            await self._http.request(call.method, call.path, json=call.body, params=call.params)
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def create_model(self, name: str, **config: Any) -> ModelInfo:
        """Create a model (or confirm one with the same configuration); see ``ModelSpec``.
        ``drift`` may name its detector alone (``drift="ddm"``)."""
        return await self._send(calls.create_model(name, config))

    async def list_models(self) -> ModelList:
        return await self._send(calls.list_models())

    async def learners(self) -> LearnerList:
        """The learners a model's ``algorithm`` may name, with their settings."""
        return await self._send(calls.learners())

    async def read_model(self, name: str) -> ModelInfo:
        return await self._send(calls.read_model(name))

    async def delete_model(self, name: str) -> None:
        await self._send(calls.delete_model(name))

    async def reset_model(self, name: str) -> ModelInfo:
        """Zero the model's weights and counters; its pending predictions lapse."""
        return await self._send(calls.reset_model(name))

    async def export_model(self, name: str, checkpoints: bool = False) -> dict[str, Any]:
        """The model as an export document (configuration, weights, counters, checksum);
        with ``checkpoints``, its checkpoints too (each its whole weights)."""
        return await self._send(calls.export_model(name, checkpoints))

    async def import_model(self, name: str, document: Mapping[str, Any]) -> ModelInfo:
        """Create the model from an export document, or overwrite one of its configuration."""
        return await self._send(calls.import_model(name, document))

    async def from_sklearn(self, name: str, estimator: Any, **options: Any) -> ModelInfo:
        """Create model ``name`` (or overwrite one of the same configuration) from a fitted
        scikit-learn linear classifier: it predicts what the estimator predicts and learns on
        from there. ``options``: ``multiclass``, ``learning_rate``, ``margin``, ``averaged``,
        ``feedback_ttl_s``, ``algorithm``, ``C`` (an ``SGDClassifier`` with ``learning_rate``
        ``"pa1"`` or ``"pa2"`` makes a PA model of its ``eta0``). Needs the extra ``sklearn``."""
        return await self._send(calls.from_sklearn(name, estimator, options))

    async def to_sklearn(self, name: str) -> Any:
        """The model as a fitted ``sklearn.linear_model.Perceptron`` (a PA model: an
        ``SGDClassifier(loss="hinge", penalty=None, learning_rate=algorithm, eta0=C)``) that
        predicts what the service predicts (a dense binary, ``ovr`` or ``multiclass`` model).
        Needs the extra ``sklearn``."""
        return await self._send(calls.to_sklearn(name))

    async def checkpoints(self, name: str) -> Checkpoints:
        """The model's checkpoints, and the versions it can be rolled back to."""
        return await self._send(calls.checkpoints(name))

    async def rollback(
        self, name: str, version: int | None = None, checkpoint: int | None = None
    ) -> RollbackResponse:
        """Make the model exactly what it was at ``version``, or at ``checkpoint``."""
        return await self._send(calls.rollback(name, version, checkpoint))

    async def updates(
        self, name: str, from_version: int | None = None, limit: int = 100
    ) -> Updates:
        """The model's kept updates from ``from_version`` (None: the last ``limit``), each
        with the name of the key that caused it and when."""
        return await self._send(calls.updates(name, from_version, limit))

    async def undo(
        self,
        name: str,
        source: str | None = None,
        from_time: float | None = None,
        to_time: float | None = None,
    ) -> UndoResponse:
        """Leave out of the model the kept updates of the key named ``source`` (and/or of a
        time range, Unix seconds), rebuilt exactly without them."""
        return await self._send(calls.undo(name, source, from_time, to_time))

    async def drift(self, name: str) -> DriftReport:
        """The model's drift detector, each learner's state (stable, warning, drift) and
        their last warnings and drifts, oldest first."""
        return await self._send(calls.drift(name))

    def events(self, name: str, reconnect: bool = True) -> AsyncGenerator[ModelEvent, None]:
        """``Client.events``, iterated with ``async for``."""
        return aiter_events(self._http, name, reconnect)

    async def challengers(self, name: str, weights: bool = False) -> Challengers:
        """The served learner and each challenger side by side, each counted over the
        examples it has seen (``ChallengerInfo.since``: the model's labels before it joined);
        ``weights``: each challenger's weights and biases too (``ChallengerInfo.weights``)."""
        return await self._send(calls.challengers(name, weights))

    async def challenger(self, name: str, id: str, weights: bool = False) -> ChallengerInfo:
        """Challenger ``id`` (``NotFoundError`` code ``challenger_not_found`` when none);
        ``weights``: its weights and biases too."""
        return await self._send(calls.challenger(name, id, weights))

    async def add_challenger(
        self, name: str, id: str, from_served: bool = False, **settings: Any
    ) -> ChallengerInfo:
        """Add challenger ``id``: a learner of ``settings`` (algorithm, C, learning_rate,
        margin, averaged, multiclass; each left out the model's where its rule uses it) that
        learns every label of the model from now on, from zero weights or, ``from_served``,
        a copy of the served ones. ``ConflictError`` (409): ``challenger_exists``,
        ``too_many_challengers``; ``InvalidInputError`` (422): ``invalid_challenger``,
        ``invalid_challenger_id``, ``invalid_config``."""
        return await self._send(calls.add_challenger(name, id, settings, from_served))

    async def delete_challenger(self, name: str, id: str) -> None:
        """Remove challenger ``id``, its weights and figures (``challenger_not_found``)."""
        await self._send(calls.delete_challenger(name, id))

    async def promote(self, name: str, challenger: str, demote_as: str | None = None) -> Promotion:
        """Serve ``challenger`` from the next request on, its weights exactly as they are; the
        learner that served stays as the challenger ``demote_as`` (default served-<checkpoint>),
        and the answer's ``checkpoint`` (a rollback to it undoes the promotion once the
        demoted challenger is removed) holds the model as it was. ``ConflictError`` (409):
        ``promotion_layout``, ``challenger_exists``, ``too_many_promotions``."""
        return await self._send(calls.promote(name, challenger, demote_as))

    async def weights(self, name: str) -> WeightsResponse:
        return await self._send(calls.weights(name))

    async def metrics(self, name: str) -> ModelMetrics:
        return await self._send(calls.metrics(name))

    async def predict(self, model: str, features: Features) -> PredictResponse:
        return await self._send(calls.predict(model, features))

    async def predict_batch(self, model: str, features_list: Batch) -> PredictBatchResponse:
        return await self._send(calls.predict_batch(model, features_list))

    async def feedback(self, prediction_id: str, label: LabelIn) -> FeedbackResponse:
        return await self._send(calls.feedback(prediction_id, label))

    async def feedback_batch(self, items: Sequence[tuple[str, LabelIn]]) -> FeedbackBatchResponse:
        """Items are ``(prediction_id, label)``; per-item errors stay in the results."""
        return await self._send(calls.feedback_batch(items))

    async def learn(self, model: str, features: Features, label: LabelIn) -> LearnResponse:
        return await self._send(calls.learn(model, features, label))

    async def learn_batch(
        self, model: str, features_list: Batch, labels: Sequence[LabelIn]
    ) -> LearnBatchResponse:
        return await self._send(calls.learn_batch(model, features_list, labels))

    async def healthz(self) -> Health:
        return await self._send(calls.healthz())

    async def readyz(self) -> Health:
        """The store answers; raises ``UnavailableError`` when it does not."""
        return await self._send(calls.readyz())
