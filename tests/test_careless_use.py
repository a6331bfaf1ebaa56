"""What a careless or hostile user broke once the first fail-safe tests held, each kept as a
test that failed before its fix. On the service in-process and on the real one."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import Any

import httpx
import numpy as np
import pytest

from service.contract import store_protocol as protocol

from .answers import error, with_weights
from .handover_calls import hand_off

pytestmark = pytest.mark.in_process  # on the service in-process and on the real one


def ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code in (200, 201), (r.status_code, r.text)
    body: dict[str, Any] = r.json()
    return body


# -- 1. every count that reaches a script is bounded, with headroom ---------------------------


def test_an_import_at_the_largest_count_learns_and_one_past_it_is_refused(
    client: httpx.Client,
) -> None:
    """At version = seen = 2**53 - 1 (accepted before) one /learn never ended: the learning
    curve's loop could not count past 2**53 in Lua's doubles, and Redis answered no one."""
    ok(client.put("/models/m", json={"n_features": 2}))
    doc = ok(client.get("/models/m/export"))
    top = protocol.MAX_COUNT
    for past in (top + 1, 2**53 - 1, 2**53):
        for field in ("version", "seen"):
            edited = {**doc, "version": 0, "seen": past, field: past}
            body = error(client.post("/models/m/import", json=edited), 422, "invalid_import")
            assert "2**50" in body["detail"], body
        counted = {**doc, "counters": {"predictions": past}}
        error(client.post("/models/m/import", json=counted), 422, "invalid_import")
    # At the limit itself: imported, then learning goes on exactly, curve and all.
    ok(client.post("/models/m/import", json={**doc, "version": top, "seen": top}))
    for _ in range(2):
        learned = ok(client.post("/learn", json={"model": "m", "features": [1, 2], "label": 1}))
        assert learned["version"] == top + 1  # the first updates (zero weights), the second not
    model = ok(client.get("/models/m"))
    assert model["counters"]["seen"] == top + 2
    curve = ok(client.get("/models/m/metrics"))["curve"]
    assert curve["points"] == [] or curve["points"][-1]["examples"] <= top + 2


# -- 9. a model's metrics never answer 500 --------------------------------------------------


def test_the_metrics_of_a_model_with_huge_weights_are_finite(client: httpx.Client) -> None:
    """Weights of 1e200 (the limit is 1e250): the norm's square overflowed (500)."""
    ok(client.put("/models/m", json={"n_features": 3}))
    ok(client.post("/learn", json={"model": "m", "features": [1, 0, 1], "label": 1}))
    doc = ok(client.get("/models/m/export"))
    n = len(base64.b64decode(doc["weights"])) // 8
    for big in (1e200, 1e250, -1e250):
        ok(client.post("/models/m/import", json=with_weights(doc, np.full(n, big))))
        ok(client.post("/learn", json={"model": "m", "features": [1, 0, 1], "label": 1}))
        metrics = ok(client.get("/models/m/metrics"))
        assert metrics["weight_norm"] == pytest.approx(abs(big) * np.sqrt(n), rel=1e-9)
        bound = metrics["mistake_bound"]
        assert bound["bound"] is None or np.isfinite(bound["bound"]), bound


def test_the_mistake_bound_of_a_tiny_margin_is_none_not_an_error(client: httpx.Client) -> None:
    """Without a bias, [1] then [1e-200]: gamma**2 underflowed to 0 (ZeroDivisionError, 500)."""
    ok(client.put("/models/m", json={"n_features": 1, "fit_bias": False}))
    ok(client.post("/learn", json={"model": "m", "features": [1], "label": 1}))
    ok(client.post("/learn", json={"model": "m", "features": [1e-200], "label": 1}))
    bound = ok(client.get("/models/m/metrics"))["mistake_bound"]
    assert bound["separable"] is True and bound["gamma"] > 0, bound
    assert bound["bound"] is None, bound  # (R / gamma)^2 is past any double
    # And an ordinary margin still gets its bound.
    ok(client.put("/models/n", json={"n_features": 1, "fit_bias": False}))
    ok(client.post("/learn", json={"model": "n", "features": [2], "label": 1}))
    ok(client.post("/learn", json={"model": "n", "features": [1], "label": 1}))
    bound = ok(client.get("/models/n/metrics"))["mistake_bound"]
    assert bound["bound"] == pytest.approx((2.0 / 1.0) ** 2), bound


# -- 12. a full store is one log line, not a traceback ----------------------------------------


def test_a_writer_stopped_by_a_full_store_logs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """The writer logged a whole traceback each time Redis answered OOM: an expected
    condition of the store (requests answer 503 store_full), not a bug."""
    from redis.exceptions import OutOfMemoryError

    from service.engine.replicas import Replicas
    from service.engine.writer import Writers
    from service.settings import Settings

    class FullStore:
        embedded = False

        async def take_learns(self, *args: Any, **kwargs: Any) -> None:
            raise OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")

    store, settings = FullStore(), Settings(auth=False)
    replicas = Replicas(store, settings)  # type: ignore[arg-type]
    writers = Writers(store, settings, time.time, replicas)  # type: ignore[arg-type]

    async def run() -> None:
        writers._writing["m"] = asyncio.current_task()  # type: ignore[assignment]
        await writers._write("m")

    with caplog.at_level(logging.WARNING, logger="perceptron"):
        asyncio.run(run())
    records = [r for r in caplog.records if "writer of model 'm' stopped" in r.getMessage()]
    assert len(records) == 1, caplog.text
    assert records[0].exc_info is None and "maxmemory" in records[0].getMessage()
    assert "m" not in writers._writing


# -- 5 and 11. feedback: an answer per item once anything was applied; an old prediction of a
# model made anew is not found, whatever its label ----------------------------------------


def test_a_feedback_batch_answers_per_item_after_applying_part_of_it(
    client: httpx.Client,
) -> None:
    """A good item for model a, then an unknown label for model b: the batch answered 422
    as a whole, though a's item had been applied."""
    ok(client.put("/models/a", json={"n_features": 1}))
    ok(client.put("/models/b", json={"n_features": 1, "classes": ["x", "y"]}))
    pa = ok(client.post("/predict", json={"model": "a", "features": [1]}))["prediction_id"]
    pb = ok(client.post("/predict", json={"model": "b", "features": [1]}))["prediction_id"]
    body = {"feedback": [{"prediction_id": pa, "label": 1}, {"prediction_id": pb, "label": 7}]}
    results = ok(client.post("/feedback/batch", json=body))["results"]
    assert results[0]["error"] is None and results[0]["version"] == 1, results
    assert results[1]["error"]["code"] == "unknown_label", results
    assert "7" in results[1]["error"]["detail"] and "'x'" in results[1]["error"]["detail"]
    assert ok(client.get("/models/a"))["counters"]["feedback"] == 1
    # b's prediction still waits for its label: it takes a right one afterwards.
    assert ok(client.post("/feedback", json={"prediction_id": pb, "label": "y"}))["version"] == 1
    # The same, one item: 422 for the item, nothing applied.
    pb = ok(client.post("/predict", json={"model": "b", "features": [1]}))["prediction_id"]
    error(client.post("/feedback", json={"prediction_id": pb, "label": 7}), 422, "unknown_label")
    assert ok(client.get("/models/b"))["counters"]["feedback"] == 1


def test_a_prediction_of_a_model_deleted_and_made_anew_is_not_found_whatever_its_label(
    client: httpx.Client,
) -> None:
    ok(client.put("/models/m", json={"n_features": 1, "classes": [0, 1]}))
    old = ok(client.post("/predict", json={"model": "m", "features": [1]}))["prediction_id"]
    assert client.delete("/models/m").status_code == 204
    ok(client.put("/models/m", json={"n_features": 1, "classes": ["x", "y"]}))
    for label in (1, "x"):  # a label of the old classes; one of the new ones
        r = client.post("/feedback", json={"prediction_id": old, "label": label})
        error(r, 404, "prediction_not_found")
    batch = {"feedback": [{"prediction_id": old, "label": 0}]}
    results = ok(client.post("/feedback/batch", json=batch))["results"]
    assert results[0]["error"]["code"] == "prediction_not_found", results
    assert ok(client.get("/models/m"))["counters"]["feedback"] == 0


# -- 8. names of dots alone ---------------------------------------------------------------


@pytest.mark.parametrize("name", [".", "..", "...", "." * 64])
def test_a_name_of_dots_alone_is_refused_everywhere(client: httpx.Client, name: str) -> None:
    """'..' was a model's name that no client could reach again: a path segment of dots is
    folded away before it is sent (DELETE /models/.. became DELETE /)."""
    sent = "/models/" + name.replace(".", "%2E")  # as sent by a client that escapes them
    error(client.put(sent, json={"n_features": 1}), 422, "invalid_model_name")
    r = client.post("/predict", json={"model": name, "features": [1]})
    assert r.status_code == 422 and r.json()["code"] == "validation_error", r.text
    assert name not in [m["name"] for m in ok(client.get("/models"))["models"]]
    # Dots with anything else stay good names.
    ok(client.put("/models/" + name[:63] + "a", json={"n_features": 1}))


# -- 4 and 13. deleting a model frees its memory; the writer's queue keys expire ---------------


def test_deleting_a_model_deletes_its_pending_predictions_and_queue(
    client: httpx.Client, redis_client: Any
) -> None:
    """At maxmemory the error advises deleting models; a deleted model's 2,900 pending
    predictions kept their day's TTL, and its writer's queue keys stayed forever."""
    ok(client.put("/models/gone", json={"n_features": 2}))
    ok(client.put("/models/kept", json={"n_features": 2}))
    xs = [[1, 2]] * 300
    ok(client.post("/predict/batch", json={"model": "gone", "features": xs}))
    kept = ok(client.post("/predict/batch", json={"model": "kept", "features": xs}))
    first = ok(client.post("/predict", json={"model": "gone", "features": [1, 2]}))
    ok(client.post("/feedback", json={"prediction_id": first["prediction_id"], "label": 1}))
    for key in ("learns", "taken", "reqs", "writer", "hold"):  # what a dead writer leaves
        redis_client.set(f"pcp:{{gone}}:{key}", "left behind")

    def keys_of(name: str) -> list[bytes]:
        return list(redis_client.scan_iter(match=f"pcp:{{{name}}}:*", count=1000))

    assert len(keys_of("gone")) > 300
    assert client.delete("/models/gone").status_code == 204
    assert keys_of("gone") == []
    # Another model's pending predictions stay (and so would those of a model made anew
    # under the name: the purge deletes only the deleted model's epoch, ops/purge.py).
    assert len([k for k in keys_of("kept") if b":p:" in k]) == 300
    pid = kept["predictions"][0]["prediction_id"]
    assert ok(client.post("/feedback", json={"prediction_id": pid, "label": 1}))["version"] == 1


def test_the_writers_queue_keys_expire_after_the_last_deadline(redis_url: str) -> None:
    """A handed-over request whose requester lost Redis left its bytes in the queue's keys
    with no expiry: after every worker was killed, they stayed forever."""
    import secrets

    from service.contract.learn_wire import NOT_QUEUED_ANSWER, pack_request
    from service.store import ModelKeys

    from .test_writers import _close, _examples, _worker

    async def main() -> None:
        worker = _worker(redis_url)
        store = worker.store
        keys = ModelKeys("m")
        try:
            await worker.models.create_model("m", {"n_features": 4})
            rep = await worker.replicas.get("m")
            token = secrets.token_urlsafe(16)
            deadline_ms = int(time.time() * 1000) + 5_000
            request = pack_request(token, deadline_ms, rep.epoch, _examples(rep, 3))
            assert await store.claim_writer("m", "writer", 60_000) == 0
            keep = protocol.QUEUE_KEEP_S * 1000  # past the last deadline
            assert not (
                await store.hand_off(
                    "m",
                    me="requester",
                    lease_ms=2_000,
                    token=token,
                    request=request,
                    wait_ms=5_000,
                    not_queued=NOT_QUEUED_ANSWER,
                )
            )[0]
            for key in (keys.reqs, keys.learns):
                assert keep < await store.client.pttl(key) <= keep + 5_000, key
            assert await store.take_learns("m", me="writer", lease_ms=60_000, most=10) == [request]
            assert keep < await store.client.pttl(keys.taken) <= keep + 5_000
            # The writer dies with it taken; a worker that takes the lease over puts it back,
            # and the queue still ends with the request's deadline.
            await store.client.delete(keys.writer)
            assert await store.claim_writer("m", "next", 60_000) == 0
            assert keep < await store.client.pttl(keys.learns) <= keep + 5_000
            assert not await store.client.exists(keys.taken)
            # A later request with a later deadline extends them; an earlier one never shortens.
            later = secrets.token_urlsafe(16)
            await store.hand_off(
                "m",
                me="requester",
                lease_ms=2_000,
                token=later,
                request=request,
                wait_ms=30_000,
                not_queued=NOT_QUEUED_ANSWER,
            )
            await store.hand_off(
                "m",
                me="requester",
                lease_ms=2_000,
                token=secrets.token_urlsafe(16),
                request=request,
                wait_ms=1,
                not_queued=NOT_QUEUED_ANSWER,
            )
            assert keep + 29_000 < await store.client.pttl(keys.reqs) <= keep + 30_000
        finally:
            await _close(worker)

    asyncio.run(main())


# -- 3. an evicted answer is never told "not learned" ------------------------------------------


def test_a_request_whose_answer_was_evicted_is_not_told_it_was_not_learned(
    redis_url: str,
) -> None:
    """Under maxmemory-policy volatile-ttl, 13 answers 'learn_timeout' (not learned, never
    will be) had been learned: Redis evicted their answers (which expire), and a requester
    that found none took it for 'not learned'."""
    import secrets

    from service.contract.learn_wire import NOT_QUEUED_ANSWER, UNLEARNED_ANSWER, pack_request
    from service.errors import OutcomeUnknown
    from service.store import ModelKeys

    from .test_writers import _close, _examples, _worker

    async def main() -> None:
        worker = _worker(redis_url)
        store = worker.store
        try:
            await worker.models.create_model("m", {"n_features": 4})
            rep = await worker.replicas.get("m")

            async def handed_over() -> str:
                token = secrets.token_urlsafe(16)
                request = pack_request(token, 0, rep.epoch, _examples(rep, 2))
                assert not (
                    await store.hand_off(
                        "m",
                        me="requester",
                        lease_ms=2_000,
                        token=token,
                        request=request,
                        wait_ms=5_000,
                        not_queued=NOT_QUEUED_ANSWER,
                    )
                )[0]
                assert await store.take_learns("m", me="writer", lease_ms=60_000, most=10) == [
                    request
                ]
                return token

            await store.client.delete(ModelKeys("m").writer)
            assert await store.claim_writer("m", "writer", 60_000) == 0
            # Learned (answered), and its answer evicted before its requester read it.
            token = await handed_over()
            assert await store.refuse_learn("m", token, b"R-an-answer")
            await store.client.delete(ModelKeys("m").answer(token))
            with pytest.raises(OutcomeUnknown) as raised:
                await store.withdraw_learn("m", token, rep.epoch)
            assert raised.value.status == 503 and raised.value.code == "learn_outcome_unknown"
            # Refused unlearned past its deadline: the requester is told so, surely.
            token = await handed_over()
            assert await store.refuse_learn("m", token, UNLEARNED_ANSWER)
            assert await store.withdraw_learn("m", token, rep.epoch) == UNLEARNED_ANSWER
            # Withdrawn while still waiting: not learned, and now never will be.
            token = secrets.token_urlsafe(16)
            request = pack_request(token, 0, rep.epoch, _examples(rep, 1))
            assert not (
                await store.hand_off(
                    "m",
                    me="requester",
                    lease_ms=2_000,
                    token=token,
                    request=request,
                    wait_ms=5_000,
                    not_queued=NOT_QUEUED_ANSWER,
                )
            )[0]
            assert await store.withdraw_learn("m", token, rep.epoch) is None
            assert await store.take_learns("m", me="writer", lease_ms=60_000, most=10) == []
            # Its model deleted while it waited (the queue's keys go with it): not learned,
            # and said so (it was learn_outcome_unknown after the whole wait).
            from service.errors import StaleModel

            token = await handed_over()
            assert await store.delete_model("m")
            with pytest.raises(StaleModel):
                await store.withdraw_learn("m", token, rep.epoch)
        finally:
            await _close(worker)

    asyncio.run(main())


# -- 6. more models than connections --------------------------------------------------------


def test_more_models_than_pooled_connections_wait_for_one_instead_of_failing(
    make_service: Any,
) -> None:
    """101 models: GET /models and /metrics read them all at once, one connection each, and
    redis-py's pool of 100 refused the 101st (503 store_unavailable while /readyz said 200)."""
    client = make_service(default_model=False)
    for i in range(101):
        ok(client.put(f"/models/m{i}", json={"n_features": 1}))
    listed = ok(client.get("/models"))["models"]
    assert len(listed) == 101
    r = client.get("/metrics")
    assert r.status_code == 200 and 'perceptron_model_seen_total{model="m100"}' in r.text
    # A pool much smaller than the load: every request waits its turn, none fails.
    small = make_service(default_model=False, redis_max_connections=2)
    assert len(ok(small.get("/models"))["models"]) == 101


# -- 12. booleans are booleans ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, "false", None])
@pytest.mark.parametrize("field", ["averaged", "fit_bias"])
def test_a_configuration_boolean_takes_only_true_or_false(
    client: httpx.Client, field: str, value: Any
) -> None:
    """ "averaged": "yes" made an averaged model."""
    r = client.put("/models/m", json={"n_features": 1, field: value})
    assert r.status_code == 422 and r.json()["code"] == "validation_error", r.text
    assert field in r.json()["detail"]
    assert client.get("/models/m").status_code == 404
    made = ok(client.put("/models/m", json={"n_features": 1, field: True}))
    assert made["config"][field] is True


def test_why_the_default_model_is_not_made_is_logged_once_a_minute(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On a Redis that may evict keys, each worker logged "'default' model is not created
    yet" once a second (the docs say once a minute)."""
    import redis

    from service.cli.loopback import wait_until
    from service.settings import Settings

    from .servers import ServiceThread

    with redis.Redis.from_url(redis_url) as r:
        r.config_set("maxmemory-policy", "allkeys-lru")
        try:
            with caplog.at_level(logging.WARNING, logger="perceptron"):
                service = ServiceThread(Settings(redis_url=redis_url, auth=False)).start()
                try:

                    def said() -> list[logging.LogRecord]:
                        return [r for r in caplog.records if "not created yet" in r.getMessage()]

                    wait_until(lambda: said(), timeout=10, what="the first warning")
                    time.sleep(3.5)  # three more attempts, one a second
                    assert len(said()) == 1, [rec.getMessage() for rec in said()]
                    assert "maxmemory-policy" in said()[0].getMessage()
                finally:
                    service.stop()
        finally:
            r.config_set("maxmemory-policy", "noeviction")


# -- 7. a model and its listing change together -------------------------------------------


def test_concurrent_delete_and_create_of_one_name_never_leave_a_model_unlisted(
    redis_url: str,
) -> None:
    """DELETE and PUT of one name at once (two workers): 47 of 60 rounds left a model that
    existed and predicted but was missing from GET /models and /metrics."""
    from concurrent.futures import ThreadPoolExecutor

    from .servers import ServiceProcess

    service = ServiceProcess(redis_url, workers=2, PERCEPTRON_DEFAULT_MODEL="false").start()
    try:
        with httpx.Client(base_url=service.url, timeout=30) as http:

            def put() -> int:
                return http.put("/models/race", json={"n_features": 1}).status_code

            def delete() -> int:
                return http.delete("/models/race").status_code

            broken = []
            with ThreadPoolExecutor(4) as pool:
                for i in range(60):
                    jobs = [pool.submit(f) for f in (put, delete, put, delete)[: 2 + i % 3]]
                    assert {j.result() for j in jobs} <= {200, 201, 204, 404}
                    exists = http.get("/models/race").status_code == 200
                    listed = "race" in [m["name"] for m in http.get("/models").json()["models"]]
                    if exists != listed:
                        broken.append((i, exists, listed))
            assert broken == []
    finally:
        service.stop()


# -- found by tests/test_stateful.py ------------------------------------------------------


def test_a_worker_that_has_not_noticed_a_model_made_anew_answers_as_the_new_model(
    redis_url: str,
) -> None:
    """Deleted and made anew with other classes through one worker, a model was refused by
    another worker from its stale copy's configuration (422 unknown_label for a label of the
    new classes) until that worker's next store check."""
    from service.settings import Settings

    from .servers import ServiceThread

    settings = Settings(redis_url=redis_url, auth=False, store_check_s=3600)  # no check
    one, two = ServiceThread(settings).start(), ServiceThread(settings).start()
    try:
        with httpx.Client(base_url=one.url) as a, httpx.Client(base_url=two.url) as b:
            ok(a.put("/models/m", json={"n_features": 1, "classes": ["no", "yes"]}))
            ok(b.post("/learn", json={"model": "m", "features": [1], "label": "yes"}))
            assert a.delete("/models/m").status_code == 204
            ok(a.put("/models/m", json={"n_features": 2, "classes": [-1, 1]}))
            learned = ok(b.post("/learn", json={"model": "m", "features": [1, 2], "label": 1}))
            assert learned["version"] == 1
            predicted = ok(b.post("/predict", json={"model": "m", "features": [3, 4]}))
            assert predicted["label"] == 1
            assert a.delete("/models/m").status_code == 204
            r = b.post("/learn", json={"model": "m", "features": [1, 2], "label": 7})
            error(r, 404, "model_not_found")
    finally:
        one.stop()
        two.stop()


def test_a_writer_reads_a_request_with_the_configuration_of_the_model_it_was_made_for(
    redis_url: str,
) -> None:
    """A model deleted and made anew with 2 features where it had 1: its writer, still
    holding a copy of the old model, read a request made for the new one with the old
    configuration (one feature an example), then found the new model and learned what it had
    misread; every copy of the model then failed to apply its log (500 on export)."""
    import secrets

    from service.contract.learn_wire import Labelled, pack_request, unpack_answer
    from service.learner.features import encode_matrix
    from service.store import ModelKeys

    from .test_writers import _close, _worker

    async def main() -> None:
        writer, other = _worker(redis_url), _worker(redis_url)
        try:
            await writer.models.create_model("m", {"n_features": 1})
            await writer.replicas.get("m")  # the writer's copy: the old model
            await other.models.delete_model("m")
            await other.models.create_model("m", {"n_features": 2})
            rep = await other.replicas.get("m")
            xs = encode_matrix(rep.config, np.array([1.0, 2.0, -3.0, 0.5]))
            token = secrets.token_urlsafe(16)
            deadline_ms = int(time.time() * 1000) + 60_000
            request = pack_request(token, deadline_ms, rep.epoch, Labelled.of(xs, [0, 1]))
            me = writer.learning.writers.me
            assert await writer.store.claim_writer("m", me, 60_000) == 0
            assert not (await hand_off(other.store, token=token, request=request))[0]
            assert await writer.store.take_learns("m", me=me, lease_ms=60_000, most=10) == [request]
            in_flight: set[asyncio.Future[Any]] = set()
            writer.learning.writers.taken.serve_all("m", [request], in_flight)
            assert len(in_flight) == 1
            await asyncio.gather(*in_flight)
            answer = await other.store.wait_answer("m", token, 5)
            assert answer is not None
            _, updated, versions = unpack_answer(answer)
            # The perceptron on the two examples: [1, 2] labelled -1 is a mistake (w = -[1, 2],
            # b = -1); [-3, 0.5] labelled 1 then scores 3 - 1 - 1 = 1, right.
            assert updated == [True, False] and versions == [1, 1]
            current = await other.replicas.current("m")
            assert current.weights.w.tolist() == [[-1.0, -2.0]]
            assert current.weights.b.tolist() == [-1.0]
            await other.store.client.delete(ModelKeys("m").writer)
        finally:
            await _close(writer, other)

    asyncio.run(main())


# -- 2. a model whose keys are gone is lost, never made anew or served ---------------------


def test_a_listed_model_whose_keys_were_evicted_is_lost_not_made_anew(
    redis_url: str,
) -> None:
    """Under allkeys-lru Redis evicted a model's keys; PUT then answered 201 and served version
    0, all zeros, though the name was still listed; and a worker that held the model kept
    answering /predict with 200."""
    import redis

    from service.settings import Settings

    from .servers import ServiceThread

    settings = Settings(redis_url=redis_url, auth=False, store_check_s=3600, default_model=False)
    one, two = ServiceThread(settings).start(), ServiceThread(settings).start()
    try:
        with (
            httpx.Client(base_url=one.url) as a,
            httpx.Client(base_url=two.url) as b,
            redis.Redis.from_url(redis_url) as r,
        ):
            ok(a.put("/models/m", json={"n_features": 1}))
            for x, y in ((1, -1), (-1, 1), (2, -1)):
                ok(a.post("/learn", json={"model": "m", "features": [x], "label": y}))
            ok(b.post("/predict", json={"model": "m", "features": [1]}))  # b holds it
            r.delete("pcp:{m}:log")  # what an eviction takes first: the largest keys
            error(b.post("/predict", json={"model": "m", "features": [1]}), 503, "model_state_lost")
            for key in list(r.scan_iter(match="pcp:{m}:*")):
                r.delete(key)  # and then the rest
            error(a.put("/models/m", json={"n_features": 1}), 503, "model_state_lost")
            error(a.get("/models/m"), 503, "model_state_lost")
            # What an operator does about it: delete the name, then make it anew.
            assert a.delete("/models/m").status_code == 204  # the name of a lost model goes
            assert ok(a.put("/models/m", json={"n_features": 1}))["version"] == 0
    finally:
        one.stop()
        two.stop()


def test_a_redis_error_is_the_same_service_error_wherever_it_is_answered() -> None:
    """Feedback's per-item errors called every store error store_unavailable, where the app's
    handlers answer a full Redis store_full (retry later) and a script error 500."""
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import OutOfMemoryError, ResponseError

    from service.store.refusals import service_error

    full = service_error(OutOfMemoryError("command not allowed when used memory > 'maxmemory'."))
    assert (full.status, full.code, full.retry_after_s) == (503, "store_full", 5)  # type: ignore[attr-defined]
    down = service_error(RedisConnectionError("Connection refused"))
    assert (down.status, down.code) == (503, "store_unavailable")
    bug = service_error(ResponseError("ERR Error running script"))
    assert (bug.status, bug.code) == (500, "internal_error")


def test_a_policy_that_evicts_is_named_at_once_not_at_the_next_check(redis_url: str) -> None:
    """Redis switched to allkeys-lru while the service ran: until its next check of the store,
    answers were model_not_found and store_full, never store_evicts_keys, and PUT made a model
    anew where eviction had taken both its keys and its name."""
    import redis

    from service.settings import Settings
    from service.store.keys import REGISTRY

    from .servers import ServiceThread

    settings = Settings(redis_url=redis_url, auth=False, store_check_s=3600, default_model=False)
    with (
        ServiceThread(settings) as service,
        httpx.Client(base_url=service.url) as c,
        redis.Redis.from_url(redis_url) as r,
    ):
        ok(c.put("/models/m", json={"n_features": 1}))
        ok(c.post("/learn", json={"model": "m", "features": [1], "label": -1}))
        r.config_set("maxmemory-policy", "allkeys-lru")
        try:
            for key in [*r.scan_iter(match="pcp:{m}:*"), REGISTRY]:
                r.delete(key)  # evicted: the model's keys and the registry with them
            error(c.get("/models/m"), 503, "store_evicts_keys")
            error(
                c.post("/learn", json={"model": "m", "features": [1], "label": 1}),
                503,
                "store_evicts_keys",
            )
            error(c.put("/models/m", json={"n_features": 1}), 503, "store_evicts_keys")
        finally:
            r.config_set("maxmemory-policy", "noeviction")
        # The refusal looked again: the client's retry finds the store serving.
        c.get("/models/m")
        error(c.get("/models/m"), 404, "model_not_found")  # (all trace of it is gone)


# -- 12. a key named twice in one object is refused, wherever it is -----------------------

DUPLICATES = [
    pytest.param("/predict", b'{"model": "d", "model": "e", "features": [1]}', id="model"),
    pytest.param("/predict", b'{"model": "d", "features": {"x": 1, "x": 2}}', id="feature"),
    pytest.param(
        "/learn/batch",
        b'{"model": "d", "features": [[1]], "labels": [1], "labels": [-1]}',
        id="labels",
    ),
    pytest.param(
        "/feedback/batch",
        b'{"feedback": [{"prediction_id": "d:x", "label": 1, "label": -1}]}',
        id="batch-item",
    ),
    pytest.param(
        "/predict",
        '{"model": "d", "features": {"f:1": 1, "f:1": 2}}'.encode("utf-16"),
        id="utf-16",
    ),
]


@pytest.mark.parametrize(("path", "body"), DUPLICATES)
def test_a_key_named_twice_in_one_object_is_refused(
    client: httpx.Client, path: str, body: bytes
) -> None:
    """Accepted before, the last of the two winning, unseen by the client."""
    r = client.post(path, content=body, headers={"content-type": "application/json"})
    assert "twice" in error(r, 400, "malformed_json")["detail"]


def test_a_body_is_parsed_as_written_and_refused_only_for_a_key_named_twice() -> None:
    """The cheap count that decides whether to look (colons against parsed members) never
    refuses a document without duplicates, nor lets one with a duplicate through: keys and
    strings full of colons, quotes and backslashes, lists of mixed items, large objects."""
    import json

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from service.api.json_bodies import DuplicateKey, parse_json

    text = st.text(alphabet=st.sampled_from('ab:"\\{}[],'), max_size=6)
    leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | text
    documents = st.recursive(
        leaf,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(text, inner, max_size=4)
            | st.dictionaries(st.from_regex(r"f:?[0-9]{1,3}", fullmatch=True), leaf, min_size=65)
        ),
        max_leaves=80,
    )

    def written(value: Any, twice_in: int, seen: list[int]) -> str:
        """``value`` as JSON text; its ``twice_in``-th object (in pre-order) names its
        first key twice (or "k" twice when it has none)."""
        if isinstance(value, list):
            return "[" + ", ".join(written(v, twice_in, seen) for v in value) + "]"
        if not isinstance(value, dict):
            return json.dumps(value)
        index = len(seen)
        seen.append(index)
        members = [f"{json.dumps(k)}: {written(v, twice_in, seen)}" for k, v in value.items()]
        if index == twice_in:
            key = json.dumps(next(iter(value), "k"))
            members += [f"{key}: 1", f"{key}: 2"] if not value else [f"{key}: 2"]
        return "{" + ", ".join(members) + "}"

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(document=documents, where=st.integers(0, 100))
    def check(document: Any, where: int) -> None:
        assert parse_json(written(document, -1, []).encode()) == document
        objects: list[int] = []
        body = written(document, where, objects)
        if where < len(objects):  # a key named twice in the where-th object
            with pytest.raises(DuplicateKey):
                parse_json(body.encode())
        else:
            assert parse_json(body.encode()) == document

    check()


def test_a_learn_waiting_on_a_model_deleted_meanwhile_is_answered_at_once(
    redis_url: str,
) -> None:
    """A learn handed over to the model's writer waited out PERCEPTRON_LEARN_WAIT_S when the
    model was deleted meanwhile (its queue went with it, so no writer would answer)."""
    import concurrent.futures

    import redis

    from service.cli.loopback import wait_until
    from service.settings import Settings
    from service.store import ModelKeys

    from .servers import ServiceThread

    settings = Settings(redis_url=redis_url, auth=False, default_model=False, learn_wait_s=20)
    with (
        ServiceThread(settings) as service,
        httpx.Client(base_url=service.url, timeout=60) as c,
        redis.Redis.from_url(redis_url) as r,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        ok(c.put("/models/m", json={"n_features": 1}))
        r.set(ModelKeys("m").writer, "a stalled writer", px=60_000)  # takes nothing
        waiting = pool.submit(c.post, "/learn", json={"model": "m", "features": [1], "label": 1})
        wait_until(lambda: r.hlen(ModelKeys("m").reqs) == 1, what="the learn queued")
        assert c.delete("/models/m").status_code == 204
        started = time.monotonic()
        error(waiting.result(timeout=30), 404, "model_not_found")
        assert time.monotonic() - started < 2, "waited for its deadline"


def test_a_hand_over_whose_reply_was_lost_after_it_took_the_lease_was_not_learned(
    redis_url: str,
) -> None:
    """A requester whose hand-over reply was lost, where the script had given it the lease
    and queued nothing, was told learn_outcome_unknown: nothing said it was never queued."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from service.store.refusals import service_error

    from .test_writers import _close, _examples, _worker

    async def main() -> None:
        worker = _worker(redis_url)
        store = worker.store
        try:
            await worker.models.create_model("m", {"n_features": 4})
            rep = await worker.replicas.get("m")
            real = store.hand_off

            async def reply_lost(*args: Any, **kwargs: Any) -> bool:
                # ran (the lease taken, nothing queued) with its first wait, which took the
                # answer that says so
                assert (await real(*args, **kwargs))[0]
                raise RedisConnectionError("Connection reset by peer")  # reply lost

            store.hand_off = reply_lost  # type: ignore[method-assign,assignment]
            with pytest.raises(RedisConnectionError) as raised:
                await worker.learning.writers.learn(rep, _examples(rep, 2))
            # Answered as the store's error, which says to retry: it was not learned.
            assert service_error(raised.value).code == "store_unavailable"
            store.hand_off = real  # type: ignore[method-assign]
            assert (await store.read_meta("m") or {})["version"] == "0"
            assert worker.learning.writers.writes("m")  # and the lease it took is used
            learned = await worker.learning.writers.learn(rep, _examples(rep, 2))
            assert len(learned) == 2
        finally:
            await _close(worker)

    asyncio.run(main())


# -- 12. the weights of a large model: streamed, one request of a worker at a time ----------


def test_the_weights_of_a_large_model_go_to_one_client_at_a_time_and_never_for_long(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight concurrent GET /weights of a 100 x 100,000 model held 873 MiB: each built its
    whole answer. Now each streams from its own copy, one request of a worker at a time, and
    a client that stops reading holds its turn WEIGHTS_SEND_S at most."""
    import socket

    from service.api import model_answers
    from service.settings import Settings

    from .servers import ServiceThread

    monkeypatch.setattr(model_answers, "WEIGHTS_SEND_S", 1.5)
    settings = Settings(redis_url=redis_url, auth=False, default_model=False)
    with ServiceThread(settings) as service, httpx.Client(base_url=service.url, timeout=30) as c:
        classes = list(range(40))  # ovr: 40 rows of 100,000, past LARGE_WEIGHTS
        ok(c.put("/models/big", json={"n_features": 100_000, "classes": classes}))
        ok(c.put("/models/small", json={"n_features": 2}))
        whole = c.get("/models/big/weights").json()
        assert len(whole["rows"]) == 40 and whole["rows"][0]["weights"] == [0.0] * 100_000
        with socket.socket() as stalled:
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stalled.connect(("127.0.0.1", service.port))
            stalled.sendall(b"GET /models/big/weights HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.3)  # its answer fills the buffers between them, and stalls
            started = time.monotonic()
            # A small model's weights do not wait for the large one's turn.
            assert ok(c.get("/models/small/weights"))["rows"][0]["weights"] == [0.0, 0.0]
            assert time.monotonic() - started < 1
            monkeypatch.setattr(model_answers, "WEIGHTS_SEND_S", 0.3)  # (for the next ones)
            r = c.get("/models/big/weights")  # waits its turn, and gives up
            error(r, 503, "weights_busy")
            assert r.headers["retry-after"] == "5"
            # (the answers read whole below: time enough to send them on a busy machine; the
            # stalled client's turn keeps the 1.5 s it started with)
            monkeypatch.setattr(model_answers, "WEIGHTS_SEND_S", 30.0)
            time.sleep(1.5)  # the stalled client's turn ends: its connection is closed
            assert ok(c.get("/models/big/weights"))["version"] == 0
            stalled.settimeout(10)
            received = b""
            while chunk := stalled.recv(1 << 20):
                received += chunk
            assert b'"rows":' in received  # part of the answer, then closed
            assert len(received) < len(c.get("/models/big/weights").content)
