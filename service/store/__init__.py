"""Everything that touches Redis lives in this package."""

from .connect import describe_store, open_store
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
    LearnBatch,
    LearnResult,
    Made,
    Observations,
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
    "LearnBatch",
    "Made",
    "Observations",
    "RECENT_KEPT",
    "RING_SIZE",
    "LearnResult",
    "ModelKeys",
    "Store",
    "SyncData",
    "describe_store",
    "open_store",
    "valid_name",
    "valid_token",
]
