"""A soak: 32 concurrent clients for half a minute against two workers, on loopback.

Clients predict on a model whose predictions wait only ``TTL`` seconds for their label; most
get their feedback at once, some never do (they must expire in Redis). The time series counts
outcomes in 1-second buckets and keeps 60 of them. Sampled every second, the test shows that:

* no request failed (every answer a 200);
* each worker's resident memory is flat: after a warm-up, the largest RSS of the last third of
  the run is within 20% of the largest of the first third;
* Redis stays bounded: ``used_memory`` and ``DBSIZE`` do not grow from the first third to the
  last (pending predictions expire, the update log is compacted), every pending prediction is
  gone a few seconds after the load stops, and the model's time-series hash never holds more
  than keep/bucket = 60 buckets. Its oldest buckets are seeded before the run so that buckets
  fall out of the window while the soak runs, as they do in a long-lived service.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
import redis
from redis.typing import EncodableT, FieldT

from service.cli.loopback import wait_until

from .servers import RedisServer, ServiceProcess

log = logging.getLogger("perceptron.tests")  # shown with --log-cli-level=INFO

CLIENTS = 32
SOAK_S = 30.0
WARM_UP_S = 5.0
MAX_STEPS = 20_000  # per client: bounded in count as well as in time
RECONNECT = 50  # steps per connection
TTL = 2  # feedback_ttl_s of the model
NO_FEEDBACK = 0.15  # share of predictions that never get their label
BUCKET_S, KEEP_S = 1, 60
D = 8
SERIES = "pcp:{soak}:ts"


@dataclass
class Sample:
    t: float
    rss: dict[int, int]  # worker pid -> VmRSS (kB)
    used_memory: int
    dbsize: int
    pending: int
    buckets: int


@dataclass
class Tally:
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    predictions: int = 0
    unlabelled: int = 0


@pytest.fixture
def store() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def service(store: RedisServer) -> Iterator[ServiceProcess]:
    server = ServiceProcess(
        store.url,
        workers=2,
        PERCEPTRON_SERIES_BUCKET_S=str(BUCKET_S),
        PERCEPTRON_SERIES_KEEP_S=str(KEEP_S),
        PERCEPTRON_DEFAULT_MODEL="false",
    ).start()
    try:
        yield server
    finally:
        server.stop()


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def worker_pids(server: ServiceProcess) -> list[int]:
    assert server.proc is not None
    children = psutil.Process(server.proc.pid).children()
    return [c.pid for c in children if "resource_tracker" not in " ".join(c.cmdline())]


def buckets_in(r: redis.Redis) -> list[int]:
    buckets = set()
    for f in r.hkeys(SERIES):
        assert isinstance(f, bytes)  # the client does not decode answers
        if f != b"last":
            buckets.add(int(f.split(b":")[0]))
    return sorted(buckets)


def sample(r: redis.Redis, pids: list[int], t0: float) -> Sample:
    return Sample(
        t=time.monotonic() - t0,
        rss={pid: rss_kb(pid) for pid in pids},
        used_memory=int(r.info("memory")["used_memory"]),
        dbsize=int(r.dbsize()),
        pending=sum(1 for _ in r.scan_iter("pcp:{soak}:p:*", count=1000)),
        buckets=len(buckets_in(r)),
    )


async def client_loop(url: str, seed: int, deadline: float, tally: Tally) -> None:
    rng = random.Random(seed)
    for _ in range(MAX_STEPS // RECONNECT):
        if time.monotonic() > deadline:
            return
        # A new connection now and then: connections spread over both workers, and their
        # opening and closing is part of what must not leak.
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            await session(c, rng, deadline, tally)


async def session(c: httpx.AsyncClient, rng: random.Random, deadline: float, tally: Tally) -> None:
    for _ in range(RECONNECT):
        if time.monotonic() > deadline:
            return
        x = [rng.randint(-4, 4) for _ in range(D)]
        label = rng.choice([-1, 1])
        p = await c.post("/predict", json={"model": "soak", "features": x})
        if p.status_code != 200:
            tally.failures.append(f"predict {p.status_code} {p.text}")
            continue
        tally.ok += 1
        tally.predictions += 1
        if rng.random() < NO_FEEDBACK:
            tally.unlabelled += 1
            continue
        body = {"prediction_id": p.json()["prediction_id"], "label": label}
        f = await c.post("/feedback", json=body)
        if f.status_code != 200:
            tally.failures.append(f"feedback {f.status_code} {f.text}")
        else:
            tally.ok += 1


async def soak(url: str, r: redis.Redis, pids: list[int]) -> tuple[Tally, list[Sample]]:
    tally, samples = Tally(), []
    t0 = time.monotonic()
    deadline = t0 + SOAK_S
    clients = [asyncio.create_task(client_loop(url, i, deadline, tally)) for i in range(CLIENTS)]
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        samples.append(await asyncio.to_thread(sample, r, pids, t0))
    await asyncio.wait_for(asyncio.gather(*clients), timeout=60)
    return tally, samples


def thirds(samples: list[Sample]) -> tuple[list[Sample], list[Sample]]:
    steady = [s for s in samples if s.t >= WARM_UP_S]
    n = len(steady) // 3
    assert n >= 3, f"only {len(steady)} samples after the warm-up"
    return steady[:n], steady[-n:]


def test_soak_memory_and_redis_stay_bounded_and_nothing_fails(
    service: ServiceProcess, store: RedisServer
) -> None:
    url = service.url
    with httpx.Client(base_url=url) as c:
        spec = {"classes": [-1, 1], "n_features": D, "feedback_ttl_s": TTL}
        assert c.put("/models/soak", json=spec).status_code == 201
    pids = worker_pids(service)
    assert len(pids) == 2
    r = redis.Redis(port=store.port)
    # Seed 30 old buckets (59..30 s ago): during the run they fall out of the 60 s window.
    now_bucket = int(time.time()) // BUCKET_S
    seeded: dict[FieldT, EncodableT] = {
        f"{b}:n": 1 for b in range(now_bucket - 59, now_bucket - 29)
    }
    r.hset(SERIES, mapping={**seeded, "last": now_bucket - 30})

    tally, samples = asyncio.run(soak(url, r, pids))

    first, last = thirds(samples)
    report = (
        f"{tally.ok} requests answered 200 in {SOAK_S:.0f} s ({tally.ok / SOAK_S:.0f}/s), "
        f"{tally.predictions} predictions, {tally.unlabelled} never labelled\n"
        + "\n".join(
            f"t={s.t:5.1f}s rss={sorted(s.rss.values())} kB used_memory={s.used_memory} "
            f"dbsize={s.dbsize} pending={s.pending} buckets={s.buckets}"
            for s in samples
        )
    )
    log.info(report)
    assert tally.failures == [], tally.failures[:5]
    assert tally.predictions > 10 * CLIENTS and tally.unlabelled > 0, report

    # Worker memory is flat.
    for pid in pids:
        early = max(s.rss[pid] for s in first)
        late = max(s.rss[pid] for s in last)
        assert late <= early * 1.2, f"worker {pid}: RSS {early} kB -> {late} kB\n{report}"

    # Redis is bounded: memory and key count do not grow, pending predictions expire.
    early_mem, late_mem = max(s.used_memory for s in first), max(s.used_memory for s in last)
    assert late_mem <= early_mem * 1.2 + 1_000_000, report
    early_keys, late_keys = max(s.dbsize for s in first), max(s.dbsize for s in last)
    assert late_keys <= early_keys * 1.5 + 100, report
    labelled = tally.predictions - tally.unlabelled
    assert max(s.pending for s in samples) < labelled // 3, report
    # The series keeps at most keep/bucket buckets, and the seeded ones have aged out.
    assert max(s.buckets for s in samples) <= KEEP_S // BUCKET_S, report
    kept = buckets_in(r)
    assert kept and kept[0] > int(time.time()) // BUCKET_S - KEEP_S // BUCKET_S - 2, kept
    assert kept[0] > now_bucket - 59 + int(SOAK_S) - 3, (kept[:3], now_bucket)

    # A few seconds after the load stops, every prediction is gone, labelled or not.
    wait_until(
        lambda: not any(r.scan_iter("pcp:{soak}:p:*", count=1000)),
        timeout=3 * TTL + 10,
        what="pending predictions to expire",
    )
    with httpx.Client(base_url=url) as c:
        counters = c.get("/models/soak").json()["counters"]
    assert counters["predictions"] == tally.predictions
    assert counters["feedback"] == labelled
    r.close()
