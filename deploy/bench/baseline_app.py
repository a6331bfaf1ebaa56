"""The floor the benchmark compares the service against: a bare FastAPI app.

Each endpoint parses the same JSON body as ``POST /predict`` (a pydantic model with the
features as ``list[float]``, or ``dict[str, float]`` for named features) and answers a small
JSON object shaped like a prediction. ``/floor*`` also makes one Redis round trip: a GET of an
800-byte value, through the same client (redis.asyncio + hiredis) and settings as the service.

    BENCH_REDIS_URL=redis://127.0.0.1:6379/0 uvicorn deploy.bench.baseline_app:app --workers 2

(run from the repository root, or with deploy/bench on the path as ``baseline_app:app``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict
from redis.asyncio import Redis

KEY = "bench:floor:value"
VALUE = b"x" * 800


class DenseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = "default"
    features: list[float]


class NamedBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = "default"
    features: dict[str, float]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    client = Redis.from_url(
        url, health_check_interval=30, socket_timeout=2.0, socket_connect_timeout=2.0
    )
    await client.set(KEY, VALUE)
    app.state.redis = client
    try:
        yield
    finally:
        await client.aclose()


app = FastAPI(lifespan=lifespan)


def _answer(n: int, extra: int) -> dict[str, object]:
    return {
        "prediction_id": "floor:AAAAAAAAAAAAAAAA",
        "label": 1,
        "score": float(n + extra),
        "version": 0,
    }


@app.post("/bare")
async def bare(body: DenseBody) -> dict[str, object]:
    return _answer(len(body.features), 0)


@app.post("/floor")
async def floor(body: DenseBody) -> dict[str, object]:
    value = await app.state.redis.get(KEY)
    return _answer(len(body.features), len(value))


@app.post("/bare_named")
async def bare_named(body: NamedBody) -> dict[str, object]:
    return _answer(len(body.features), 0)


@app.post("/floor_named")
async def floor_named(body: NamedBody) -> dict[str, object]:
    value = await app.state.redis.get(KEY)
    return _answer(len(body.features), len(value))
