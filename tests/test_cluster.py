"""The service on a real Redis Cluster: three masters on loopback, made with redis-cli --cluster.

Every key of one model carries the hash tag ``{name}``, so each model lives whole on one shard
(its Lua scripts touch only that shard) and different models spread over the shards. The service
runs as ``perceptron serve`` (two workers) with PERCEPTRON_REDIS_URL=redis+cluster://...
"""

from __future__ import annotations

import random
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest
import redis
from redis.exceptions import MovedError

from service.cli.loopback import free_port, wait_until
from service.store.keys import REGISTRY, ModelKeys

from .servers import RedisServer, ServiceProcess
from .test_prometheus import samples

pytestmark = pytest.mark.servers  # a 3-master Redis Cluster

D = 4
N_MODELS = 30


@dataclass
class Node:
    port: int

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port)


@dataclass
class Cluster:
    nodes: list[Node]

    def slot_owner(self, slot: int) -> int:
        """The port of the master serving ``slot``."""
        with self.nodes[0].client() as c:
            for start, end, master, *_ in c.execute_command("CLUSTER SLOTS"):
                if start <= slot <= end:
                    return int(master[1])
        raise AssertionError(f"slot {slot} is not served")

    def keyslot(self, key: str) -> int:
        with self.nodes[0].client() as c:
            return int(c.execute_command("CLUSTER KEYSLOT", key))

    def node(self, port: int) -> Node:
        return next(n for n in self.nodes if n.port == port)

    def keys_on(self, port: int, pattern: str) -> set[str]:
        with self.node(port).client() as c:
            return {k.decode() for k in c.scan_iter(match=pattern, count=1000)}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    cli = shutil.which("redis-cli")
    assert cli, "redis-cli is needed: run deploy/setup.sh test"
    servers: list[RedisServer] = []
    nodes: list[Node] = []
    try:
        for _ in range(3):
            server = RedisServer(
                "--cluster-port", str(free_port()), "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
                "--appendonly", "no",
            )  # fmt: skip
            servers.append(server.start())
            nodes.append(Node(server.port))
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
             "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

        def ready() -> bool:
            for n in nodes:
                with n.client() as c:
                    info = c.execute_command("CLUSTER INFO")
                    if (info["cluster_state"], info["cluster_slots_ok"]) != ("ok", "16384"):
                        return False
            return True

        wait_until(ready, timeout=30, what="cluster_state:ok on every node")
        yield Cluster(nodes)
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Iterator[httpx.Client]:
    url = f"redis+cluster://127.0.0.1:{cluster.nodes[0].port}"
    server = ServiceProcess(
        url, workers=2, PERCEPTRON_AUTH="false", PERCEPTRON_COMPACT_EVERY="5"
    ).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop()


@pytest.fixture(scope="module")
def models(api: httpx.Client) -> list[str]:
    names = [f"m{i:02d}" for i in range(N_MODELS)]
    for name in names:
        r = api.put(f"/models/{name}", json={"classes": [-1, 1], "n_features": D})
        assert r.status_code == 201, r.text
    return names


def update_vector(x: list[int], label: int) -> np.ndarray:
    y = 1 if label == 1 else -1
    return np.array([*(y * v for v in x), y])


def weights_of(api: httpx.Client, name: str) -> list[float]:
    r = api.get(f"/models/{name}/weights")
    assert r.status_code == 200, r.text
    row = r.json()["rows"][0]
    return [*row["weights"], row["bias"]]


def test_the_cluster_has_three_masters_serving_every_slot(cluster: Cluster) -> None:
    with cluster.nodes[0].client() as c:
        info = c.execute_command("CLUSTER INFO")
        slots = c.execute_command("CLUSTER SLOTS")
    assert info["cluster_state"] == "ok"
    assert info["cluster_known_nodes"] == "3"
    assert {int(master[1]) for _, _, master, *_ in slots} == {n.port for n in cluster.nodes}
    assert sum(end - start + 1 for start, end, *_ in slots) == 16384


def test_service_is_ready_on_the_cluster(api: httpx.Client) -> None:
    r = api.get("/readyz")
    assert r.status_code == 200, r.text


def test_models_spread_over_shards_each_whole_on_one(
    cluster: Cluster, api: httpx.Client, models: list[str]
) -> None:
    # Give every model a log, so it has more than one key.
    for name in models:
        r = api.post("/learn", json={"model": name, "features": [1, 0, 0, 0], "label": 1})
        assert r.status_code == 200, r.text
    owners: dict[str, int] = {}
    for name in models:
        keys = ModelKeys(name)
        slot = cluster.keyslot(keys.meta)
        assert cluster.keyslot(keys.log) == slot  # the hash tag: one slot per model
        owner = owners[name] = cluster.slot_owner(slot)
        # Every key of the model lives on that node, and on no other.
        on_owner = cluster.keys_on(owner, f"pcp:{{{name}}}:*")
        assert {keys.meta, keys.log} <= on_owner
        for node in cluster.nodes:
            if node.port != owner:
                assert cluster.keys_on(node.port, f"pcp:{{{name}}}:*") == set()
        with cluster.node(owner).client() as c:
            assert c.exists(keys.meta) == 1
        other = next(n for n in cluster.nodes if n.port != owner)
        with other.client() as c, pytest.raises(MovedError, match=rf"^{slot} 127.0.0.1:{owner}$"):
            c.exists(keys.meta)
    used = set(owners.values())
    assert len(used) >= 2, f"all {len(models)} models landed on one shard"
    # The registry of model names is one key, on its own shard; the API lists every model.
    registry_owner = cluster.slot_owner(cluster.keyslot(REGISTRY))
    with cluster.node(registry_owner).client() as c:
        assert {n.decode() for n in c.smembers(REGISTRY)} >= set(models)
    listed = {m["name"] for m in api.get("/models").json()["models"]}
    assert set(models) <= listed


def test_predict_feedback_learn_and_weights_on_every_shard(
    api: httpx.Client, models: list[str]
) -> None:
    rng = random.Random(7)
    for name in models[:12]:
        expected = np.array(weights_of(api, name))
        for _ in range(6):
            x = [rng.randint(-3, 3) for _ in range(D)]
            label = rng.choice([-1, 1])
            p = api.post("/predict", json={"model": name, "features": x})
            assert p.status_code == 200, p.text
            pid = p.json()["prediction_id"]
            f = api.post("/feedback", json={"prediction_id": pid, "label": label})
            assert f.status_code == 200, f.text
            first = f.json()
            assert first["duplicate"] is False
            assert first["mistake"] == (p.json()["label"] != label)
            if first["updated"]:
                expected += update_vector(x, label)
            # The same feedback again: acknowledged as a duplicate, the same outcome.
            again = api.post("/feedback", json={"prediction_id": pid, "label": label})
            assert again.status_code == 200, again.text
            assert again.json()["duplicate"] is True
            assert (again.json()["mistake"], again.json()["updated"]) == (
                first["mistake"],
                first["updated"],
            )
            # Another label for the same prediction is a conflict.
            conflict = api.post("/feedback", json={"prediction_id": pid, "label": -label})
            assert conflict.status_code == 409, conflict.text
            y = rng.choice([-1, 1])
            xl = [rng.randint(-3, 3) for _ in range(D)]
            learned = api.post("/learn", json={"model": name, "features": xl, "label": y})
            assert learned.status_code == 200, learned.text
            if learned.json()["updated"]:
                expected += update_vector(xl, y)
        assert weights_of(api, name) == expected.tolist()
        info = api.get(f"/models/{name}").json()
        assert info["counters"]["duplicates"] == 6
        assert info["counters"]["conflicts"] == 6


def test_concurrent_learning_with_compaction_on_three_shards(
    cluster: Cluster, api: httpx.Client, models: list[str]
) -> None:
    # One model per shard, learned by many clients at once; the log is folded every 5 entries.
    by_shard: dict[int, str] = {}
    for name in models:
        by_shard.setdefault(cluster.slot_owner(cluster.keyslot(ModelKeys(name).meta)), name)
    chosen = list(by_shard.values())
    assert len(chosen) >= 2
    base = {name: np.array(weights_of(api, name)) for name in chosen}
    base_version = {name: api.get(f"/models/{name}").json()["version"] for name in chosen}
    answers: list[tuple[str, list[int], int, dict[str, Any]]] = []
    failures: list[str] = []
    lock = threading.Lock()

    def run(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=str(api.base_url), timeout=30) as c:
            for _ in range(40):
                name = rng.choice(chosen)
                x = [rng.randint(-3, 3) for _ in range(D)]
                label = rng.choice([-1, 1])
                r = c.post("/learn", json={"model": name, "features": x, "label": label})
                with lock:
                    if r.status_code == 200:
                        answers.append((name, x, label, r.json()))
                    else:
                        failures.append(r.text)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []
    assert len(answers) == 8 * 40
    for name in chosen:
        mine = [a for a in answers if a[0] == name]
        expected = base[name].copy()
        for _, x, label, body in mine:
            if body["updated"]:
                expected += update_vector(x, label)
        assert weights_of(api, name) == expected.tolist()
        versions = sorted(b["version"] for _, _, _, b in mine if b["updated"])
        start = base_version[name]
        assert versions == list(range(start + 1, start + len(versions) + 1))
        info = api.get(f"/models/{name}").json()
        assert info["version"] == start + len(versions)
        # Compaction ran: the log holds fewer entries than the model has updates.
        with cluster.node(cluster.slot_owner(cluster.keyslot(ModelKeys(name).log))).client() as c:
            assert c.llen(ModelKeys(name).log) < info["version"]


def test_delete_removes_the_model_from_its_shard(
    cluster: Cluster, api: httpx.Client, models: list[str]
) -> None:
    name = models[-1]
    keys = ModelKeys(name)
    owner = cluster.slot_owner(cluster.keyslot(keys.meta))
    assert keys.meta in cluster.keys_on(owner, f"pcp:{{{name}}}:*")
    r = api.delete(f"/models/{name}")
    assert r.status_code == 204, r.text
    assert api.get(f"/models/{name}").status_code == 404
    assert api.delete(f"/models/{name}").status_code == 404
    assert cluster.keys_on(owner, f"pcp:{{{name}}}:*") & {keys.meta, keys.log, keys.snap} == set()
    listed = {m["name"] for m in api.get("/models").json()["models"]}
    assert name not in listed
    # The name can be used again, from scratch.
    again = api.put(f"/models/{name}", json={"classes": [-1, 1], "n_features": D})
    assert again.status_code == 201
    assert weights_of(api, name) == [0.0] * (D + 1)


def test_a_model_its_shard_could_not_make_is_not_left_listed(
    cluster: Cluster, api: httpx.Client
) -> None:
    """The registry lives on another shard than a model, so PUT lists the name first; when the
    model's shard then refused to make it (full), the name stayed listed with no model, and
    read as a lost model (model_state_lost) until deleted by hand."""
    registry = cluster.slot_owner(cluster.keyslot(REGISTRY))
    name = next(
        f"full{i}"
        for i in range(1000)
        if cluster.slot_owner(cluster.keyslot(ModelKeys(f"full{i}").meta)) != registry
    )
    owner = next(
        n
        for n in cluster.nodes
        if n.port == cluster.slot_owner(cluster.keyslot(ModelKeys(name).meta))
    )
    with owner.client() as c:
        c.config_set("maxmemory", 1)  # every write on that shard is refused: OOM
        try:
            r = api.put(f"/models/{name}", json={"classes": [-1, 1], "n_features": D})
            assert (r.status_code, r.json()["code"]) == (503, "store_full"), r.text
        finally:
            c.config_set("maxmemory", 0)
    listed = {m["name"] for m in api.get("/models").json()["models"]}
    assert name not in listed
    assert api.get(f"/models/{name}").json()["code"] == "model_not_found"
    r = api.put(f"/models/{name}", json={"classes": [-1, 1], "n_features": D})
    assert r.status_code == 201, r.text
    assert api.delete(f"/models/{name}").status_code == 204


def test_metrics_read_every_shard(cluster: Cluster, api: httpx.Client, models: list[str]) -> None:
    """/metrics on a cluster: Redis's memory of each master, and the pending bytes of models
    on every shard, each as its own shard counts them."""
    waiting = models[20:26]
    for name in waiting:
        r = api.post("/predict", json={"model": name, "features": [1, 0, 0, 1]})
        assert r.status_code == 200, r.text
    s = samples(api.get("/metrics").text)
    assert s[("perceptron_ready", ())] == 1
    used = {dict(k[1])["node"]: v for k, v in s.items() if k[0].endswith("memory_used_bytes")}
    assert set(used) == {f"127.0.0.1:{n.port}" for n in cluster.nodes}
    assert all(v > 0 for v in used.values())
    shards = set()
    for name in waiting:
        key = ModelKeys(name).pend
        port = cluster.slot_owner(cluster.keyslot(key))
        shards.add(port)
        with cluster.node(port).client() as c:
            stored = int(c.hget(key, "bytes") or 0)
        assert stored > 0
        assert s[("perceptron_model_pending_bytes", (("model", name),))] == stored
    assert len(shards) > 1
