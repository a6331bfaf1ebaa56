"""Micro-measurements behind the design notes of docs/performance.md, each beside its
alternative.

    .venv/bin/python deploy/bench/micro.py            # about 1 minute

1. Reading 1000 log entries of a d=100 model (837 bytes each) inside a Lua script, and with a
   plain LRANGE (Redis's own INFO commandstats, usec per call).
2. Reading a 1000 x 100 batch: JSON numbers (orjson, then the learner's checks and
   conversion) against packed_features decoded by the standard library's base64 and by
   pybase64 (ms per batch, best of 20).
3. /predict d=100 requests/s of two services side by side (2 workers each, wrk -c64), one
   with connection recycling (PERCEPTRON_CONNECTION_MAX_AGE_S=2), one without; five
   alternating 4-second runs each.
4. What refusing a key named twice costs (service/api/callers.py: colons counted against
   parsed members): the body's parse with it and without it (orjson and the nesting check
   alone), on a small /learn body, 100,000 named features (with and without colons in their
   names) and a batch of 1,000 feedback items (usec per body, best of 20).
5. Packing one learn commit's command (the learn script's 14 keys and its arguments, three
   log entries of d=100) with redis-py's asyncio connection, which packs in Python, and with the
   service's (store/connect.py), which packs with hiredis (usec per command, best of 20 runs
   of 1,000).
6. A script's round trip on the service's connections (store/connect.py), on uvloop: its 14
   keys and 16 arguments as a learn commit's, three log entries of d=100, alone and behind a
   blocking wait that returns at once, sent through redis-py's client (a registered script,
   and a pipeline) and straight on a pooled connection (redis_store.send_straight): usec of this
   process's CPU per round trip, the median of 5 alternated runs of 2,000.

Servers (one redis-server, two services) are started on loopback with the benchmark's
runner (harness/) and stopped by PID.
"""

from __future__ import annotations

import base64
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import orjson
import pybase64
import redis
from harness.client import request
from harness.common import API_KEY, LUA, ROOT
from harness.data import write_lines
from harness.in_process import on_service_loop
from harness.runner import Bench
from harness.tools import ensure_debian_tool
from redis.asyncio import Redis

sys.path.insert(0, str(ROOT))
from service.api.json_bodies import MAX_DEPTH, nesting_deeper_than, parse_json  # noqa: E402
from service.api.schemas.model_schemas import LearnBatchRequest
from service.learner import ModelConfig  # noqa: E402
from service.learner.features import encode_many, encode_matrix  # noqa: E402
from service.settings import Settings  # noqa: E402
from service.store.connect import open_client, packed_by_hiredis  # noqa: E402
from service.store.redis_store import send_straight  # noqa: E402
from service.store.script import Arg  # noqa: E402


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def best_ms(f: Callable[[], Any], n: int = 20) -> float:
    f()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3


def log_reads(port: int) -> tuple[float, float]:
    r = redis.Redis(port=port)
    r.delete("log")
    r.rpush("log", *[bytes(837) + b"%06d" % i for i in range(1000)])
    script = r.register_script("return redis.call('LRANGE', KEYS[1], 0, -1)")
    script(keys=["log"])  # loaded
    r.config_resetstat()
    for _ in range(50):
        script(keys=["log"])
        r.lrange("log", 0, -1)
    stats = r.info("commandstats")
    r.close()
    return stats["cmdstat_evalsha"]["usec_per_call"], stats["cmdstat_lrange"]["usec_per_call"]


def batch_reads() -> dict[str, float]:
    x = np.random.default_rng(7).uniform(-1, 1, size=(1000, 100)).round(4)
    labels = [1] * 1000
    cfg = ModelConfig(n_features=100)
    as_json = orjson.dumps({"model": "m", "features": x.tolist(), "labels": labels})
    packed = base64.b64encode(x.astype("<f8").tobytes()).decode()
    as_packed = orjson.dumps({"model": "m", "packed_features": packed, "labels": labels})

    def json_path() -> None:
        body = LearnBatchRequest.model_validate(orjson.loads(as_json))
        examples = body.examples()
        assert isinstance(examples, list)  # JSON features
        encode_many(cfg, examples)

    def stdlib_path() -> None:
        body = LearnBatchRequest.model_validate(orjson.loads(as_packed))
        assert body.packed_features is not None
        raw = base64.b64decode(body.packed_features, validate=True)
        encode_matrix(cfg, np.frombuffer(raw, dtype="<f8"))

    def packed_path() -> None:
        body = LearnBatchRequest.model_validate(orjson.loads(as_packed))
        examples = body.examples()  # pybase64, as the service does
        assert isinstance(examples, np.ndarray)  # packed features
        encode_matrix(cfg, examples)

    return {
        "JSON features (orjson, checks, conversion)": best_ms(json_path),
        "packed, standard library base64": best_ms(stdlib_path),
        "packed, pybase64 (the service)": best_ms(packed_path),
        "base64 decode alone, standard library": best_ms(lambda: base64.b64decode(packed)),
        "base64 decode alone, pybase64": best_ms(lambda: pybase64.b64decode(packed, validate=True)),
    }


def recycling(b: Bench) -> dict[str, list[float]]:
    body = orjson.dumps({"n_features": 100})
    ports = {}
    for name, age in (("without", "0"), ("with", "2")):
        _, port = b.servers.start_service(
            f"svc-{name}", 2, {"PERCEPTRON_CONNECTION_MAX_AGE_S": age}
        )
        request(port, "PUT", "/models/p100", body)
        ports[name] = port
    rows = np.random.default_rng(1).uniform(-1, 1, size=(2000, 100)).round(4)
    path = write_lines(
        b.tmp / "p100", [orjson.dumps({"model": "p100", "features": r.tolist()}) for r in rows]
    )
    wrk = ensure_debian_tool("wrk", "wrk")
    rates: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(5):
        for name, port in ports.items():
            url = f"http://127.0.0.1:{port}/predict"
            cmd = [wrk, "-t2", "-c64", "-d4s", "-s", str(LUA), url,
                   "--", str(path), "cycle", API_KEY]  # fmt: skip
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
            m = re.search(r"^BENCH (\{.*\})$", out, re.M)
            assert m, out
            s = json.loads(m.group(1))
            rates[name].append(s["requests"] / (s["duration_us"] / 1e6))
    return rates


def duplicate_keys() -> dict[str, tuple[float, float]]:
    """usec per body: (orjson and the nesting check alone, parse_json with the key check)."""
    bodies = {
        "/learn, 10 values": {"model": "m", "features": [0.5] * 10, "label": 1},
        "100,000 named features": {"features": {f"f{i}": 0.5 for i in range(100_000)}},
        "the same, names with colons": {"features": {f"f:{i}": 0.5 for i in range(100_000)}},
        "1,000 feedback items": {"feedback": [{"prediction_id": "m:x", "label": 1}] * 1000},
    }
    found = {}
    for name, doc in bodies.items():
        body = orjson.dumps(doc)
        n = 2000 if len(body) < 1000 else 20

        def before(body: bytes = body) -> None:
            nesting_deeper_than(body, MAX_DEPTH)
            orjson.loads(body)

        def after(body: bytes = body) -> None:
            parse_json(body)

        each = [min(best_ms(f, 5) for _ in range(n // 5)) * 1e3 for f in (before, after)]
        found[name] = (each[0], each[1])
    return found


def packing() -> dict[str, float]:
    """usec to pack one learn commit's command, by redis-py's asyncio packer and by hiredis's."""
    from redis.asyncio.connection import Connection

    keys = tuple(f"pcp:{{m}}:{k}" for k in range(14))
    entry = b"0|1|" + bytes(8 * 101)
    command = ("EVALSHA", "0" * 40, len(keys), *keys, "epoch", 120, "", 17, 3600, 12.5, 8, 2,
               b"01000100", "a1b2c3d4", 400, 2, 2, 1, "c:0:1", 5, "c:1:0", 3, entry, entry,
               entry)  # fmt: skip
    found = {}
    for name, connection in (
        ("redis-py (Python)", Connection()),
        ("hiredis (the service)", packed_by_hiredis(Connection)()),
    ):

        def pack(connection: Any = connection) -> None:
            for _ in range(1000):
                connection.pack_command(*command)

        found[name] = best_ms(pack)  # ms per 1,000: usec per command
    return found


def round_trips(port: int) -> dict[str, dict[str, float]]:
    """usec of CPU per script round trip, through redis-py's client and straight on a pooled
    connection (redis_store.send_straight)."""
    os.environ["PERCEPTRON_REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    keys = [f"pcp:{{m}}:{k}" for k in range(14)]
    entry = b"0|1|" + bytes(8 * 101)
    args: list[Arg] = ["epoch", 120, "", 17, 3600, 12.5, 8, 2, b"01000100", "a1b2c3d4", 400,
                       2, 2, 1, "c:0:1", 5, entry, entry, entry]  # fmt: skip
    wait: tuple[Arg, ...] = ("BLMOVE", "pcp:q", "pcp:q", "LEFT", "LEFT", 0.1)  # (holds one)

    async def measure() -> dict[str, dict[str, float]]:
        client = open_client(Settings())
        assert isinstance(client, Redis)  # (not a cluster)
        script = client.register_script("return {#KEYS, #ARGV}")
        await client.rpush("pcp:q", "x")
        await script(keys=keys, args=args)  # (loaded)
        evalsha: tuple[Arg, ...] = ("EVALSHA", script.sha, len(keys), *keys, *args)
        pool = client.connection_pool

        async def piped() -> None:
            async with client.pipeline(transaction=False) as pipe:
                pipe.execute_command(*wait)
                pipe.execute_command(*evalsha)
                await pipe.execute()

        ways: dict[str, dict[str, Callable[[], Awaitable[Any]]]] = {
            "alone": {
                "redis-py's client": lambda: script(keys=keys, args=args),
                "send_straight": lambda: send_straight(pool, [evalsha]),
            },
            "behind a wait": {
                "redis-py's client": piped,
                "send_straight": lambda: send_straight(pool, [wait, evalsha]),
            },
        }
        runs: dict[str, dict[str, list[float]]] = {k: {n: [] for n in w} for k, w in ways.items()}
        for _ in range(5):
            for kind, each in ways.items():
                for name, call in each.items():
                    cpu = time.process_time()
                    for _ in range(2000):
                        await call()
                    runs[kind][name].append((time.process_time() - cpu) / 2000 * 1e6)
        await client.delete("pcp:q")
        await client.aclose()
        return {k: {n: statistics.median(v) for n, v in w.items()} for k, w in runs.items()}

    return on_service_loop(measure())


def main() -> int:
    ensure_debian_tool("redis-server", "redis-server")
    b = Bench(quick=True)
    try:
        b.servers.start_redis()
        lua, plain = log_reads(b.servers.redis_port)
        out("1. 1000 log entries of d=100, usec per read (INFO commandstats)")
        out(f"   inside a Lua script: {lua:,.0f}   plain LRANGE: {plain:,.0f}")
        out("2. one 1000 x 100 batch, ms to read (best of 20)")
        for name, ms in batch_reads().items():
            out(f"   {name}: {ms:.2f}")
        rates = recycling(b)
        out("3. /predict d=100 req/s, 5 alternating 4 s runs each (wrk -c64)")
        for name, v in rates.items():
            runs = ", ".join(f"{r:,.0f}" for r in v)
            out(f"   {name} connection recycling: mean {statistics.mean(v):,.0f} ({runs})")
        out("4. a key named twice refused: usec per body, without the check -> with it")
        for name, (without, with_it) in duplicate_keys().items():
            out(f"   {name}: {without:,.1f} -> {with_it:,.1f} (+{with_it - without:,.1f})")
        out("5. one learn commit's command, usec to pack (best of 20 runs of 1,000)")
        for name, us in packing().items():
            out(f"   {name}: {us:.1f}")
        out("6. a script's round trip, usec of CPU (median of 5 alternated runs of 2,000)")
        for kind, found in round_trips(b.servers.redis_port).items():
            out(f"   {kind}: " + ", ".join(f"{name} {us:.1f}" for name, us in found.items()))
    finally:
        b.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
