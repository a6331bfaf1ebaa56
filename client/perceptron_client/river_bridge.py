"""A River classifier backed by a live model of the service (the extra ``river``).

``ServiceClassifier(client, model)`` is a ``river.base.Classifier``: River's
``evaluate.progressive_val_score``, its metrics and its pipelines run against the model as
they would against one of River's own. Each ``predict_one`` is a ``POST /predict`` and its
label is the service's; the ``learn_one`` of the same features then sends the true label to
``POST /feedback`` for that very prediction, as a live client would, so the service counts the
mistakes River's metrics count: River's accuracy is one minus the service's mistake rate. A
``learn_one`` with no prediction waiting for those features is a ``POST /learn``.

Needs River (``pip install 'perceptron-client[river]'``); the client never imports this module
by itself.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Self

from .answers import ModelSpec
from .clients import Client
from .errors import NotFoundError

try:
    from river import base
except ImportError as e:  # the extra is not installed
    raise ImportError("The River bridge needs River: pip install 'perceptron-client[river]'") from e

__all__ = ["ServiceClassifier"]


class ServiceClassifier(base.Classifier):
    """A River classifier whose predictions and learning are those of model ``model`` of the
    service ``client`` talks to.

    ``features``: a dense model's columns, in order (a feature missing from ``x`` is 0, and a
    feature not among them is left out); by default the keys of the first ``x``, in their
    order. A model of named features takes ``x`` as it is, each name as ``str(name)``.
    Booleans, as labels or values, are sent as 0 and 1 (the service takes integers and
    strings as labels; with classes ``[0, 1]``, ``True`` is the positive class).

    ``max_waiting``: how many predictions to keep waiting for their label (the oldest go
    first; a ``learn_one`` that finds none is a ``/learn``).
    """

    def __init__(
        self,
        client: Client,
        model: str,
        features: Sequence[Hashable] | None = None,
        max_waiting: int = 100_000,
    ) -> None:
        self.client = client
        self.model = model
        self.features = features
        self.max_waiting = max_waiting
        self._spec: ModelSpec | None = None
        self._columns: list[Hashable] | None = None if features is None else list(features)
        # the predictions waiting for their label, by the features they were made for
        self._waiting: OrderedDict[Hashable, deque[str]] = OrderedDict()
        self._n_waiting = 0

    @property
    def _multiclass(self) -> bool:
        return len(self._config().classes) > 2

    def clone(
        self, new_params: dict[str, Any] | None = None, include_attributes: bool = False
    ) -> Self:
        """Refused: a clone would be a fresh model to River, and would share this live one."""
        raise TypeError(
            "A ServiceClassifier stands for a live model of the service, which a clone would "
            "share rather than start afresh: make another ServiceClassifier, on a model of its "
            "own."
        )

    def predict_one(self, x: dict[Hashable, Any], **kwargs: Any) -> int | str:
        """The service's label for ``x`` (``POST /predict``); its prediction waits for the
        ``learn_one`` of the same features."""
        answer = self.client.predict(self.model, self._encode(x))
        key = _key(x)
        if key is not None:
            self._remember(key, answer.prediction_id)
        return answer.label

    def learn_one(self, x: dict[Hashable, Any], y: bool | int | str) -> None:
        """The true label of ``x``: ``POST /feedback`` for the prediction made for these
        features, or ``POST /learn`` when none is waiting (or it has lapsed)."""
        label = int(y) if isinstance(y, bool) else y
        key = _key(x)
        prediction_id = None if key is None else self._take(key)
        if prediction_id is not None:
            try:
                self.client.feedback(prediction_id, label)
                return
            except NotFoundError as e:  # lapsed (feedback_ttl_s), or the model was reset
                if e.code != "prediction_not_found":
                    raise
        self.client.learn(self.model, self._encode(x), label)

    # --- features -------------------------------------------------------------------------

    def _config(self) -> ModelSpec:
        if self._spec is None:
            self._spec = self.client.read_model(self.model).config
        return self._spec

    def _encode(self, x: Mapping[Hashable, Any]) -> list[Any] | dict[str, Any]:
        config = self._config()
        if config.n_features is None:
            if self.features is not None:
                raise ValueError(
                    f"Model {self.model!r} has named features: it takes x as it is, and "
                    "'features' (a dense model's columns) is not for it."
                )
            return {str(k): _value(v) for k, v in x.items()}
        if self._columns is None:
            self._columns = list(x)
        if len(self._columns) != config.n_features:
            n = len(self._columns)
            given = f"'features' names {n}" if self.features is not None else f"the first x has {n}"
            raise ValueError(
                f"Model {self.model!r} is dense with {config.n_features} features; {given}: "
                "give its columns, in order, as 'features'."
            )
        return [_value(x.get(k, 0.0)) for k in self._columns]

    # --- predictions waiting for their label ----------------------------------------------

    def _remember(self, key: Hashable, prediction_id: str) -> None:
        self._waiting.setdefault(key, deque()).append(prediction_id)
        self._waiting.move_to_end(key)
        self._n_waiting += 1
        while self._n_waiting > self.max_waiting:
            oldest = next(iter(self._waiting))
            self._pop(oldest)

    def _take(self, key: Hashable) -> str | None:
        return self._pop(key) if key in self._waiting else None

    def _pop(self, key: Hashable) -> str:
        ids = self._waiting[key]
        prediction_id = ids.popleft()
        if not ids:
            del self._waiting[key]
        self._n_waiting -= 1
        return prediction_id


def _key(x: Mapping[Hashable, Any]) -> Hashable | None:
    """What tells one ``x`` from another, whether River hands back the same dict or a copy
    (``progressive_val_score`` copies it when labels come late); None when a value cannot be
    hashed (then ``learn_one`` is a ``/learn``)."""
    try:
        return frozenset(x.items())
    except TypeError:
        return None


def _value(v: Any) -> Any:
    return float(v) if isinstance(v, bool) else v
