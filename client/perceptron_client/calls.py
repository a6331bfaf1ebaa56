"""Every operation of the API as a ``Call``: the request to send and how to read its answer.

Nothing here sends anything (sans-I/O): ``Client`` and ``AsyncClient`` send a ``Call`` with
their own httpx client and hand the response back to ``Call.result``, so each operation's
path, body and answer type are written once for both.

>>> call = predict("iris", [5.1, 3.5])
>>> (call.method, call.path, call.body)
('POST', '/predict', {'model': 'iris', 'features': [5.1, 3.5]})
>>> delete_model("a?b").path
'/models/a%3Fb'
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeGuard, TypeVar, cast
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from .answers import (
    ChallengerInfo,
    Challengers,
    Checkpoints,
    DriftReport,
    FeedbackBatchResponse,
    FeedbackResponse,
    Health,
    Label,
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
from .errors import PerceptronError, error_from_response

__all__ = [
    "Batch",
    "Call",
    "Features",
    "LabelIn",
    "add_challenger",
    "challenger",
    "challengers",
    "checkpoints",
    "create_model",
    "delete_challenger",
    "delete_model",
    "drift",
    "export_model",
    "feedback",
    "feedback_batch",
    "from_sklearn",
    "healthz",
    "import_model",
    "learn",
    "learn_batch",
    "learners",
    "list_models",
    "metrics",
    "predict",
    "predict_batch",
    "promote",
    "read_model",
    "readyz",
    "reset_model",
    "rollback",
    "to_sklearn",
    "undo",
    "updates",
    "weights",
]

# numpy is optional (pip install 'perceptron-client[numpy]'), and the client never imports it:
# an array or a numpy integer is recognised at run time only when something has imported numpy,
# as whatever made one has (_is_array, _is_integer). Type checkers see numpy's types in these;
# at run time (typing.get_type_hints) they are the same without them.
if TYPE_CHECKING:
    import numpy as np

    # A dense example: a sequence of numbers, or a 1-D numpy array; named features: a mapping.
    Features: TypeAlias = Sequence[float] | Mapping[str, float] | np.ndarray
    # A batch: examples one by one, or a 2-D numpy array of numbers (sent packed: see the API).
    Batch: TypeAlias = Sequence[Features] | np.ndarray
    # A label as given: a numpy integer works too (sent as a plain int).
    LabelIn: TypeAlias = Label | np.integer
else:
    Features = Sequence[float] | Mapping[str, float]
    Batch = Sequence[Features]
    LabelIn = Label

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request (method, path, JSON body, query) and how to read its successful answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    body: Any = None
    params: Mapping[str, int | str] | None = None

    def result(self, response: httpx.Response) -> T:
        """The answer read, or the error it carries raised as a ``PerceptronError``."""
        if response.is_error:
            raise error_from_response(response)
        return self.read(response)


# --- reading answers --------------------------------------------------------------------------


def _parse(model: type[M]) -> Callable[[httpx.Response], M]:
    def read(response: httpx.Response) -> M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as e:  # not this service's answer (a proxy's page, a redirect)
            raise PerceptronError(
                response.status_code,
                "unexpected_answer",
                f"{response.request.method} {response.request.url.path} answered "
                f"{response.status_code}, not a {model.__name__}: {e.errors()[0]['msg']}",
            ) from e

    return read


def _nothing(response: httpx.Response) -> None:
    return None


def _document(response: httpx.Response) -> dict[str, Any]:
    try:
        value = response.json()
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise PerceptronError(response.status_code, "unexpected_answer", "not a JSON object")
    return value


# --- writing requests ------------------------------------------------------------------------


def _path(name: str) -> str:
    """The model's path, its name escaped: a name of dots alone too, which a URL would
    otherwise fold away ('/models/..' is '/'), so that the service answers for that name.

    >>> _path("iris"), _path("a b"), _path("..")
    ('/models/iris', '/models/a%20b', '/models/%2E%2E')
    """
    return "/models/" + _segment(name, "a model's name")


def _segment(text: str, what: str) -> str:
    """``text`` as one path segment; a TypeError or a ValueError (not a request to another
    path) where it is not a string, is empty or holds a '/' (which the service reads as one,
    escaped or not)."""
    if not isinstance(text, str):
        raise TypeError(f"{what} is a string, not {type(text).__name__} ({text!r})")
    if not text:
        raise ValueError(f"{what} is not empty (no path names it)")
    if "/" in text:
        raise ValueError(f"{what} holds no '/' ({text[:80]!r} would name another path)")
    segment = quote(text, safe="")
    return segment if segment.strip(".") else "%2E" * len(segment)


def _is_array(x: object) -> TypeGuard[np.ndarray]:
    """Whether ``x`` is a numpy array; False, and numpy not imported, when nothing has."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(x, numpy.ndarray)


def _is_integer(x: object) -> TypeGuard[np.integer]:
    """Whether ``x`` is a numpy integer (as ``_is_array``: numpy only if already imported)."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(x, numpy.integer)


def _features(x: Features) -> list[Any] | dict[str, Any]:
    if isinstance(x, Mapping):
        return dict(x)
    if _is_array(x):  # plain floats, not numpy scalars
        values: list[Any] = x.tolist()
        return values
    return list(x)


def _examples(features_list: Batch) -> dict[str, Any]:
    """A batch's examples: a 2-D numpy array of numbers goes packed (see the API), the rest
    as JSON."""
    if (
        _is_array(features_list)
        and features_list.ndim == 2
        and features_list.dtype.kind in ("f", "i", "u")
    ):
        # little-endian float64, row after row (tobytes writes C order whatever the layout)
        values = features_list.astype("<f8", copy=False).tobytes()
        return {"packed_features": base64.b64encode(values).decode("ascii")}
    return {"features": [_features(x) for x in features_list]}


def _label(y: LabelIn) -> Label:
    # (a TypeGuard narrows only where it holds: otherwise y is the Label it was given)
    return int(y) if _is_integer(y) else cast("Label", y)


# --- the operations ---------------------------------------------------------------------------


def create_model(name: str, config: Mapping[str, Any]) -> Call[ModelInfo]:
    body = dict(config)
    if isinstance(body.get("drift"), str):  # a detector by its name alone, as the CLI takes it
        body["drift"] = {"detector": body["drift"]}
    return Call("PUT", _path(name), _parse(ModelInfo), body)


def learners() -> Call[LearnerList]:
    return Call("GET", "/learners", _parse(LearnerList))


def list_models() -> Call[ModelList]:
    return Call("GET", "/models", _parse(ModelList))


def read_model(name: str) -> Call[ModelInfo]:
    return Call("GET", _path(name), _parse(ModelInfo))


def delete_model(name: str) -> Call[None]:
    return Call("DELETE", _path(name), _nothing)


def reset_model(name: str) -> Call[ModelInfo]:
    return Call("POST", _path(name) + "/reset", _parse(ModelInfo))


def export_model(name: str, checkpoints: bool = False) -> Call[dict[str, Any]]:
    params = {"checkpoints": "true"} if checkpoints else None
    return Call("GET", _path(name) + "/export", _document, params=params)


def import_model(name: str, document: Mapping[str, Any]) -> Call[ModelInfo]:
    return Call("POST", _path(name) + "/import", _parse(ModelInfo), dict(document))


def from_sklearn(name: str, estimator: Any, options: Mapping[str, Any]) -> Call[ModelInfo]:
    """The import of a document written from a fitted scikit-learn linear classifier
    (``sklearn_bridge``; the extra ``sklearn``), checked before anything is sent."""
    from .sklearn_bridge import estimator_document  # scikit-learn only when asked for

    return import_model(name, estimator_document(name, estimator, options))


def to_sklearn(name: str) -> Call[Any]:
    """The model's export, read into a fitted ``sklearn.linear_model.Perceptron``
    (``sklearn_bridge``); without scikit-learn, the ImportError comes before any request."""
    from .sklearn_bridge import estimator_of

    return Call("GET", _path(name) + "/export", lambda r: estimator_of(_document(r)))


def checkpoints(name: str) -> Call[Checkpoints]:
    return Call("GET", _path(name) + "/checkpoints", _parse(Checkpoints))


def rollback(
    name: str, version: int | None = None, checkpoint: int | None = None
) -> Call[RollbackResponse]:
    if (version is None) == (checkpoint is None):
        raise ValueError("Give either version or checkpoint.")
    body = {"version": version} if checkpoint is None else {"checkpoint": checkpoint}
    return Call("POST", _path(name) + "/rollback", _parse(RollbackResponse), body)


def updates(name: str, from_version: int | None = None, limit: int = 100) -> Call[Updates]:
    params = {"limit": limit} | ({} if from_version is None else {"from_version": from_version})
    return Call("GET", _path(name) + "/updates", _parse(Updates), params=params)


def undo(
    name: str,
    source: str | None = None,
    from_time: float | None = None,
    to_time: float | None = None,
) -> Call[UndoResponse]:
    body = {"source": source, "from_time": from_time, "to_time": to_time}
    given = {k: v for k, v in body.items() if v is not None}
    if not given:
        raise ValueError("Give a source, a time range, or both.")
    return Call("POST", _path(name) + "/undo", _parse(UndoResponse), given)


def drift(name: str) -> Call[DriftReport]:
    return Call("GET", _path(name) + "/drift", _parse(DriftReport))


def events_path(name: str) -> str:
    """The model's event stream (``event_streams.py`` reads it)."""
    return _path(name) + "/events"


def challengers(name: str, weights: bool = False) -> Call[Challengers]:
    query = {"weights": "true"} if weights else None
    return Call("GET", _path(name) + "/challengers", _parse(Challengers), params=query)


def _challenger_path(name: str, id: str) -> str:
    return _path(name) + "/challengers/" + _segment(id, "a challenger's id")


def challenger(name: str, id: str, weights: bool = False) -> Call[ChallengerInfo]:
    query = {"weights": "true"} if weights else None
    return Call("GET", _challenger_path(name, id), _parse(ChallengerInfo), params=query)


def add_challenger(
    name: str, id: str, settings: Mapping[str, Any], from_served: bool = False
) -> Call[ChallengerInfo]:
    body = {**settings, **({"from": "served"} if from_served else {})}
    return Call("PUT", _challenger_path(name, id), _parse(ChallengerInfo), body)


def delete_challenger(name: str, id: str) -> Call[None]:
    return Call("DELETE", _challenger_path(name, id), _nothing)


def promote(name: str, challenger: str, demote_as: str | None = None) -> Call[Promotion]:
    body = {"challenger": challenger} | ({} if demote_as is None else {"demote_as": demote_as})
    return Call("POST", _path(name) + "/promote", _parse(Promotion), body)


def weights(name: str) -> Call[WeightsResponse]:
    return Call("GET", _path(name) + "/weights", _parse(WeightsResponse))


def metrics(name: str) -> Call[ModelMetrics]:
    return Call("GET", _path(name) + "/metrics", _parse(ModelMetrics))


def predict(model: str, features: Features) -> Call[PredictResponse]:
    body = {"model": model, "features": _features(features)}
    return Call("POST", "/predict", _parse(PredictResponse), body)


def predict_batch(model: str, features_list: Batch) -> Call[PredictBatchResponse]:
    body = {"model": model, **_examples(features_list)}
    return Call("POST", "/predict/batch", _parse(PredictBatchResponse), body)


def feedback(prediction_id: str, label: LabelIn) -> Call[FeedbackResponse]:
    body = {"prediction_id": prediction_id, "label": _label(label)}
    return Call("POST", "/feedback", _parse(FeedbackResponse), body)


def feedback_batch(items: Sequence[tuple[str, LabelIn]]) -> Call[FeedbackBatchResponse]:
    body = {"feedback": [{"prediction_id": p, "label": _label(y)} for p, y in items]}
    return Call("POST", "/feedback/batch", _parse(FeedbackBatchResponse), body)


def learn(model: str, features: Features, label: LabelIn) -> Call[LearnResponse]:
    body = {"model": model, "features": _features(features), "label": _label(label)}
    return Call("POST", "/learn", _parse(LearnResponse), body)


def learn_batch(
    model: str, features_list: Batch, labels: Sequence[LabelIn]
) -> Call[LearnBatchResponse]:
    body = {"model": model, **_examples(features_list), "labels": [_label(y) for y in labels]}
    return Call("POST", "/learn/batch", _parse(LearnBatchResponse), body)


def healthz() -> Call[Health]:
    return Call("GET", "/healthz", _parse(Health))


def readyz() -> Call[Health]:
    return Call("GET", "/readyz", _parse(Health))
