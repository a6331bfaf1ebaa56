"""The store's operations, one module each: its Lua script, with its KEYS and ARGV named once
(``script.py``), and its typed call, which reads the script's answer as a ``Status``. The
``Store`` (``redis_store.py``) runs them, each as a method of its own."""

from ..script import Script
from . import (
    claim,
    compact,
    create,
    delete,
    feedback,
    handoff,
    learn,
    predict,
    purge,
    refuse,
    release,
    replace,
    sync,
    take,
    withdraw,
)

SCRIPTS: tuple[Script, ...] = tuple(
    m.SCRIPT
    for m in (
        create,
        delete,
        replace,
        purge,
        sync,
        predict,
        feedback,
        learn,
        compact,
        handoff,
        claim,
        take,
        release,
        refuse,
        withdraw,
    )
)

__all__ = [
    "SCRIPTS",
    "claim",
    "compact",
    "create",
    "delete",
    "feedback",
    "handoff",
    "learn",
    "predict",
    "purge",
    "refuse",
    "release",
    "replace",
    "sync",
    "take",
    "withdraw",
]
