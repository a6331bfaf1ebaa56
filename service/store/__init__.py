"""Everything that touches Redis lives in this package; what its calls take and answer is
``service/protocol.py``'s."""

from .connect import describe_store, open_store
from .keys import ModelKeys, check_name, valid_name, valid_token
from .redis_store import Condition, Store

__all__ = [
    "Condition",
    "ModelKeys",
    "check_name",
    "Store",
    "describe_store",
    "open_store",
    "valid_name",
    "valid_token",
]
