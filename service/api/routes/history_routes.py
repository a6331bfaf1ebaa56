"""Routes of a model's history: its checkpoints and kept updates listed, rollback and undo."""

from __future__ import annotations

from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Query

from service.admin.worker import Worker
from service.api.auth import Role
from service.api.callers import Admin, FastJSONRoute, Reader
from service.api.schemas.history_schemas import (
    CheckpointInfo,
    Checkpoints,
    RollbackRequest,
    RollbackResponse,
    UndoRequest,
    UndoResponse,
    UpdateInfo,
    Updates,
)
from service.api.schemas.model_schemas import error_responses
from service.contract.store_protocol import MAX_COUNT

MAX_UPDATES_LISTED = 10_000  # one page of GET /models/{name}/updates
router = APIRouter(prefix="/models", tags=["models"], route_class=FastJSONRoute)
errors = error_responses((401, 403, 404, 409, 422, 503))
# Operations with a JSON body may also get 400 (not JSON) and 413 (too large).
with_body = error_responses((400, 401, 403, 404, 409, 413, 422, 503))


@router.get("/{name}/checkpoints", responses=errors)
async def list_checkpoints(name: str, who: Reader) -> Checkpoints:
    """List the model's checkpoints, and the versions it can be rolled back to."""
    who.check(Role.predict, name)
    return await read_checkpoints(who.worker, name)


async def read_checkpoints(worker: Worker, name: str) -> Checkpoints:
    """The answer of GET /models/{name}/checkpoints (its event stream pushes it too)."""
    h = await worker.history.checkpoints(name)
    return Checkpoints(
        name=name,
        version=h.version,
        restorable_from=h.first_version,
        bytes=h.bytes,
        checkpoints=[
            CheckpointInfo(
                id=c.id,
                version=c.version,
                seen=c.seen,
                time=c.ms / 1000,
                reason=c.reason,
                mistake_rate=c.mistake_rate,
                window=c.window,
                bytes=c.bytes,
            )
            for c in h.checkpoints
        ],
    )


@router.get("/{name}/updates", responses=errors)
async def list_updates(
    name: str,
    who: Admin,
    from_version: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_COUNT,
            description="The version of the first update listed, an integer from 1 (default: "
            "the last `limit`).",
        ),
    ] = None,
    limit: Annotated[
        int,
        Query(
            ge=1,
            le=MAX_UPDATES_LISTED,
            description=f"How many updates to list at most, an integer from 1 to "
            f"{MAX_UPDATES_LISTED} (default 100).",
        ),
    ] = 100,
) -> Updates:
    """List the model's kept updates with who caused each (an API key's name) and when."""
    who.check(Role.admin, name)
    kept = await who.worker.history.updates(name, from_version, limit)
    return Updates(
        name=name,
        version=kept.version,
        restorable_from=kept.first_kept - 1,
        updates=[UpdateInfo(**u) for u in kept.updates],
        sources=dict(Counter(u["source"] or "" for u in kept.updates)),
    )


@router.post("/{name}/rollback", responses=with_body)
async def rollback_model(name: str, who: Admin, body: RollbackRequest) -> RollbackResponse:
    """Restore the model's weights exactly as they were at a kept version or checkpoint; every
    worker serves them at once, and predictions still waiting for their label lapse."""
    who.check(Role.admin, name)
    version, before = await who.worker.history.rollback(name, body.version, body.checkpoint)
    return RollbackResponse(
        name=name,
        version=version,
        restored_checkpoint=body.checkpoint,
        undo_checkpoint=before,
        checkpoint=body.checkpoint,
        before=before,
    )


@router.post("/{name}/undo", responses=with_body)
async def undo_updates(name: str, who: Admin, body: UndoRequest) -> UndoResponse:
    """Rebuild the model, exactly, from its oldest kept weights through its kept updates but
    those of one API key (or of a time range): the recovery from bad labels. Every worker
    serves the result at once; predictions waiting for their label lapse."""
    who.check(Role.admin, name)
    done = await who.worker.history.undo(name, body.source, body.from_time, body.to_time)
    return UndoResponse(
        name=name,
        version=done.version,
        removed=done.removed,
        undo_checkpoint=done.before,
        before=done.before,
    )
