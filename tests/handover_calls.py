"""A worker's hand-over to model "m"'s writer, as the writer tests send it by hand: a minute's
lease and wait, and the answer a worker sends when it learns the request itself."""

from __future__ import annotations

from typing import Any

from service.contract.learn_wire import NOT_QUEUED_ANSWER


async def hand_off(
    store: Any, *, token: str, request: bytes, me: str = "requester", wait_s: float = 0.0
) -> tuple[bool, bytes | None]:
    """``Store.hand_off`` for model "m": (whether the caller holds the lease, the answer)."""
    return await store.hand_off(  # type: ignore[no-any-return]
        "m",
        me=me,
        lease_ms=60_000,
        token=token,
        request=request,
        wait_ms=60_000,
        not_queued=NOT_QUEUED_ANSWER,
        wait_s=wait_s,
    )


async def take(store: Any, *, most: int = 10, wait_s: float = 0.01) -> list[bytes] | None:
    """``Store.take_learns`` of model "m" by the worker named "writer"."""
    return await store.take_learns(  # type: ignore[no-any-return]
        "m", me="writer", lease_ms=60_000, most=most, wait_s=wait_s
    )
