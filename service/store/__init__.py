"""Everything that touches Redis lives in this package."""

from .connect import open_store
from .keys import ModelKeys, valid_name, valid_token
from .redis_store import (
    APPLIED,
    CONFLICT,
    DUPLICATE,
    RING_SIZE,
    UNKNOWN,
    Bucket,
    FeedbackBatch,
    FeedbackItem,
    LearnBatch,
    LearnResult,
    Made,
    Observations,
    Store,
    SyncData,
)

__all__ = [
    "APPLIED",
    "CONFLICT",
    "DUPLICATE",
    "UNKNOWN",
    "Bucket",
    "FeedbackBatch",
    "FeedbackItem",
    "LearnBatch",
    "Made",
    "Observations",
    "RING_SIZE",
    "LearnResult",
    "ModelKeys",
    "Store",
    "SyncData",
    "open_store",
    "valid_name",
    "valid_token",
]
