"""Everything that touches Redis lives in this package; what its calls take and answer is
``service/contract/store_protocol.py``'s."""

from redis.exceptions import RedisError as StoreError

from service.store.connect import describe_store, embedded_client, open_store
from service.store.keys import ModelKeys
from service.store.redis_store import Condition, NotSent, Store, reply_lost

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
