"""Model history: a model that was never compacted keeps the updates before a version it is
rolled back to."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import MakeService
from .test_history import SPECS, learn_and_export, rollback

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one


def checkpoints(client: httpx.Client) -> dict[str, Any]:
    listed: dict[str, Any] = client.get("/models/m/checkpoints").json()
    return listed


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_a_model_never_compacted_keeps_the_versions_before_the_one_restored(
    make_service: MakeService, kind: str
) -> None:
    client = make_service(default_model=False)  # a compaction every 1,000 updates
    spec = SPECS[kind]
    assert client.put("/models/m", json=spec).status_code == 201
    zeros = client.get("/models/m/export").json()["weights"]
    exports = {0: zeros, **learn_and_export(client, spec, 12)}
    assert checkpoints(client)["checkpoints"] == []  # never compacted
    targets = sorted(exports)
    high, middle, low, last = (
        targets[len(targets) * 2 // 3],
        targets[len(targets) // 3],
        targets[2],
        targets[-1],
    )
    before = rollback(client, version=high)["before"]
    assert checkpoints(client)["restorable_from"] == 0
    for v in (middle, low, 0):  # each before the last one restored: still kept
        assert rollback(client, version=v)["version"] == v
        assert client.get("/models/m/export").json()["weights"] == exports[v]
    assert rollback(client, checkpoint=before)["version"] == last
    assert client.get("/models/m/export").json()["weights"] == exports[last]
