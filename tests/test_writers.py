"""One model, many writers: real worker processes learn one model, none fails, none is lost.

By default (PERCEPTRON_ONE_WRITER=true) every /learn is learned by the model's writer
(service/engine/writer.py); the other workers hand their examples to it. With integer features and a
binary model (learning rate 1, margin 0), the weights must be exactly the sum of ``y * x`` over
the examples the answers said updated.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import signal
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import numpy as np
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from service.admin.worker import Worker
from service.cli.loopback import wait_until
from service.contract.learn_wire import NOT_QUEUED_ANSWER, Labelled, pack_request, unpack_answer
from service.contract.store_protocol import REQUEST_INLINE
from service.contract.store_values import LearnResult
from service.engine.sequence import learning_ms, run_sequence
from service.engine.writer import LEASE_MS, MOST_WAITING
from service.errors import NotWriter, OutcomeUnknown, Unavailable
from service.learner import ModelConfig, Weights
from service.learner.features import encode, encode_matrix
from service.settings import MIN_REDIS_TIMEOUT_S, Settings
from service.store import ModelKeys, StoreError, open_store

from .handover_calls import hand_off, take
from .servers import RedisServer, ServiceProcess, running

D = 4


def test_eight_workers_and_eight_writers_on_one_model_all_succeed_exactly(
    redis_url: str,
) -> None:
    # No contention to retry against: one spare attempt for the writer's first commit after
    # it took the lease over (its copy may be behind the previous writer's last commit).
    service = ServiceProcess(
        redis_url,
        workers=8,
        PERCEPTRON_COMPACT_EVERY="200",
        PERCEPTRON_LEARN_ATTEMPTS="2",
    )
    with running(service), httpx.Client(base_url=service.url, timeout=60) as c:
        assert c.put("/models/m", json={"n_features": D}).status_code == 201
        answers: list[tuple[list[list[int]], list[int], dict[str, Any]]] = []
        failures: list[str] = []
        lock = threading.Lock()

        def writer(seed: int) -> None:
            rng = random.Random(seed)
            with httpx.Client(base_url=service.url, timeout=60) as w:
                for i in range(24):
                    n = 1 if i % 2 else rng.randint(2, 40)
                    xs = [[rng.randint(-3, 3) for _ in range(D)] for _ in range(n)]
                    ys = [rng.choice([-1, 1]) for _ in range(n)]
                    if n == 1:
                        r = w.post("/learn", json={"model": "m", "features": xs[0], "label": ys[0]})
                    else:
                        r = w.post(
                            "/learn/batch", json={"model": "m", "features": xs, "labels": ys}
                        )
                    with lock:
                        if r.status_code != 200:
                            failures.append(f"{r.status_code} {r.text}")
                        else:
                            answers.append((xs, ys, r.json()))

        threads = [threading.Thread(target=writer, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == []
        assert len(answers) == 8 * 24

        w, b, updates, examples, versions = np.zeros(D), 0.0, 0, 0, []
        for xs, ys, a in answers:
            updated = a["updated"] if isinstance(a["updated"], list) else [a["updated"]]
            examples += len(xs)
            versions.append(a["version"])
            for x, y, u in zip(xs, ys, updated, strict=True):
                if u:
                    w += y * np.array(x, dtype=float)
                    b += y
                    updates += 1
        info = c.get("/models/m").json()
        assert info["version"] == updates == max(versions)
        assert info["counters"]["learned"] == examples
        weights = c.get("/models/m/weights").json()
        assert weights["rows"][0]["weights"] == w.tolist()
        assert weights["rows"][0]["bias"] == b
        # Requests were handed over: the model had one writer, and its queue is empty.
        with redis.Redis.from_url(redis_url) as r:
            assert r.llen("pcp:{m}:learns") == 0


def test_a_learn_on_an_idle_model_needs_no_writer_to_be_running(redis_url: str) -> None:
    """Each worker can become the writer; the lease is given up when the model goes idle."""
    service = ServiceProcess(redis_url, workers=2, PERCEPTRON_ONE_WRITER="true")
    with running(service), httpx.Client(base_url=service.url, timeout=30) as c:
        c.put("/models/m", json={"n_features": 2})
        for _ in range(2):
            r = c.post("/learn", json={"model": "m", "features": [1, 0], "label": 1})
            assert r.status_code == 200
        with redis.Redis.from_url(redis_url) as r:
            wait_until(lambda: not r.exists("pcp:{m}:writer"), what="the lease to be given up")


@pytest.mark.parametrize("kind", ["dense", "named", "multiclass-averaged"])
def test_learns_handed_to_the_writer_answer_as_learned_there(redis_url: str, kind: str) -> None:
    """A hand-off carries every kind of example and answers labels, mistakes and versions
    exactly as a sequential perceptron would: compare with one worker learning alone."""
    specs: dict[str, dict[str, Any]] = {
        "dense": {"n_features": 3},
        "named": {"hash_bits": 10},
        "multiclass-averaged": {"classes": ["a", "b", "c"], "n_features": 3, "averaged": True},
    }
    spec = specs[kind]
    classes = spec.get("classes", [-1, 1])
    rng = random.Random(3)
    batches = []
    for _ in range(12):
        n = rng.randint(1, 15)
        if kind == "named":
            xs: list[Any] = [{f"f{rng.randint(0, 30)}": rng.randint(-2, 2) or 1} for _ in range(n)]
        else:
            xs = [[rng.randint(-3, 3) for _ in range(3)] for _ in range(n)]
        batches.append((xs, [rng.choice(classes) for _ in range(n)]))

    def run(workers: int) -> list[Any]:
        with redis.Redis.from_url(redis_url) as r:
            r.flushall()
        service = ServiceProcess(redis_url, workers=workers, PERCEPTRON_ONE_WRITER="true")
        out = []
        with running(service), httpx.Client(base_url=service.url, timeout=30) as c:
            c.put("/models/m", json=spec)
            if workers > 1:  # a lease held by another process: every request is handed off
                with redis.Redis.from_url(redis_url) as r:
                    r.set("pcp:{m}:writer", "elsewhere", px=1000)  # lapses: a worker takes over
            for xs, ys in batches:
                resp = c.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys})
                assert resp.status_code == 200, resp.text
                out.append(resp.json())
            out.append(c.get("/models/m/weights").json())
        return out

    assert run(2) == run(1)


def test_a_batch_that_takes_longer_to_learn_than_the_lease_is_learned_by_its_writer(
    redis_url: str,
) -> None:
    """The largest batch of the largest model that learns through update plans (AROW, one
    against the rest, 1,000 classes): its writer learns it for longer than its lease lasts,
    off the event loop, which renews the lease meanwhile (it lost it every time before, and
    the request failed 503 model_busy); the answer is the sequence's, exactly."""
    spec: dict[str, Any] = {"algorithm": "arow", "multiclass": "ovr", "classes": list(range(1000))}
    config = ModelConfig(n_features=100, **spec)
    rng = np.random.default_rng(5)
    xs = rng.normal(size=(1000, 100)).round(3).tolist()
    ys = rng.integers(1000, size=1000).tolist()
    examples = [encode(config, x) for x in xs]
    assert learning_ms(config, examples) > 4 * LEASE_MS
    expected = run_sequence(config, "0" * 16, Weights.zeros(config), xs=examples, ts=ys)
    service = ServiceProcess(redis_url, workers=2, PERCEPTRON_DEFAULT_MODEL="false")
    with running(service), httpx.Client(base_url=service.url, timeout=60) as c:
        assert c.put("/models/m", json={"n_features": 100, **spec}).status_code == 201
        r = c.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys})
        assert r.status_code == 200, r.text
        assert r.json()["labels"] == expected.served
        assert r.json()["updated"] == expected.updated
        assert c.get("/models/m").json()["version"] == sum(expected.updated)


def test_a_wide_model_that_retrains_at_many_drifts_of_one_batch_learns_it(
    redis_url: str,
) -> None:
    """2^24 buckets, a detector that drifts every few examples: a batch of 200 retrains tens of
    times, and each retrain starts a learner of 16 million weights afresh and copies it. Its
    cost was estimated from the examples alone, so it was learned on the event loop, for
    seconds: its writer lost its lease under every try (503 model_busy, nothing learned)."""
    spec = {"detector": "ddm", "on_drift": "retrain", "warm_start": 1,
            "warning_threshold": 0.1, "drift_threshold": 0.1}  # fmt: skip
    rng = np.random.default_rng(0)
    xs = [{f"w{i}": 1.0 for i in rng.integers(1000, size=2)} for _ in range(200)]
    ys = (rng.integers(0, 2, 200) * 2 - 1).tolist()
    service = ServiceProcess(redis_url, workers=2, PERCEPTRON_DEFAULT_MODEL="false")
    with running(service), httpx.Client(base_url=service.url, timeout=60) as c:
        body = {"hash_bits": 24, "drift": spec}
        assert c.put("/models/m", json=body).status_code == 201
        r = c.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys})
        assert r.status_code == 200, r.text
        counters = c.get("/models/m").json()["counters"]
    assert counters["learned"] == 200 and counters["retrains"] > 20


def test_with_one_writer_off_each_worker_commits_its_own(redis_url: str) -> None:
    service = ServiceProcess(redis_url, workers=2, PERCEPTRON_ONE_WRITER="false")
    with running(service), httpx.Client(base_url=service.url, timeout=30) as c:
        c.put("/models/m", json={"n_features": 2})
        with redis.Redis.from_url(redis_url) as r:
            for _ in range(20):
                resp = c.post("/learn", json={"model": "m", "features": [1, 0], "label": -1})
                assert resp.status_code == 200
                assert not r.exists("pcp:{m}:writer")
        assert c.get("/models/m").json()["counters"]["learned"] == 20


# -- a writer that dies or lapses: every handed-off request learned once, or refused -------


def _worker(redis_url: str, **overrides: Any) -> Worker:
    settings = Settings(redis_url=redis_url, one_writer=True, default_model=False, **overrides)
    return Worker(open_store(settings), settings)


async def _close(*workers: Worker) -> None:
    for worker in workers:
        await worker.close()
        await worker.store.close()


@asynccontextmanager
async def _another_writes(redis_url: str) -> AsyncIterator[tuple[Any, Any]]:
    """A worker's store and its replica of a new model "m" whose lease "writer", another
    worker, holds: a hand-over from this worker queues its request for "writer" to take."""
    worker = _worker(redis_url)
    try:
        await worker.models.create_model("m", {"n_features": D})
        rep = await worker.replicas.get("m")
        assert await worker.store.claim_writer("m", "writer", 60_000) == 0
        yield worker.store, rep
        await worker.store.client.delete(ModelKeys("m").writer)
    finally:
        await _close(worker)


def _request(rep: Any) -> tuple[str, bytes]:
    """A hand-over of one example to the model's writer: its token and bytes (a minute to go)."""
    token = secrets.token_urlsafe(16)
    deadline = int(time.time() * 1000) + 60_000
    return token, pack_request(token, deadline, rep.epoch, _examples(rep, 1))


def _examples(rep: Any, n: int) -> Labelled:
    rng = np.random.default_rng(n)
    xs = encode_matrix(rep.config, rng.integers(-3, 4, size=n * D).astype(float))
    return Labelled.of(xs, [int(rng.integers(0, 2)) for _ in xs], "tester")


@pytest.mark.parametrize("first", ["new writer", "lapsed writer"])
def test_a_request_taken_by_two_writers_is_learned_by_the_leases_holder(
    redis_url: str, first: str
) -> None:
    """A writer whose lease lapsed while it held a request, and the worker that took the lease
    over (and the request back to the queue): only the lease's holder commits, whichever
    tries first; the lapsed writer's commit writes nothing (it was learned by whichever
    committed first, and the other's commit left it out)."""

    async def main() -> None:
        lapsed, new = _worker(redis_url), _worker(redis_url)
        store = lapsed.store
        try:
            await lapsed.models.create_model("m", {"n_features": D})
            reps = [await lapsed.replicas.get("m"), await new.replicas.get("m")]
            examples = _examples(reps[0], 7)
            token = secrets.token_urlsafe(16)
            request = pack_request(token, int(time.time() * 1000) + 60_000, reps[0].epoch, examples)
            old_id, new_id = lapsed.learning.writers.me, new.learning.writers.me
            assert await store.claim_writer("m", old_id, 60_000) == 0
            assert not (await hand_off(store, token=token, request=request))[0]
            assert await store.take_learns("m", me=old_id, lease_ms=60_000, most=10) == [request]
            await store.client.delete(ModelKeys("m").writer)  # the lease lapses
            assert await store.claim_writer("m", new_id, 60_000) == 0  # the request goes back
            assert await store.take_learns("m", me=new_id, lease_ms=60_000, most=10) == [request]

            if first == "lapsed writer":
                with pytest.raises(NotWriter):
                    await lapsed.learning.writers.commits.queue(
                        reps[0], examples, [(token, 0, len(examples))]
                    )
            learned = await new.learning.writers.commits.queue(
                reps[1], examples, [(token, 0, len(examples))]
            )
            assert [v for *_, v in learned] != [-1] * 7
            with pytest.raises(NotWriter):
                await lapsed.learning.writers.commits.queue(
                    reps[0], examples, [(token, 0, len(examples))]
                )

            meta = await store.client.hgetall(ModelKeys("m").meta)
            assert int(meta[b"learned"]) == 7
            k = ModelKeys("m")
            assert await store.client.llen(k.answer(token)) == 1
            assert await store.client.hlen(k.reqs) == 0
            assert await store.client.scard(k.taken) == 0
            answer = await store.client.lpop(k.answer(token))
            assert isinstance(answer, bytes)
            served, updated, _ = unpack_answer(answer)
            assert updated == [u for _, _, u, _ in learned]
            await store.client.delete(k.writer)
        finally:
            await _close(lapsed, new)

    asyncio.run(main())


def test_feedback_held_by_the_writer_is_woken_by_its_commit(redis_url: str) -> None:
    """Feedback that finds the model held by its writer (its commit found the model moved and
    catches up) waits to be woken by the commit that lets go: the hold counts the feedback
    calls that found it, and that commit pushes one wake-up for each (feedback polled every
    5 ms before). The call is sent again behind its wait, in one round trip, so it is applied
    as soon as it is woken."""
    from service.contract.names import PredictionId
    from service.contract.store_values import Held, SyncData
    from service.engine.feedback_answers import Feedback
    from service.engine.learning import HOLD_WAIT_S

    async def main() -> None:
        a, b = _worker(redis_url), _worker(redis_url)
        k = ModelKeys("m")
        try:
            await a.models.create_model("m", {"n_features": D})
            rep = await a.replicas.current("m")  # (loaded: the feedback below moves it)
            assert await a.store.claim_writer("m", a.learning.writers.me, 60_000) == 0
            _, made = await b.learning.predict("m", [[1, 0, 0, 0], [0, 1, 0, 0]])
            ids = [PredictionId.parse(p.prediction_id) for p in made]
            wrong = [-1 if p.label == 1 else 1 for p in made]
            # The first feedback moves the model under the writer's copy.
            (first,) = await b.learning.submit_feedback([(ids[0], wrong[0])])
            assert isinstance(first, Feedback) and first.updated
            real = a.store.commit_learn
            seen: dict[str, Any] = {}

            async def commit(*args: Any, **kwargs: Any) -> Any:
                result = await real(*args, **kwargs)
                if isinstance(result, SyncData) and "held" not in seen:
                    seen["held"] = asyncio.create_task(
                        b.learning.submit_feedback([(ids[1], wrong[1])])
                    )
                    for _ in range(500):  # the feedback found the hold, and counted itself
                        if await a.store.client.get(k.hold) == b"2":
                            break
                        await asyncio.sleep(0.01)
                    assert not seen["held"].done()
                return result

            calls: list[tuple[float, bool]] = []  # each feedback call: its wait, whether held
            real_feedback = b.store.commit_feedback

            async def commit_feedback(*args: Any, **kwargs: Any) -> Any:
                got = await real_feedback(*args, **kwargs)
                calls.append((kwargs["wait_s"], isinstance(got, Held)))
                return got

            a.store.commit_learn = commit  # type: ignore[method-assign]
            b.store.commit_feedback = commit_feedback  # type: ignore[method-assign]
            learned = await a.learning.writers.commits.queue(rep, _examples(rep, 3))
            assert len(learned) == 3
            (second,) = await seen["held"]
            # Held once, then sent behind a wait that the commit woke (a wait that ran out
            # first would have found the hold again: a third call).
            assert [held for _, held in calls] == [True, False]
            assert calls[0][0] == 0 and 0 < calls[1][0] <= HOLD_WAIT_S
            assert await a.store.client.llen(k.wake) == 0  # its wake-up taken
            assert isinstance(second, Feedback) and second.updated
            assert await a.store.client.exists(k.hold) == 0
            await a.store.client.delete(k.writer)
        finally:
            await _close(a, b)

    asyncio.run(main())


def test_feedback_arriving_while_a_call_is_held_waits_in_redis_too(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's feedback for one model that arrives while its last call waits on the
    writer's hold is sent at once (FEEDBACK_IN_FLIGHT), and counted in the hold, rather than
    queued behind it: both are applied at the one wake-up of the commit that lets go."""
    from service.contract.names import PredictionId
    from service.engine import learning as learning
    from service.engine.feedback_answers import Feedback
    from service.engine.learning import FEEDBACK_IN_FLIGHT

    assert FEEDBACK_IN_FLIGHT == 2
    # A held call waits 1.5 s (under the 2 s of a Redis call) before it looks again: the
    # hold counts each call once in the first 0.75 s.
    monkeypatch.setattr(learning, "HOLD_WAIT_S", 1.5)

    async def main() -> None:
        b = _worker(redis_url)
        k = ModelKeys("m")
        try:
            await b.models.create_model("m", {"n_features": D})
            _, made = await b.learning.predict("m", [[1, 0, 0, 0], [0, 1, 0, 0]])
            ids = [PredictionId.parse(p.prediction_id) for p in made]
            await b.store.client.set(k.hold, "1", px=60_000)  # a writer's stale commit's
            calls = []
            for i, held in zip(ids, (b"2", b"3"), strict=True):  # one call, then the other
                calls.append(asyncio.create_task(b.learning.submit_feedback([(i, 1)], "t")))
                for _ in range(75):  # it found the hold and counted itself in it
                    if await b.store.client.get(k.hold) == held:
                        break
                    await asyncio.sleep(0.01)
                assert await b.store.client.get(k.hold) == held
            assert not any(c.done() for c in calls)
            # What the commit that lets go does (ops/learn.py): the hold goes, a wake-up each.
            async with b.store.client.pipeline(transaction=True) as pipe:
                pipe.delete(k.hold)
                pipe.rpush(k.wake, "1", "1")
                await pipe.execute()
            answers = [a for c in calls for a in await c]
            assert all(isinstance(a, Feedback) and a.updated for a in answers)
            assert sorted(a.version for a in answers if isinstance(a, Feedback)) == [1, 2]
        finally:
            await _close(b)

    asyncio.run(main())


@pytest.mark.parametrize("averaged", [False, True])
def test_feedback_that_cannot_make_the_writers_commit_stale_goes_through_its_hold(
    redis_url: str, averaged: bool
) -> None:
    """While the writer holds the model (its commit found the model moved), feedback that would
    update the weights waits; feedback that would not (the prediction was right, a duplicate,
    an unknown id) is applied at once, since the writer's commit of a model that is not
    averaged is guarded by the version alone. An averaged model's commit is guarded by the
    count of examples seen too: there every fresh label waits."""
    from service.contract.names import PredictionId
    from service.contract.store_protocol import Status
    from service.contract.store_values import FeedbackBatch, Held
    from service.engine.feedback_answers import Feedback
    from service.engine.learn_commits import time_bucket

    async def main() -> None:
        b = _worker(redis_url)
        k = ModelKeys("m")
        try:
            await b.models.create_model("m", {"n_features": D, "averaged": averaged})
            rep = await b.replicas.get("m")
            _, made = await b.learning.predict("m", [[1, 0, 0, 0]])
            (taught,) = await b.learning.submit_feedback(
                [(PredictionId.parse(made[0].prediction_id), 1)]
            )
            assert isinstance(taught, Feedback) and taught.updated  # the weights: x, bias 1
            _, made = await b.learning.predict("m", [[2, 0, 0, 0]] * 3)
            assert [p.label for p in made] == [1, 1, 1]  # served right for label 1
            ids = [PredictionId.parse(p.prediction_id) for p in made]
            right, wrong, other = (i.token for i in ids if i is not None)
            # As a writer's stale commit leaves it (ops/learn.py): held, no feedback waiting.
            await b.store.client.set(k.hold, "1", px=60_000)

            async def send(tokens: list[str], labels: list[int]) -> FeedbackBatch | Held:
                return await b.store.commit_feedback(
                    "m",
                    epoch=rep.epoch,
                    tokens=tokens,
                    labels=labels,
                    when=time_bucket(b.settings, time.time()),
                    life_s=rep.config.feedback_ttl_s,
                    source="tester",
                    now_ms=int(time.time() * 1000),
                    averaged=averaged,
                )

            version = int(await b.store.client.hget(k.meta, "version") or 0)
            # An update waits, whatever else the call holds, and counts itself in the hold.
            assert isinstance(await send([right, wrong], [1, 0]), Held)
            assert await b.store.client.get(k.hold) == b"2"
            went = await send([right, "unknown-token-of-no-one"], [1, 1])
            if averaged:
                assert isinstance(went, Held)  # the count of examples seen would move
                return
            assert isinstance(went, FeedbackBatch)
            assert [i.status for i in went.items] == [Status.DONE, Status.UNKNOWN]
            assert not went.items[0].updated and went.version == version
            again = await send([right], [1])  # a duplicate goes through too
            assert isinstance(again, FeedbackBatch)
            assert again.items[0].status == Status.DUPLICATE
            assert int(await b.store.client.hget(k.meta, "version") or 0) == version
            assert isinstance(await send([other], [0]), Held)
            await b.store.client.delete(k.hold)
            done = await send([wrong, other], [0, 0])  # let go: the updates are applied
            assert isinstance(done, FeedbackBatch)
            assert [i.updated for i in done.items] == [True, True]
            assert done.version == version + 2
        finally:
            await _close(b)

    asyncio.run(main())


# (which of the five predictions, -1 for an unknown id; its label, None for one of no class)
_ITEM = st.tuples(st.integers(-1, 4), st.sampled_from([1, -1, None]))


@settings(max_examples=60, deadline=None)
@given(
    averaged=st.booleans(),
    margin=st.sampled_from([0.0, 0.75]),
    xs=st.lists(st.lists(st.integers(-2, 2), min_size=3, max_size=3), min_size=5, max_size=5),
    before=st.lists(_ITEM, max_size=3),
    call=st.lists(_ITEM, min_size=1, max_size=6),
)
def test_a_held_feedback_call_waits_exactly_when_an_item_would_move_the_writers_guard(
    averaged: bool,
    margin: float,
    xs: list[list[int]],
    before: list[tuple[int, int | None]],
    call: list[tuple[int, int | None]],
) -> None:
    """Generated: predictions with any scores, some answered before, then a call of any mix
    (fresh, answered, repeated, unknown ids, labels of no class) while the writer holds the
    model. It waits exactly when, by the learner's rule, one fresh item would update the
    weights (for an averaged model: when one is fresh at all); else it is applied at once and
    the version does not move (on the embedded store, which runs the same scripts)."""
    from service.contract.names import PredictionId
    from service.contract.store_protocol import Status
    from service.contract.store_values import FeedbackBatch, Held
    from service.engine.learn_commits import time_bucket
    from service.store import Store
    from service.store.connect import embedded_client

    from .inprocess import fake_server

    async def main() -> None:
        own = Settings(redis_url="", default_model=False)
        worker = Worker(Store(embedded_client(fake_server(), own), embedded=True), own)
        try:
            config = {"n_features": 3, "averaged": averaged, "margin": margin}
            await worker.models.create_model("m", config)
            await worker.learning.learn("m", [[1, 0, 0], [0, 2, -1]], [1, -1])
            _, made = await worker.learning.predict("m", xs)
            ids = [PredictionId.parse(p.prediction_id) for p in made]
            tokens = [i.token for i in ids if i is not None]
            scores = [float(p.scores.ravel()[0]) for p in made]  # binary: w.x + b
            rep = await worker.replicas.get("m")

            def token(i: int) -> str:
                return tokens[i] if i >= 0 else "unknown-prediction-token"

            def index(y: int | None) -> int:
                return -1 if y is None else (1 if y == 1 else 0)

            async def send(items: list[tuple[int, int | None]]) -> FeedbackBatch | Held:
                return await worker.store.commit_feedback(
                    "m",
                    epoch=rep.epoch,
                    tokens=[token(i) for i, _ in items],
                    labels=[index(y) for _, y in items],
                    when=time_bucket(own, time.time()),
                    life_s=rep.config.feedback_ttl_s,
                    source="tester",
                    now_ms=int(time.time() * 1000),
                    averaged=averaged,
                )

            answered = set()
            for i, y in before:
                await send([(i, y)])
                if i >= 0 and y is not None:
                    answered.add(i)
            version = int(await worker.store.client.hget(ModelKeys("m").meta, "version") or 0)
            await worker.store.client.set(ModelKeys("m").hold, "1", px=60_000)

            def moves(i: int, y: int | None) -> bool:
                if i < 0 or y is None or i in answered:
                    return False  # unknown, of no class, or a duplicate or conflict
                return averaged or y * scores[i] <= margin  # the perceptron's update rule

            got = await send(call)
            assert isinstance(got, Held) == any(moves(i, y) for i, y in call)
            if isinstance(got, FeedbackBatch):
                assert got.version == version  # (a duplicate answers as its first time did)
                assert not any(i.updated for i in got.items if i.status == Status.DONE)
        finally:
            await worker.close()
            await worker.store.close()

    asyncio.run(main())


def test_a_hand_over_and_a_take_after_redis_forgot_its_scripts_load_them(redis_url: str) -> None:
    """The hand-over and the writer's take send their script with a wait in one pipeline,
    by its digest: when Redis forgets the scripts on a connection that loaded them (SCRIPT
    FLUSH), each is loaded and sent again (it did not run the first time), not answered with
    NOSCRIPT."""

    async def main() -> None:
        async with _another_writes(redis_url) as (store, rep):
            token, request = _request(rep)
            # Each sent once, on connections that loaded them.
            assert await take(store) == []
            other, first = _request(rep)
            await hand_off(store, token=other, request=first, wait_s=0.01)
            assert len(await take(store) or []) == 1
            await store.client.script_flush()
            mine, answer = await hand_off(store, token=token, request=request, wait_s=0.05)
            assert not mine and answer is None
            await store.client.script_flush()
            assert await take(store, wait_s=0.05) == [request]

    asyncio.run(main())


def _long_arguments(entries: list[dict[str, Any]]) -> dict[str, int]:
    """Commands in SLOWLOG entries that carried an argument Redis cut (it keeps 128 bytes of
    each, and says how many more there were), by name: how many."""
    cut = (e["command"] for e in entries if b"more bytes)" in e["command"])
    return dict(Counter(command.split()[0].decode().upper() for command in cut))


@asynccontextmanager
async def _every_command_logged(client: Any) -> AsyncIterator[list[dict[str, Any]]]:
    """SLOWLOG of every command the block sends (restored after), read into the list."""
    before = (await client.config_get("slowlog-log-slower-than"))["slowlog-log-slower-than"]
    await client.config_set("slowlog-log-slower-than", 0)
    await client.slowlog_reset()
    entries: list[dict[str, Any]] = []
    try:
        yield entries
        entries += await client.slowlog_get(1000)
    finally:
        await client.config_set("slowlog-log-slower-than", before)


@pytest.mark.parametrize("past", [0, 1])
def test_a_request_past_the_inline_limit_goes_around_the_scripts(redis_url: str, past: int) -> None:
    """A hand-over of REQUEST_INLINE bytes goes through the hand-over's and the take's
    scripts; one byte more is written by a plain HSET sent ahead of the hand-over's script and
    read by a plain HMGET after the take's: a value a script handles is copied into Lua and
    out again, which for a packed batch cost Redis more than the rest of its hand-over. Either
    way the writer takes exactly the bytes handed over, and the commit finds them where it
    looks."""

    async def main() -> None:
        async with _another_writes(redis_url) as (store, rep):
            token, short = _request(rep)
            request = short + bytes(REQUEST_INLINE + past - len(short))
            assert len(request) == REQUEST_INLINE + past
            k = ModelKeys("m")
            async with _every_command_logged(store.client) as log:
                mine, _ = await hand_off(store, token=token, request=request)
                assert not mine
                assert await store.client.hget(k.reqs, token) == request
                assert await store.take_learns("m", me="writer", lease_ms=60_000, most=10) == [
                    request
                ]
            assert await store.client.smembers(k.taken) == {token.encode()}
            # (SLOWLOG lists the commands a script calls too: the one HSET either way)
            assert _long_arguments(log) == ({"HSET": 1} if past else {"HSET": 1, "EVALSHA": 1})
            reads = [e for e in log if e["command"].startswith(b"HMGET " + k.reqs.encode())]
            assert len(reads) == past

    asyncio.run(main())


def test_a_long_request_its_requester_learns_itself_is_not_left_queued(redis_url: str) -> None:
    """A long request is written before the hand-over's script knows who writes the model:
    when its requester takes the lease (nobody held it), the script deletes what was written,
    as nothing was queued."""

    async def main() -> None:
        worker = _worker(redis_url)
        try:
            await worker.models.create_model("m", {"n_features": D})
            rep = await worker.replicas.get("m")
            token, short = _request(rep)
            request = short + bytes(REQUEST_INLINE)
            mine, answer = await hand_off(worker.store, token=token, request=request, wait_s=0.05)
            k = ModelKeys("m")
            assert mine and answer == NOT_QUEUED_ANSWER
            assert await worker.store.client.get(k.writer) == b"requester"
            assert await worker.store.client.hlen(k.reqs) == 0
            assert await worker.store.client.llen(k.learns) == 0
        finally:
            await _close(worker)

    asyncio.run(main())


def test_a_long_request_withdrawn_as_it_is_taken_is_not_taken(redis_url: str) -> None:
    """A long request is read after the take's script took its token: one its requester
    withdrew in between (its deadline passed) reads as nothing, and is not learned."""

    async def main() -> None:
        async with _another_writes(redis_url) as (store, rep):
            k = ModelKeys("m")
            requests = []
            for _ in range(2):
                token, short = _request(rep)
                requests.append((token, short + bytes(REQUEST_INLINE)))
                await hand_off(store, token=token, request=requests[-1][1])  # fmt: skip
            real = store.client.hmget

            async def withdrawn_first(key: str, fields: list[str]) -> Any:
                assert await store.withdraw_learn("m", requests[0][0], rep.epoch) is None
                return await real(key, fields)

            store.client.hmget = withdrawn_first
            try:
                assert await store.take_learns("m", me="writer", lease_ms=60_000, most=10) == [
                    requests[1][1]
                ]
            finally:
                del store.client.hmget
            assert await store.client.hkeys(k.reqs) == [requests[1][0].encode()]

    asyncio.run(main())


def test_a_long_request_refused_by_a_full_redis_is_not_queued(redis_url: str) -> None:
    """Redis refuses writes when full (maxmemory): the plain write of a long request is
    refused, and its hand-over answers so (a 503 that says to retry); nothing is queued, and
    nothing is left behind."""

    async def main() -> None:
        async with _another_writes(redis_url) as (store, rep):
            k = ModelKeys("m")
            token, short = _request(rep)
            await store.client.config_set("maxmemory", 1)
            try:
                with pytest.raises(StoreError):
                    long = short + bytes(REQUEST_INLINE)
                    await hand_off(store, token=token, request=long, wait_s=0.01)
            finally:
                await store.client.config_set("maxmemory", 0)
            assert await store.client.hlen(k.reqs) == 0
            assert await store.client.llen(k.learns) == 0

    asyncio.run(main())


def test_a_writer_takes_the_next_commits_requests_while_its_commit_runs(redis_url: str) -> None:
    """A busy writer's next commit is ready when the one in flight ends: it takes requests
    meanwhile, up to MOST_WAITING (a writer that took only once its commit had answered
    spent a round trip idle between commits), and each is learned once."""

    async def main() -> None:
        worker = _worker(redis_url)
        try:
            await worker.models.create_model("m", {"n_features": D})
            rep = await worker.replicas.get("m")
            writers = worker.learning.writers
            assert await worker.store.claim_writer("m", "nobody", 60_000) == 0
            total = 3 * MOST_WAITING
            for _ in range(total):  # queued for a holder that takes nothing
                token, request = _request(rep)
                await hand_off(worker.store, token=token, request=request)
            commit, running = worker.store.commit_learn, asyncio.Event()
            sizes: list[int] = []  # handed-over requests each commit learned

            async def slow_commit(*args: Any, **kwargs: Any) -> Any:
                running.set()
                await asyncio.sleep(0.3)
                result = await commit(*args, **kwargs)
                if isinstance(result, LearnResult):
                    sizes.append(len(kwargs["answers"]))  # the answers: one per request
                return result

            worker.store.commit_learn = slow_commit  # type: ignore[method-assign]
            await worker.store.client.set(ModelKeys("m").writer, writers.me, px=60_000)
            writers._start("m")
            await asyncio.wait_for(running.wait(), 5)
            # Taken during the first commit: the second's requests wait for it.
            give_up = time.monotonic() + 0.25
            while writers.commits.waiting("m")[0] < MOST_WAITING:
                assert time.monotonic() < give_up, writers.commits.waiting("m")
                await asyncio.sleep(0.005)
            assert sizes == []
            k = ModelKeys("m")
            give_up = time.monotonic() + 10
            # (the last commit's script empties ``reqs`` before its caller counts its answers)
            while await worker.store.client.hlen(k.reqs) or sum(sizes) < total:
                assert time.monotonic() < give_up, sizes
                await asyncio.sleep(0.01)
            # (a writer waiting for room renews its lease each WAIT_S, taking nothing: a
            # request taken then would make a commit of its own)
            assert sum(sizes) == total and sizes[0] == max(sizes) == MOST_WAITING
            meta = await worker.store.client.hgetall(k.meta)
            assert int(meta[b"learned"]) == total
        finally:
            await _close(worker)

    asyncio.run(main())


def test_a_take_of_none_renews_the_lease_and_leaves_the_queue(redis_url: str) -> None:
    """A writer whose next commits are full renews its lease with a take of no request: one
    it took then would wait for a commit of its own."""

    async def main() -> None:
        async with _another_writes(redis_url) as (store, rep):
            token, request = _request(rep)
            await hand_off(store, token=token, request=request)
            k = ModelKeys("m")
            await store.client.pexpire(k.writer, 1_000)
            assert await store.take_learns("m", me="writer", lease_ms=60_000, most=0) == []
            assert await store.client.pttl(k.writer) > 50_000  # renewed
            assert await store.client.llen(k.learns) == 1  # nothing taken
            assert await store.take_learns("m", me="writer", lease_ms=60_000, most=1) == [request]
            assert (
                await store.take_learns("m", me="other", lease_ms=60_000, most=0) is None
            )  # not its lease

    asyncio.run(main())


def test_a_first_hand_over_and_take_wait_once(redis_url: str) -> None:
    """A store sends a script behind a wait only once Redis holds it: a script Redis did not
    hold failed behind a wait that had already waited its whole time for nothing (each
    worker's first hand-over and take lost a tenth of a second), then was sent again. A
    worker's first connections are new ones: they load the scripts first."""

    async def main() -> None:
        async with _another_writes(redis_url) as (store, rep):
            token, request = _request(rep)
            await store.client.script_flush()
            await store.client.connection_pool.disconnect()  # as a worker that just started
            await store.client.config_resetstat()
            mine, answer = await hand_off(store, token=token, request=request, wait_s=0.05)
            assert not mine and answer is None  # queued, and its one wait ran out
            assert await take(store, wait_s=0.05) == [request]
            stats = await store.client.info("commandstats")
            assert stats["cmdstat_blpop"]["calls"] == 1  # the hand-over's wait, once
            assert stats["cmdstat_blmove"]["calls"] == 1  # the take's, once
            assert "cmdstat_evalsha" in stats and stats["cmdstat_evalsha"]["failed_calls"] == 0

    asyncio.run(main())


def test_after_a_redis_restart_a_hand_over_and_a_take_wait_once(store: RedisServer) -> None:
    """A Redis that restarted holds no script. A new connection loads those sent behind a
    wait before its first command, so the first hand-over and take after a restart wait once:
    not once in vain behind a script that fails with NOSCRIPT, then again."""

    def restart() -> None:
        store.stop()
        store.start()  # same port and folder: the append-only file brings the model back

    async def main() -> None:
        async with _another_writes(store.url) as (s, rep):
            # Both sent before the restart, on connections that loaded them.
            assert await take(s) == []
            other, first = _request(rep)
            await hand_off(s, token=other, request=first)
            assert len(await take(s) or []) == 1
            await asyncio.to_thread(restart)  # (the event loop sees the old connections close)
            token, request = _request(rep)
            mine, answer = await hand_off(s, token=token, request=request, wait_s=0.05)
            assert not mine and answer is None  # queued for "writer", and its one wait ran out
            assert await take(s, wait_s=0.05) == [request]
            stats = await s.client.info("commandstats")
            assert stats["cmdstat_blpop"]["calls"] == 1  # the hand-over's wait, once
            assert stats["cmdstat_blmove"]["calls"] == 1  # the take's, once
            assert stats["cmdstat_evalsha"]["failed_calls"] == 0

    asyncio.run(main())


@pytest.mark.parametrize("timeout_s", [MIN_REDIS_TIMEOUT_S, 0.05])
def test_a_wait_on_redis_fits_in_a_call_only_above_the_timeouts_floor(
    redis_url: str, timeout_s: float
) -> None:
    """Why PERCEPTRON_REDIS_TIMEOUT_S may not go below MIN_REDIS_TIMEOUT_S: an idle writer's
    wait for requests (writer.WAIT_S) that runs its course ends in a timeout of the Redis call
    when the call's timeout is shorter; at the floor it answers, with nothing taken."""
    from service.engine import writer

    async def main() -> None:
        async with _another_writes(redis_url):
            short = Settings(redis_url=redis_url).model_copy(update={"redis_timeout_s": timeout_s})
            store = open_store(short)
            try:
                taking = store.take_learns(
                    "m", me="writer", lease_ms=60_000, most=10, wait_s=writer.WAIT_S
                )
                if timeout_s >= writer.WAIT_S:
                    assert await taking == []
                else:
                    with pytest.raises(redis.exceptions.TimeoutError):
                        await taking
            finally:
                await store.close()

    asyncio.run(main())


def test_a_request_nobody_learns_in_time_is_withdrawn_not_learned(redis_url: str) -> None:
    """The requester gives up at PERCEPTRON_LEARN_WAIT_S and says the examples were not
    learned: they are off the queue, so no writer learns them afterwards."""

    async def main() -> None:
        requester = _worker(redis_url, learn_wait_s=0.5)
        writer = _worker(redis_url)
        store = requester.store
        try:
            await requester.models.create_model("m", {"n_features": D})
            rep = await requester.replicas.get("m")
            assert await store.claim_writer("m", "stalled", 60_000) == 0  # holds it, serves nothing
            with pytest.raises(Unavailable, match="were not learned") as e:
                await requester.learning.writers.learn(rep, _examples(rep, 5))
            assert e.value.code == "learn_timeout"
            await store.client.delete(ModelKeys("m").writer)
            wrep = await writer.replicas.get("m")
            assert await writer.learning.writers.learn(wrep, _examples(wrep, 2))  # now the writer
            meta = await store.client.hgetall(ModelKeys("m").meta)
            assert int(meta[b"learned"]) == 2
            assert await store.client.hlen(ModelKeys("m").reqs) == 0
        finally:
            await _close(requester, writer)

    asyncio.run(main())


def test_an_answer_taken_by_a_lost_wait_is_not_learned_again_after_an_epoch_change(
    redis_url: str,
) -> None:
    """A requester's wait took its handed-over request's answer from Redis, but the reply never
    reached it (its event loop stalled past the Redis timeout); then the model was rolled back
    (a new epoch). The withdraw that settles the request finds neither the request nor its
    answer: learned or not, nobody can tell, and the new epoch says nothing about it. It was
    read as "not learned", the request made again on the new replica and learned twice (an
    acknowledged /learn applied twice during an undo of a large model). Now: the outcome is
    unknown, said so, and the example is learned once."""

    async def main() -> None:
        requester = _worker(redis_url)
        writer = _worker(redis_url)
        writes = writer.learning.writers
        try:
            await requester.models.create_model("m", {"n_features": D})
            wrep = await writer.replicas.get("m")
            assert await writer.store.claim_writer("m", writes.me, 60_000) == 0
            real_wait = requester.store.wait_answer
            lost: list[bytes] = []

            async def wait_lost(name: str, token: str, wait_s: float) -> bytes | None:
                if lost:
                    return await real_wait(name, token, wait_s)
                # the writer learns the request; this wait takes its answer from Redis...
                taken = await writer.store.take_learns(
                    name, me=writes.me, lease_ms=LEASE_MS, most=8, wait_s=0
                )
                assert taken
                in_flight: set[asyncio.Future[Any]] = set()
                writes.taken.serve_all(name, taken, in_flight)
                await asyncio.gather(*in_flight)
                answer = await real_wait(name, token, 1.0)
                assert answer is not None
                lost.append(answer)
                # ...the model is rolled back meanwhile (a new epoch), the lease let go...
                version = (await writer.history.checkpoints(name)).version
                await writer.history.rollback(name, version, None)
                await writer.store.release_writer(name, writes.me, force=True)
                # ...and the reply never reaches the requester
                raise redis.exceptions.TimeoutError("Timeout reading from socket")

            requester.store.wait_answer = wait_lost  # type: ignore[method-assign]
            with pytest.raises(OutcomeUnknown):
                await requester.learning.learn("m", [[1.0, 2.0, 3.0, 4.0]], [1])
            assert lost and wrep.epoch != (await writer.replicas.get("m")).epoch
            meta = await requester.store.client.hgetall(ModelKeys("m").meta)
            assert int(meta[b"learned"]) == 1  # (twice before: the request made again)
        finally:
            await _close(requester, writer)

    asyncio.run(main())


def test_a_writer_killed_mid_work_leaves_no_request_unanswered(redis_url: str) -> None:
    """kill -9 the writer while it holds requests handed over by two other services: they
    take the lease over when it lapses and learn what the dead writer took and did not
    commit; every request answers 200 and the weights are exactly those of the answers."""
    env = {"PERCEPTRON_ONE_WRITER": "true", "PERCEPTRON_DEFAULT_MODEL": "false"}
    writer = ServiceProcess(redis_url, workers=1, **env)
    others = [ServiceProcess(redis_url, workers=1, **env) for _ in range(2)]
    answers: list[tuple[list[list[int]], list[int], dict[str, Any]]] = []
    failures: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    with running(writer), running(others[0]), running(others[1]):
        with httpx.Client(base_url=writer.url, timeout=60) as c:
            assert c.put("/models/m", json={"n_features": D}).status_code == 201
            r = c.post("/learn", json={"model": "m", "features": [1, 0, 0, 0], "label": 1})
            assert r.status_code == 200  # the writer holds the lease now
            answers.append(([[1, 0, 0, 0]], [1], r.json()))

        def send(url: str, seed: int) -> None:
            rng = random.Random(seed)
            with httpx.Client(base_url=url, timeout=60) as w:
                while not stop.is_set():
                    n = rng.randint(1, 30)
                    xs = [[rng.randint(-3, 3) for _ in range(D)] for _ in range(n)]
                    ys = [rng.choice([-1, 1]) for _ in range(n)]
                    r = w.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys})
                    with lock:
                        if r.status_code == 200:
                            answers.append((xs, ys, r.json()))
                        else:
                            failures.append(f"{r.status_code} {r.text}")

        threads = [threading.Thread(target=send, args=(s.url, i)) for i, s in enumerate(others * 2)]
        for t in threads:
            t.start()
        assert writer.proc is not None
        with redis.Redis.from_url(redis_url) as r:
            # Stop the writer at a moment it holds a request it took, then kill it there.
            deadline = time.monotonic() + 30
            while True:
                writer.proc.send_signal(signal.SIGSTOP)
                if r.scard("pcp:{m}:taken") > 0:
                    break
                writer.proc.send_signal(signal.SIGCONT)
                assert time.monotonic() < deadline, "the writer never held a request"
                time.sleep(0.005)
            writer.proc.kill()
            writer.proc.wait()
            done = len(answers)
            wait_until(lambda: len(answers) > done + 20, timeout=30, what="learning to go on")
            stop.set()
            for t in threads:
                t.join(60)
            assert r.hlen("pcp:{m}:reqs") == r.scard("pcp:{m}:taken") == 0
        assert failures == []

        w, b, updates, examples = np.zeros(D), 0.0, 0, 0
        for xs, ys, a in answers:
            updated = a["updated"] if isinstance(a["updated"], list) else [a["updated"]]
            examples += len(xs)
            for x, y, u in zip(xs, ys, updated, strict=True):
                if u:
                    w += y * np.array(x, dtype=float)
                    b += y
                    updates += 1
        with httpx.Client(base_url=others[0].url, timeout=60) as c:
            info = c.get("/models/m").json()
            assert info["version"] == updates
            assert info["counters"]["learned"] == examples
            weights = c.get("/models/m/weights").json()
        assert weights["rows"][0]["weights"] == w.tolist()
        assert weights["rows"][0]["bias"] == b


def test_learns_mixed_with_heavy_feedback_on_one_model_all_succeed(redis_url: str) -> None:
    """Feedback moves the model between the writer's commits: its updates were decided when
    the predictions were served and need no writer. A writer's commit that finds the model
    moved holds it against feedback until its next commit (ops/learn.py), so two attempts
    always do (with one, this fails), and every update lands once."""
    service = ServiceProcess(
        redis_url,
        workers=4,
        PERCEPTRON_LEARN_ATTEMPTS="2",
        PERCEPTRON_DEFAULT_MODEL="false",
    )
    failures: list[str] = []
    updates = [0]
    lock = threading.Lock()
    until = time.monotonic() + 8
    with running(service), httpx.Client(base_url=service.url, timeout=60) as c:
        assert c.put("/models/m", json={"n_features": D}).status_code == 201

        def learner(seed: int) -> None:
            rng = random.Random(seed)
            with httpx.Client(base_url=service.url, timeout=60) as w:
                while time.monotonic() < until:
                    xs = [[rng.randint(-3, 3) for _ in range(D)] for _ in range(50)]
                    ys = [rng.choice([-1, 1]) for _ in range(50)]
                    r = w.post("/learn/batch", json={"model": "m", "features": xs, "labels": ys})
                    with lock:
                        if r.status_code != 200:
                            failures.append(f"learn {r.status_code} {r.text}")
                        else:
                            updates[0] += sum(r.json()["updated"])

        def teacher(seed: int) -> None:
            rng = random.Random(seed)
            with httpx.Client(base_url=service.url, timeout=60) as w:
                while time.monotonic() < until:
                    xs = [[rng.randint(-3, 3) for _ in range(D)] for _ in range(100)]
                    p = w.post("/predict/batch", json={"model": "m", "features": xs}).json()
                    items = [
                        {"prediction_id": q["prediction_id"], "label": -q["label"]}
                        for q in p["predictions"]
                    ]
                    r = w.post("/feedback/batch", json={"feedback": items})
                    with lock:
                        if r.status_code != 200:
                            failures.append(f"feedback {r.status_code} {r.text}")
                        else:
                            updates[0] += sum(a["updated"] for a in r.json()["results"])

        threads = [threading.Thread(target=learner, args=(i,)) for i in range(4)]
        threads += [threading.Thread(target=teacher, args=(10 + i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == []
        assert c.get("/models/m").json()["version"] == updates[0]
