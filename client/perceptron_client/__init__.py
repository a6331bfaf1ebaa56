"""A typed HTTP client of the service, sync (``Client``) and async (``AsyncClient``).

Both clients share everything but the I/O: each operation is described once as a ``Call``
(``calls.py``: method, path, JSON body, and how to read the answer), and each client only
sends it::

    from perceptron_client import Client, NotFoundError

    with Client("http://127.0.0.1:8000", api_key="...") as c:
        c.create_model("iris", classes=["setosa", "versicolor", "virginica"], n_features=4)
        r = c.learn("iris", [5.1, 3.5, 1.4, 0.2], "setosa")
        print(r.mistake, c.read_model("iris").counters.mistakes)

Answers are the client's own pydantic models (``answers.py``), field for field those of the
service's OpenAPI document; the client imports nothing of the server (no FastAPI, no Redis).
An error answer raises a ``PerceptronError`` subclass chosen by its HTTP status, carrying the
service's ``code``, ``detail`` and ``status``. A request that gets no answer at all (refused
connection, timeout) raises httpx's own ``httpx.TransportError``. A 2-D numpy array of numbers
given to ``predict_batch`` or ``learn_batch`` travels packed (``packed_features``), the rest as
JSON.

A distribution of its own, ``perceptron-client`` (``pip install ./client`` in the service's
repository), needing httpx, httpx-sse and pydantic only. numpy is optional (the extra
``numpy``): the client accepts numpy arrays and integers but never imports numpy itself.
"""

from .answers import (
    ChallengerInfo,
    Challengers,
    ChallengerWeights,
    CheckpointInfo,
    Checkpoints,
    Confusion,
    Counters,
    Curve,
    CurvePoint,
    DriftEvent,
    DriftReport,
    ErrorResponse,
    FeedbackBatchResponse,
    FeedbackItemResult,
    FeedbackResponse,
    Health,
    Label,
    LearnBatchResponse,
    LearnerInfo,
    LearnerList,
    LearnerRates,
    LearnResponse,
    MistakeBound,
    MistakeRates,
    ModelInfo,
    ModelList,
    ModelMetrics,
    ModelSpec,
    PredictBatchResponse,
    PredictResponse,
    Promotion,
    RollbackResponse,
    Series,
    SeriesPoint,
    ServedLearner,
    SettingInfo,
    SourceCounts,
    UndoResponse,
    UpdateInfo,
    Updates,
    WeightRow,
    WeightsResponse,
)
from .calls import Batch, Features, LabelIn
from .clients import DEFAULT_TIMEOUT, DEFAULT_URL, AsyncClient, Client
from .errors import (
    AuthError,
    ConflictError,
    GoneError,
    InvalidInputError,
    NotFoundError,
    PerceptronError,
    UnavailableError,
    error_from_item,
)
from .event_streams import EventData, ModelEvent

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "AsyncClient",
    "AuthError",
    "Batch",
    "ChallengerInfo",
    "ChallengerWeights",
    "Challengers",
    "CheckpointInfo",
    "Checkpoints",
    "DriftEvent",
    "EventData",
    "DriftReport",
    "Client",
    "ConflictError",
    "Confusion",
    "Counters",
    "Curve",
    "CurvePoint",
    "ErrorResponse",
    "FeedbackBatchResponse",
    "FeedbackItemResult",
    "FeedbackResponse",
    "Features",
    "GoneError",
    "Health",
    "InvalidInputError",
    "Label",
    "LabelIn",
    "LearnBatchResponse",
    "LearnResponse",
    "LearnerInfo",
    "LearnerList",
    "LearnerRates",
    "MistakeBound",
    "MistakeRates",
    "ModelInfo",
    "ModelList",
    "ModelEvent",
    "ModelMetrics",
    "ModelSpec",
    "SettingInfo",
    "NotFoundError",
    "PerceptronError",
    "PredictBatchResponse",
    "PredictResponse",
    "Promotion",
    "RollbackResponse",
    "SourceCounts",
    "UndoResponse",
    "UpdateInfo",
    "Updates",
    "Series",
    "SeriesPoint",
    "ServedLearner",
    "UnavailableError",
    "WeightRow",
    "WeightsResponse",
    "error_from_item",
]
