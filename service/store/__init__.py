"""Everything that touches Redis lives in this package."""

from .connect import open_store
from .keys import ModelKeys, valid_name, valid_token
from .redis_store import (
    APPLIED,
    CONFLICT,
    DUPLICATE,
    UNKNOWN,
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
from .scripts import RECENT_KEPT, RING_SIZE

__all__ = [
    "APPLIED",
    "CONFLICT",
    "DUPLICATE",
    "UNKNOWN",
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
    "SyncData",
    "open_store",
    "valid_name",
    "valid_token",
]
