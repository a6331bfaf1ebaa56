"""A typed HTTP client of the service, sync (``Client``) and async (``AsyncClient``).

Both clients share everything but the I/O: each endpoint is described once as a ``_Call``
(method, path, JSON body, and how to read the answer), and each client only sends it::

    from service.client import Client, NotFoundError

    with Client("http://127.0.0.1:8000", api_key="...") as c:
        c.create_model("iris", classes=["setosa", "versicolor", "virginica"], n_features=4)
        r = c.learn("iris", [5.1, 3.5, 1.4, 0.2], "setosa")
        print(r.mistake, c.read_model("iris").counters.mistakes)

Answers are the service's own response models (``service.api.schemas``). An error answer
raises a ``PerceptronError`` subclass chosen by its HTTP status, carrying the service's
``code``, ``detail`` and ``status``. A request that gets no answer at all (refused connection,
timeout) raises httpx's own ``httpx.TransportError``. A 2-D numpy array of numbers given to
``predict_batch`` or ``learn_batch`` travels packed (``packed_features``), the rest as JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Self, TypeVar
from urllib.parse import quote

import httpx
import numpy as np
import pybase64
from pydantic import BaseModel, ValidationError

from .api.schemas import (
    ErrorResponse,
    FeedbackBatchResponse,
    FeedbackResponse,
    Health,
    LearnBatchResponse,
    LearnResponse,
    ModelInfo,
    ModelList,
    ModelMetrics,
    PredictBatchResponse,
    PredictResponse,
    WeightsResponse,
)

__all__ = [
    "AsyncClient",
    "AuthError",
    "Client",
    "ConflictError",
    "Features",
    "InvalidInputError",
    "Label",
    "NotFoundError",
    "PerceptronError",
    "UnavailableError",
    "error_from_item",
]

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 30.0

Label = int | str
# A dense example is a sequence of numbers (a numpy array works too); named features a mapping.
Features = Sequence[float] | Mapping[str, float]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


# --- errors -------------------------------------------------------------------------------


class PerceptronError(Exception):
    """An error answer of the service: its HTTP ``status``, stable ``code`` and ``detail``."""

    def __init__(
        self, status: int, code: str, detail: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.retry_after = retry_after


class InvalidInputError(PerceptronError):
    """400 (malformed JSON), 413 (over a limit) or 422 (content not accepted)."""


class AuthError(PerceptronError):
    """401 (no or unknown API key) or 403 (the key may not do this)."""


class NotFoundError(PerceptronError):
    """404: no such model, or an unknown or expired prediction."""


class ConflictError(PerceptronError):
    """409: another configuration under that name, or a second label for a prediction."""


class UnavailableError(PerceptronError):
    """503 (or 429): retry later; ``retry_after`` holds the seconds the service asked for."""


_BY_STATUS: dict[int, type[PerceptronError]] = {
    400: InvalidInputError,
    401: AuthError,
    403: AuthError,
    404: NotFoundError,
    409: ConflictError,
    413: InvalidInputError,
    422: InvalidInputError,
    429: UnavailableError,
    503: UnavailableError,
}

# Items of /feedback/batch carry an error but no status of their own: the status the same
# error has on /feedback.
_ITEM_STATUS = {"prediction_not_found": 404, "feedback_conflict": 409}


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: not sent by this service


def error_from_response(response: httpx.Response) -> PerceptronError:
    """The exception for an error answer; bodies that are not the service's JSON still map."""
    code, detail = f"http_{response.status_code}", response.reason_phrase
    try:
        body = ErrorResponse.model_validate_json(response.content)
        code, detail = body.code, body.detail
    except ValidationError:
        text = response.text.strip()
        if text:
            detail = text[:500]
    cls = _BY_STATUS.get(response.status_code, PerceptronError)
    return cls(
        response.status_code, code, detail, _retry_after(response.headers.get("retry-after"))
    )


def error_from_item(error: ErrorResponse) -> PerceptronError:
    """The exception for the error of one item of a /feedback/batch answer."""
    status = _ITEM_STATUS.get(error.code, 422)
    return _BY_STATUS.get(status, PerceptronError)(status, error.code, error.detail)


# --- requests, built once for both clients ---------------------------------------------------


@dataclass(frozen=True)
class _Call(Generic[T]):
    """One request and how to read its successful answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    body: Any = None


def _parse(model: type[M]) -> Callable[[httpx.Response], M]:
    def read(response: httpx.Response) -> M:
        return model.model_validate_json(response.content)

    return read


def _nothing(response: httpx.Response) -> None:
    return None


def _document(response: httpx.Response) -> dict[str, Any]:
    value = response.json()
    if not isinstance(value, dict):
        raise PerceptronError(response.status_code, "unexpected_answer", "not a JSON object")
    return value


def _finish(call: _Call[T], response: httpx.Response) -> T:
    if response.is_error:
        raise error_from_response(response)
    return call.read(response)


def _path(name: str) -> str:
    return "/models/" + quote(name, safe="")


def _features(x: Features) -> list[Any] | dict[str, Any]:
    if isinstance(x, Mapping):
        return dict(x)
    tolist = getattr(x, "tolist", None)  # numpy: plain floats, not numpy scalars
    if callable(tolist):
        values: list[Any] = tolist()
        return values
    return list(x)


def _examples(features_list: Sequence[Features]) -> dict[str, Any]:
    """A batch's examples: a 2-D numpy array of numbers goes packed (see the API), the rest
    as JSON."""
    if (
        isinstance(features_list, np.ndarray)
        and features_list.ndim == 2
        and features_list.dtype.kind in ("f", "i", "u")
    ):
        values = np.ascontiguousarray(features_list, dtype="<f8")
        return {"packed_features": pybase64.b64encode(values.tobytes()).decode("ascii")}
    return {"features": [_features(x) for x in features_list]}


def _label(y: Label) -> Label:
    item = getattr(y, "item", None)  # numpy integer scalars
    if callable(item):
        value: Label = item()
        return value
    return y


class _Calls:
    """Every endpoint, as a ``_Call``."""

    @staticmethod
    def create_model(name: str, config: Mapping[str, Any]) -> _Call[ModelInfo]:
        return _Call("PUT", _path(name), _parse(ModelInfo), dict(config))

    @staticmethod
    def list_models() -> _Call[ModelList]:
        return _Call("GET", "/models", _parse(ModelList))

    @staticmethod
    def read_model(name: str) -> _Call[ModelInfo]:
        return _Call("GET", _path(name), _parse(ModelInfo))

    @staticmethod
    def delete_model(name: str) -> _Call[None]:
        return _Call("DELETE", _path(name), _nothing)

    @staticmethod
    def reset_model(name: str) -> _Call[ModelInfo]:
        return _Call("POST", _path(name) + "/reset", _parse(ModelInfo))

    @staticmethod
    def export_model(name: str) -> _Call[dict[str, Any]]:
        return _Call("GET", _path(name) + "/export", _document)

    @staticmethod
    def import_model(name: str, document: Mapping[str, Any]) -> _Call[ModelInfo]:
        return _Call("POST", _path(name) + "/import", _parse(ModelInfo), dict(document))

    @staticmethod
    def weights(name: str) -> _Call[WeightsResponse]:
        return _Call("GET", _path(name) + "/weights", _parse(WeightsResponse))

    @staticmethod
    def metrics(name: str) -> _Call[ModelMetrics]:
        return _Call("GET", _path(name) + "/metrics", _parse(ModelMetrics))

    @staticmethod
    def predict(model: str, features: Features) -> _Call[PredictResponse]:
        body = {"model": model, "features": _features(features)}
        return _Call("POST", "/predict", _parse(PredictResponse), body)

    @staticmethod
    def predict_batch(model: str, features_list: Sequence[Features]) -> _Call[PredictBatchResponse]:
        body = {"model": model, **_examples(features_list)}
        return _Call("POST", "/predict/batch", _parse(PredictBatchResponse), body)

    @staticmethod
    def feedback(prediction_id: str, label: Label) -> _Call[FeedbackResponse]:
        body = {"prediction_id": prediction_id, "label": _label(label)}
        return _Call("POST", "/feedback", _parse(FeedbackResponse), body)

    @staticmethod
    def feedback_batch(items: Sequence[tuple[str, Label]]) -> _Call[FeedbackBatchResponse]:
        body = {"feedback": [{"prediction_id": p, "label": _label(y)} for p, y in items]}
        return _Call("POST", "/feedback/batch", _parse(FeedbackBatchResponse), body)

    @staticmethod
    def learn(model: str, features: Features, label: Label) -> _Call[LearnResponse]:
        body = {"model": model, "features": _features(features), "label": _label(label)}
        return _Call("POST", "/learn", _parse(LearnResponse), body)

    @staticmethod
    def learn_batch(
        model: str, features_list: Sequence[Features], labels: Sequence[Label]
    ) -> _Call[LearnBatchResponse]:
        body = {"model": model, **_examples(features_list), "labels": [_label(y) for y in labels]}
        return _Call("POST", "/learn/batch", _parse(LearnBatchResponse), body)

    @staticmethod
    def healthz() -> _Call[Health]:
        return _Call("GET", "/healthz", _parse(Health))

    @staticmethod
    def readyz() -> _Call[Health]:
        return _Call("GET", "/readyz", _parse(Health))


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

    def _run(self, call: _Call[T]) -> T:
        response = self._http.request(call.method, call.path, json=call.body)
        return _finish(call, response)

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
        """Create a model (or confirm one with the same configuration); see ``ModelSpec``."""
        return self._run(_Calls.create_model(name, config))

    def list_models(self) -> ModelList:
        return self._run(_Calls.list_models())

    def read_model(self, name: str) -> ModelInfo:
        return self._run(_Calls.read_model(name))

    def delete_model(self, name: str) -> None:
        self._run(_Calls.delete_model(name))

    def reset_model(self, name: str) -> ModelInfo:
        """Zero the model's weights and counters; its pending predictions lapse."""
        return self._run(_Calls.reset_model(name))

    def export_model(self, name: str) -> dict[str, Any]:
        """The model as an export document (configuration, weights, counters, checksum)."""
        return self._run(_Calls.export_model(name))

    def import_model(self, name: str, document: Mapping[str, Any]) -> ModelInfo:
        """Create the model from an export document, or overwrite one of its configuration."""
        return self._run(_Calls.import_model(name, document))

    def weights(self, name: str) -> WeightsResponse:
        return self._run(_Calls.weights(name))

    def metrics(self, name: str) -> ModelMetrics:
        return self._run(_Calls.metrics(name))

    def predict(self, model: str, features: Features) -> PredictResponse:
        return self._run(_Calls.predict(model, features))

    def predict_batch(self, model: str, features_list: Sequence[Features]) -> PredictBatchResponse:
        return self._run(_Calls.predict_batch(model, features_list))

    def feedback(self, prediction_id: str, label: Label) -> FeedbackResponse:
        return self._run(_Calls.feedback(prediction_id, label))

    def feedback_batch(self, items: Sequence[tuple[str, Label]]) -> FeedbackBatchResponse:
        """Items are ``(prediction_id, label)``; per-item errors stay in the results."""
        return self._run(_Calls.feedback_batch(items))

    def learn(self, model: str, features: Features, label: Label) -> LearnResponse:
        return self._run(_Calls.learn(model, features, label))

    def learn_batch(
        self, model: str, features_list: Sequence[Features], labels: Sequence[Label]
    ) -> LearnBatchResponse:
        return self._run(_Calls.learn_batch(model, features_list, labels))

    def healthz(self) -> Health:
        return self._run(_Calls.healthz())

    def readyz(self) -> Health:
        """The store answers; raises ``UnavailableError`` when it does not."""
        return self._run(_Calls.readyz())


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

    async def _run(self, call: _Call[T]) -> T:
        response = await self._http.request(call.method, call.path, json=call.body)
        return _finish(call, response)

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
        """Create a model (or confirm one with the same configuration); see ``ModelSpec``."""
        return await self._run(_Calls.create_model(name, config))

    async def list_models(self) -> ModelList:
        return await self._run(_Calls.list_models())

    async def read_model(self, name: str) -> ModelInfo:
        return await self._run(_Calls.read_model(name))

    async def delete_model(self, name: str) -> None:
        await self._run(_Calls.delete_model(name))

    async def reset_model(self, name: str) -> ModelInfo:
        """Zero the model's weights and counters; its pending predictions lapse."""
        return await self._run(_Calls.reset_model(name))

    async def export_model(self, name: str) -> dict[str, Any]:
        """The model as an export document (configuration, weights, counters, checksum)."""
        return await self._run(_Calls.export_model(name))

    async def import_model(self, name: str, document: Mapping[str, Any]) -> ModelInfo:
        """Create the model from an export document, or overwrite one of its configuration."""
        return await self._run(_Calls.import_model(name, document))

    async def weights(self, name: str) -> WeightsResponse:
        return await self._run(_Calls.weights(name))

    async def metrics(self, name: str) -> ModelMetrics:
        return await self._run(_Calls.metrics(name))

    async def predict(self, model: str, features: Features) -> PredictResponse:
        return await self._run(_Calls.predict(model, features))

    async def predict_batch(
        self, model: str, features_list: Sequence[Features]
    ) -> PredictBatchResponse:
        return await self._run(_Calls.predict_batch(model, features_list))

    async def feedback(self, prediction_id: str, label: Label) -> FeedbackResponse:
        return await self._run(_Calls.feedback(prediction_id, label))

    async def feedback_batch(self, items: Sequence[tuple[str, Label]]) -> FeedbackBatchResponse:
        """Items are ``(prediction_id, label)``; per-item errors stay in the results."""
        return await self._run(_Calls.feedback_batch(items))

    async def learn(self, model: str, features: Features, label: Label) -> LearnResponse:
        return await self._run(_Calls.learn(model, features, label))

    async def learn_batch(
        self, model: str, features_list: Sequence[Features], labels: Sequence[Label]
    ) -> LearnBatchResponse:
        return await self._run(_Calls.learn_batch(model, features_list, labels))

    async def healthz(self) -> Health:
        return await self._run(_Calls.healthz())

    async def readyz(self) -> Health:
        """The store answers; raises ``UnavailableError`` when it does not."""
        return await self._run(_Calls.readyz())
