"""A worker (its models, replicas and learning) and the store, driven directly on the
embedded store (fakeredis).

The paths the API reaches only when something goes wrong at the wrong moment: a model that
moves under every attempt, a writer's hold on feedback, a compaction that fails, a store whose
condition changes, a task that loses its cancellation, and how the store is opened.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import numpy as np
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import BusyLoadingError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.admin.models import Models
from service.admin.worker import Worker
from service.contract.names import PredictionId
from service.engine.replicas import MOST_ATTEMPTS
from service.errors import (
    InvalidInput,
    PredictionNotFound,
    ServiceError,
    StaleModel,
    Unavailable,
)
from service.settings import Settings
from service.store import ModelKeys, NotSent, Store
from service.store.connect import (
    ReadyConnectionPool,
    WaitingConnectionPool,
    open_client,
    open_store,
)
from service.store.ops import WAITED

from .inprocess import InProcessService, fake_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def engines(fake_redis: fakeredis.FakeServer) -> AsyncIterator[Any]:
    """make(**settings) -> a Worker on the test's store; all closed at the end."""
    made: list[Worker] = []

    def make(**overrides: Any) -> Worker:
        settings = Settings(**{"auth": False, **overrides})
        engine = Worker(Store(fakeredis.FakeAsyncRedis(server=fake_redis), embedded=True), settings)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await engine.close()
        await engine.store.close()


async def test_a_learn_on_a_model_that_moves_under_every_attempt_is_model_busy(
    engines: Any,
) -> None:
    a, b = engines(learn_attempts=1), engines()
    await a.models.create_model("m", {"n_features": 2})
    await a.learning.predict("m", [[1.0, 0.0]])  # a's replica, at version 0
    await b.learning.learn("m", [[1.0, 1.0]], [1])  # the model moves on, elsewhere
    with pytest.raises(Unavailable, match="changed under every one of 1 attempts") as e:
        await a.learning.learn("m", [[0.0, 1.0]], [1])
    assert e.value.code == "model_busy"
    assert list(await a.learning.learn("m", [[0.0, 1.0]], [1])) == [
        (1, False, False, 1)
    ]  # caught up


async def test_feedback_waits_while_the_writer_holds_the_model(engines: Any) -> None:
    engine = engines(learn_wait_s=0.05)
    await engine.models.create_model("m", {"n_features": 2})
    _, preds = await engine.learning.predict("m", [[1.0, 0.0], [0.0, 1.0]])
    hold = ModelKeys("m").hold
    await engine.store.client.set(hold, "1", px=30)  # a writer's commit, 30 ms
    first = await engine.learning.submit_feedback([(PredictionId.parse(preds[0].prediction_id), 1)])
    assert first[0].version == 1
    await engine.store.client.set(hold, "1", px=5_000)  # a writer that died holding it
    with pytest.raises(Unavailable, match="stayed held") as e:
        await engine.learning.submit_feedback([(PredictionId.parse(preds[1].prediction_id), 1)])
    assert e.value.code == "model_busy"


async def test_an_empty_batch_from_python_is_refused_before_anything_is_stored(
    engines: Any,
) -> None:
    """The HTTP schemas ask for one example at least; the learning layer says so itself to
    its callers in Python, for either form of a batch."""
    engine = engines()
    await engine.models.create_model("m", {"n_features": 2})
    empty: list[float] | np.ndarray
    for empty in ([], np.zeros(0)):
        for call in (
            engine.learning.predict("m", empty),
            engine.learning.learn("m", empty, []),
        ):
            with pytest.raises(InvalidInput, match="At least one example") as e:
                await call
            assert e.value.code == "empty_batch"
    _, meta = await engine.models.read_model("m")
    assert meta["version"] == "0"


async def test_feedback_with_ids_that_cannot_be_ids_is_not_found_item_by_item(
    engines: Any,
) -> None:
    engine = engines()
    await engine.models.create_model("m", {"n_features": 2})
    _, (pred,) = await engine.learning.predict("m", [[1.0, 0.0]])
    ok, garbage, gone = await engine.learning.submit_feedback(
        [
            (PredictionId.parse(pred.prediction_id), 1),
            (PredictionId.parse("m:{x}:AAAAAAAAAAAAAAAA"), 1),
            (PredictionId("gone", "A" * 16), 1),
        ]
    )
    assert not isinstance(ok, ServiceError) and ok.version == 1
    assert isinstance(garbage, PredictionNotFound) and isinstance(gone, PredictionNotFound)


async def test_an_export_of_a_model_that_keeps_changing_is_model_busy(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engines(learn_attempts=3)
    await engine.models.create_model("m", {"n_features": 2})
    read_meta = engine.store.read_meta

    async def moving(name: str) -> dict[str, str] | None:
        meta = await read_meta(name)
        return None if meta is None else {**meta, "version": str(int(meta["version"]) + 1)}

    monkeypatch.setattr(engine.store, "read_meta", moving)
    with pytest.raises(Unavailable, match="kept changing") as e:
        await engine.models.export_model("m")
    assert e.value.code == "model_busy"


async def test_a_model_replaced_under_every_attempt_is_model_busy(
    engines: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engines()
    await engine.models.create_model("m", {"n_features": 2})
    replicas = []

    async def replaced(name: str, *args: Any, **kwargs: Any) -> Any:
        replicas.append(engine.replicas.peek(name))
        raise StaleModel(name)  # a new epoch each time: deleted and created again

    monkeypatch.setattr(engine.store, "commit_predictions", replaced)
    with pytest.raises(Unavailable, match="replaced under every attempt for 10 s") as e:
        await engine.learning.predict("m", [[1.0, 0.0]])
    assert e.value.code == "model_busy" and engine.replicas.kept_models() == []
    # (at most MOST_ATTEMPTS, a fresh replica each time: within 10 s, all of them)
    assert len(replicas) == MOST_ATTEMPTS and len({id(r) for r in replicas}) == MOST_ATTEMPTS


async def test_a_compaction_that_fails_is_logged_and_hurts_no_request(
    engines: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engines(compact_every=2)
    await engine.models.create_model("m", {"n_features": 2})

    async def broken(*args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("no room")

    monkeypatch.setattr(engine.store, "compact", broken)
    for i in range(4):
        assert (await engine.learning.learn("m", [[1.0, float(i)]], [(-1) ** i]))[0][1] is True
    await asyncio.sleep(0.01)
    assert "compacting model 'm' failed" in caplog.text
    assert not engine.replicas._compacting  # to be tried again at the next commit
    monkeypatch.undo()
    await engine.learning.learn("m", [[1.0, 5.0]], [1])
    await asyncio.sleep(0.01)
    snapv = await engine.store.client.hget(ModelKeys("m").meta, "snapv")
    assert int(snapv) > 0


async def test_a_read_that_compaction_moved_is_read_again(engines: Any) -> None:
    engine = engines(compact_every=1000)
    await engine.models.create_model("m", {"n_features": 2})
    for i in range(6):
        await engine.learning.learn("m", [[1.0, float(i)]], [(-1) ** i])
    rep = await engine.replicas.current("m")
    data = rep.weights
    from service.learner.codec import pack_weights

    assert await engine.store.compact(
        "m", epoch=rep.epoch, version=data.version, data=pack_weights(data), now_ms=0,
        keep=True, every=10, every_ms=1000,
    )  # fmt: skip
    # a reader that believed the snapshot older reads again, at the snapshot's version
    got = await engine.store.read_log(ModelKeys("m"), 2, snapv=0)
    assert (got.base, got.version, got.snapshot is not None) == (6, 6, True)
    assert got.entries == []


async def test_the_store_check_logs_when_serving_stops_and_resumes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "perceptron")
    settings = Settings(auth=False, default_model=False, store_check_s=0.01)
    service = InProcessService(settings, embedded=False, threaded=True).start()
    try:
        engine = service.worker.models

        def condition() -> str | None:
            code: str | None = engine.condition.code
            return code

        service.redis_info["maxmemory_policy"] = "allkeys-random"
        await _until(lambda: condition() == "store_evicts_keys")
        service.redis_info["maxmemory_policy"] = "noeviction"
        await _until(lambda: condition() is None)
    finally:
        service.stop()
    assert "the store cannot serve models (store_evicts_keys)" in caplog.text
    assert "the store serves models again (store_evicts_keys is over)" in caplog.text


async def _until(check: Any, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_closing_ends_a_task_that_lost_its_cancellation() -> None:
    catalog = Models(Store(fakeredis.FakeAsyncRedis(server=fake_server())), Settings(auth=False))
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            swallowed.set()  # as asyncio.wait_for may on Python 3.11
        await asyncio.sleep(10)

    task = asyncio.create_task(stubborn())
    catalog._tasks.add(task)
    await asyncio.sleep(0)
    await asyncio.wait_for(catalog.close(), 2)
    assert swallowed.is_set() and task.cancelled()
    await catalog.store.close()


# --- opening the store -------------------------------------------------------------------------


async def test_each_embedded_store_is_a_store_of_its_own() -> None:
    one, two = open_store(Settings(auth=False)), open_store(Settings(auth=False))
    assert one.embedded and two.embedded
    await one.client.set("k", "1")
    assert await two.client.get("k") is None
    await one.close()
    await two.close()


async def test_a_url_opens_the_client_its_scheme_names() -> None:
    plain = open_client(Settings(redis_url="redis://127.0.0.1:1/0", redis_timeout_s=0.5))
    assert isinstance(plain, Redis) and isinstance(plain.connection_pool, ReadyConnectionPool)
    kwargs = plain.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["health_check_interval"]) == (0.5, 1)
    assert not open_store(Settings(redis_url="redis://127.0.0.1:1/0")).embedded
    await plain.aclose()
    for settings in (
        Settings(redis_url="redis+cluster://127.0.0.1:1"),
        Settings(redis_url="redis://127.0.0.1:1", redis_cluster=True),
    ):
        assert isinstance(open_client(settings), RedisCluster)  # connects at its first command


class _Connection:
    """A pooled connection as ReadyConnectionPool sees it."""

    is_connected = True  # (so connecting again loads no scripts: tests/test_writers.py does)

    def __init__(self, failures: list[BaseException | bool]) -> None:
        self.failures = failures  # per attempt: raise it, or whether data is waiting
        self.disconnects = 0

    async def connect(self) -> None:
        pass

    async def can_read(self) -> bool:
        failure = self.failures.pop(0)
        if isinstance(failure, BaseException):
            raise failure
        return failure

    async def check_health(self) -> None:
        pass

    async def disconnect(self) -> None:
        self.disconnects += 1


async def test_a_pooled_connection_is_replaced_once_when_it_is_dead() -> None:
    pool = ReadyConnectionPool()
    closed_by_server = _Connection([True, False])
    await pool.ensure_connection(closed_by_server)  # type: ignore[arg-type]
    assert closed_by_server.disconnects == 1
    # What fails here fails before any command was written: NotSent, a command that did
    # not run (a 503 that invites a retry, even for /learn).
    reset = _Connection([RedisConnectionError("reset"), RedisConnectionError("refused")])
    with pytest.raises(NotSent, match="refused"):
        await pool.ensure_connection(reset)  # type: ignore[arg-type]
    slow = _Connection([RedisTimeoutError("slow")])
    with pytest.raises(NotSent, match="slow") as raised:  # not waited for twice
        await pool.ensure_connection(slow)  # type: ignore[arg-type]
    assert isinstance(raised.value.__cause__, RedisTimeoutError)
    assert slow.disconnects == 0
    await pool.disconnect()


class _NewConnection(_Connection):
    """A connection not yet connected: connecting it sends its commands, then reads
    ``replies`` (an exception: an error reply, raised)."""

    is_connected = False

    def __init__(self, replies: list[object]) -> None:
        super().__init__([False, False])
        self.replies = replies
        self.sent: list[tuple[Any, ...]] = []

    async def connect(self) -> None:
        self.is_connected = True

    async def disconnect(self) -> None:
        await super().disconnect()
        self.is_connected = False

    def pack_commands(self, commands: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return commands

    async def send_packed_command(self, commands: list[tuple[Any, ...]]) -> None:
        self.sent.extend(commands)

    async def read_response(self) -> object:
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply


async def test_a_new_connection_loads_the_scripts_sent_behind_a_wait_first() -> None:
    pool = ReadyConnectionPool()
    fresh = _NewConnection(["its digest"] * len(WAITED))
    await pool.ensure_connection(fresh)  # type: ignore[arg-type]
    assert fresh.sent == [("SCRIPT", "LOAD", s.lua) for s in WAITED]
    assert {s.name for s in WAITED} == {"handoff", "take", "feedback"}
    await pool.ensure_connection(fresh)  # type: ignore[arg-type]
    assert len(fresh.sent) == len(WAITED)  # connected: nothing loaded again
    # A load refused (Redis loading its data, twice): nothing of the caller's command was
    # written (NotSent), and the connection is not pooled connected with replies unread.
    loading = BusyLoadingError("LOADING")
    refused = _NewConnection([loading, loading])
    with pytest.raises(NotSent, match="LOADING"):
        await pool.ensure_connection(refused)  # type: ignore[arg-type]
    assert not refused.is_connected and len(refused.sent) == 2 * len(WAITED)  # replaced once
    denied = _NewConnection([ResponseError("NOPERM")])
    with pytest.raises(NotSent, match="NOPERM"):
        await pool.ensure_connection(denied)  # type: ignore[arg-type]
    assert not denied.is_connected and len(denied.sent) == len(WAITED)  # not replaced
    await pool.disconnect()
    # The embedded store's pool loads them too.
    embedded = _NewConnection(["its digest"] * len(WAITED))
    await WaitingConnectionPool().ensure_connection(embedded)  # type: ignore[arg-type]
    assert embedded.sent == [("SCRIPT", "LOAD", s.lua) for s in WAITED]
