"""Everything that touches Redis lives in this package; what its calls take and answer is
``service/protocol.py``'s."""

from redis.exceptions import RedisError as StoreError

from .connect import describe_store, embedded_client, open_store
from .keys import ModelKeys
from .redis_store import Condition, NotSent, Store, reply_lost

__all__ = [
    "Condition",
    "ModelKeys",
    "NotSent",
    "Store",
    "StoreError",
    "describe_store",
    "embedded_client",
    "open_store",
    "reply_lost",
]
