"""Everything that touches Redis lives in this package."""

from .connect import open_store
from .keys import ModelKeys, valid_name
from .redis_store import FeedbackResult, LearnResult, Store, SyncData

__all__ = [
    "FeedbackResult",
    "LearnResult",
    "ModelKeys",
    "Store",
    "SyncData",
    "open_store",
    "valid_name",
]
