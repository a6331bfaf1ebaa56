"""What a Redis error means to a client: the service's error for it, made here, where the
store's errors are known, for the app's handlers and for the code that answers per item."""

from __future__ import annotations

from redis.exceptions import BusyLoadingError, OutOfMemoryError, ReadOnlyError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.errors import ServiceError, Unavailable, store_unavailable

# Errors Redis answers when it is unable, not unwilling: the request may succeed later.
STORE_STATES = {
    "OOM": (
        "store_full",
        "The model store is full (Redis is at its maxmemory); nothing was "
        "changed. Free memory (delete models, lower feedback_ttl_s) or raise maxmemory.",
    ),
    "READONLY": ("store_read_only", "The model store is read-only (a replica, or a failover)."),
    "LOADING": ("store_loading", "The model store is loading its data; retry shortly."),
    "MISCONF": (
        "store_cannot_persist",
        "The model store refuses writes: it cannot save its data to disk.",
    ),
    "NOREPLICAS": ("store_no_replicas", "The model store refuses writes: too few replicas."),
    "MASTERDOWN": ("store_unavailable", "The model store has lost its primary."),
    "BUSY": ("store_busy", "The model store is busy running a long script."),
    "TRYAGAIN": ("store_unavailable", "The model store is resharding; retry shortly."),
    "CLUSTERDOWN": ("store_unavailable", "The model store's cluster is down."),
}


def store_refusal(exc: BaseException) -> tuple[str, str]:
    """The error code and detail of a command Redis answered with an error."""
    if isinstance(exc, OutOfMemoryError):
        return STORE_STATES["OOM"]
    if isinstance(exc, ReadOnlyError):
        return STORE_STATES["READONLY"]
    if isinstance(exc, BusyLoadingError):
        return STORE_STATES["LOADING"]
    first = str(exc).split(" ", 1)[0]
    return STORE_STATES.get(first, ("internal_error", "The store refused a command; a bug."))


def service_error(exc: BaseException) -> ServiceError:
    """The service's error for a Redis error: not answering (retry at once), a refusal of
    Redis's (retry later: nothing was written), or a command Redis could not run (a bug)."""
    down = isinstance(exc, RedisConnectionError | RedisTimeoutError)
    if down and not isinstance(exc, BusyLoadingError):  # (LOADING: Redis answered)
        return store_unavailable()
    code, detail = store_refusal(exc)
    if code == "internal_error":
        return ServiceError(detail)
    refused = Unavailable(detail, code=code)
    refused.retry_after_s = 5
    return refused
