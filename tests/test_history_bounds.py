"""Model history stays within its policy and its bytes after every operation that adds to it
(a rollback, a reset, an import, an undo), not only after a compaction, and a model that was
never compacted keeps the updates before a version it is rolled back to."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from service.admin.retention import KEEP_LAST
from service.contract.store_protocol import Reason
from service.store import Store

from .conftest import MakeService
from .test_history import SPECS, learn_and_export, rollback

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one

HASHED = {"hash_bits": 12}  # its snapshot: 4,097 numbers, 32,776 bytes
CAP = 128 * 1024  # four such snapshots


def learn(client: httpx.Client, rng: np.random.Generator, n: int) -> None:
    xs = [{f"f{j}": float(rng.normal()) for j in rng.choice(4000, 5)} for _ in range(n)]
    ys = [int(rng.choice([-1, 1])) for _ in range(n)]
    r = client.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys})
    assert r.status_code == 200, r.text


def checkpoints(client: httpx.Client) -> dict[str, Any]:
    listed: dict[str, Any] = client.get("/models/m/checkpoints").json()
    return listed


def test_a_dozen_rollbacks_and_a_dozen_resets_keep_at_most_the_policys_checkpoints(
    make_service: MakeService,
) -> None:
    client = make_service(default_model=False, compact_every=4)
    assert client.put("/models/m", json=HASHED).status_code == 201
    rng = np.random.default_rng(1)
    for _ in range(12):
        learn(client, rng, 6)
        version = client.get("/models/m").json()["version"]
        rollback(client, version=version - 1)
    # Within the hour: the newest KEEP_LAST, and the one the kept updates start from.
    listed = checkpoints(client)["checkpoints"]
    assert len(listed) <= KEEP_LAST + 1
    assert Reason.START in {c["reason"] for c in listed}
    for _ in range(12):
        learn(client, rng, 3)
        assert client.post("/models/m/reset").status_code == 200
    assert len(checkpoints(client)["checkpoints"]) <= KEEP_LAST


def test_history_stays_within_its_bytes_through_a_hundred_rollbacks_and_resets(
    make_service: MakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose weights are a quarter of the bound: every operation makes room for what
    it writes first, so the bound holds as each writes, not only once it is done."""
    written: list[int] = []  # the model's history bytes right after each write
    for method in ("rollback", "replace_model", "undo_updates"):
        original = getattr(Store, method)

        async def counted(
            self: Store, name: str, *args: Any, _run: Any = original, **kw: Any
        ) -> Any:
            out = await _run(self, name, *args, **kw)
            written.append((await self.read_history(name)).bytes)
            return out

        monkeypatch.setattr(Store, method, counted)
    client = make_service(default_model=False, history_max_bytes=CAP)
    assert client.put("/models/m", json=HASHED).status_code == 201
    rng = np.random.default_rng(2)
    document = None
    for i in range(100):
        learn(client, rng, 4)
        version = client.get("/models/m").json()["version"]
        if i % 5 == 0:
            assert client.post("/models/m/reset").status_code == 200
        elif i % 5 == 1:
            document = client.get("/models/m/export").json()
            rollback(client, version=max(0, version - 2))
        elif i % 5 == 2:
            listed = checkpoints(client)["checkpoints"]
            rollback(client, checkpoint=listed[-1]["id"])
        elif i % 5 == 3 and document is not None:
            assert client.post("/models/m/import", json=document).status_code == 200
        else:
            r = client.post("/models/m/undo", json={"from_time": 0})
            assert r.status_code == 200, r.text
        held = checkpoints(client)
        assert held["bytes"] <= CAP, (i, held)
        assert held["checkpoints"], i  # the newest always stays
    assert len(written) > 90 and max(written) <= CAP  # (an undo with nothing to undo: none)


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
