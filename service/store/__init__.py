"""Everything that touches Redis lives in this package."""

from .connect import open_store
from .keys import ModelKeys, valid_name, valid_token
from .protocol import RECENT_KEPT, RING_SIZE, Status
from .redis_store import (
    Bucket,
    Condition,
    FeedbackBatch,
    FeedbackItem,
    Held,
    LearnBatch,
    LearnResult,
    Made,
    Observations,
    RequestsGone,
    Store,
    SyncData,
)

__all__ = [
    "Bucket",
    "Condition",
    "FeedbackBatch",
    "FeedbackItem",
    "Held",
    "LearnBatch",
    "Made",
    "Observations",
    "RECENT_KEPT",
    "RING_SIZE",
    "RequestsGone",
    "LearnResult",
    "ModelKeys",
    "Store",
    "Status",
    "SyncData",
    "open_store",
    "valid_name",
    "valid_token",
]
