"""Example bodies of the OpenAPI document for a model's history (checkpoints, kept updates,
rollback and undo): answers the service gave for the model ``iris`` of ``openapi_examples.py``;
``tests/test_docs.py`` checks each against its schema."""

from __future__ import annotations

from typing import Any

CHECKPOINTS: dict[str, Any] = {
    "name": "iris",
    "version": 1250,
    "restorable_from": 0,
    "bytes": 1_071_204,
    "checkpoints": [
        {
            "id": 1,
            "version": 0,
            "seen": 0,
            "time": 1764028800.123,
            "reason": "start",
            "mistake_rate": None,
            "window": 0,
            "bytes": 0,
        },
        {
            "id": 2,
            "version": 1000,
            "seen": 8412,
            "time": 1764030012.5,
            "reason": "scheduled",
            "mistake_rate": 0.082,
            "window": 1000,
            "bytes": 120,
        },
    ],
}
UPDATES: dict[str, Any] = {
    "name": "iris",
    "version": 1250,
    "restorable_from": 0,
    "updates": [
        {"version": 1249, "source": "labeller", "time": 1764031012.25, "label": "setosa"},
        {"version": 1250, "source": "batch-job", "time": 1764031013.5, "label": "virginica"},
    ],
    "sources": {"labeller": 1, "batch-job": 1},
}
UNDO_REQUEST: dict[str, Any] = {"source": "labeller", "from_time": 1764028800.0}
UNDO_RESPONSE: dict[str, Any] = {
    "name": "iris",
    "version": 1180,
    "removed": 70,
    "undo_checkpoint": 4,
    "before": 4,
}
ROLLBACK_REQUEST: dict[str, Any] = {"version": 1000}
ROLLBACK_RESPONSE: dict[str, Any] = {
    "name": "iris",
    "version": 1000,
    "restored_checkpoint": None,
    "undo_checkpoint": 3,
    "checkpoint": None,
    "before": 3,
}
