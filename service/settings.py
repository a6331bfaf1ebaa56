"""Settings from ``PERCEPTRON_*`` environment variables; built by create_app, never at import."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

# The shortest timeout of a Redis call: the service's own waits on Redis (a hand-over's answer,
# a writer's queue, a held feedback: engine/writer.py, engine/learning.py) last up to 0.1 s
# each, and a shorter timeout turns each such wait that runs its course into a Redis error (an
# idle writer's wait for requests among them, which then stops).
MIN_REDIS_TIMEOUT_S = 0.25


class Settings(BaseSettings):
    """Every setting of the service. The table of docs/settings.md mirrors this class."""

    model_config = SettingsConfigDict(env_prefix="PERCEPTRON_", extra="ignore")

    redis_url: str | None = Field(
        default=None,
        description="Redis URL (redis://, rediss://, unix://, redis+cluster://); unset: see "
        "local_redis_dir.",
    )
    local_redis_dir: str | None = Field(
        default=None,
        description="Without redis_url: start a redis-server of the service's own, keeping its "
        "data (append-only file) in this folder, and stop it with the service "
        "(deploy/serve.sh sets data/redis); unset or empty: the embedded store.",
    )
    redis_password_file: Path | None = Field(
        default=None,
        description="A file holding the Redis password (e.g. a mounted secret), for a URL "
        "without one.",
    )
    redis_cluster: bool = Field(default=False, description="Use the Redis Cluster client.")
    redis_timeout_s: float = Field(
        default=2.0,
        ge=MIN_REDIS_TIMEOUT_S,
        description="Timeout of each Redis call; at least 0.25, above the service's own 0.1 s "
        "waits on Redis.",
    )
    redis_max_connections: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="Connections to Redis one worker process opens at most; a request that "
        "finds them all busy waits for one, up to PERCEPTRON_REDIS_TIMEOUT_S.",
    )
    default_model: bool = Field(default=True, description="Create the 'default' model at start.")
    compact_every: int = Field(
        default=1000, ge=1, description="Fold the update log into a snapshot past this length."
    )
    max_challengers: int = Field(
        default=8, ge=0, le=64, description="Challengers a model may have at most."
    )
    history_keep_s: int = Field(
        default=3600,
        ge=0,
        description="Keep every update of at least this long ago (or of the last "
        "PERCEPTRON_HISTORY_KEEP_UPDATES, whichever is less), so a rollback can restore any "
        "version since.",
    )
    history_keep_updates: int = Field(
        default=100_000,
        ge=0,
        description="Keep at least the last this many updates for rollback; 0: keep none (only "
        "the checkpoints made before a reset, an import or a rollback).",
    )
    history_max_bytes: int = Field(
        default=128 * 2**20,
        ge=0,
        description="Most bytes of one model's checkpoints and kept updates; past them the "
        "oldest go first, even inside the kept hour (the newest checkpoint stays).",
    )
    checkpoint_every: int = Field(
        default=10_000,
        ge=1,
        description="Make a checkpoint at the first compaction this many updates after the "
        "last one...",
    )
    checkpoint_every_s: int = Field(
        default=600, ge=1, description="...or this many seconds after it."
    )
    series_bucket_s: int = Field(
        default=10, ge=1, description="Width of one bucket of the mistake-rate time series."
    )
    series_keep_s: int = Field(
        default=86_400, ge=60, description="How far back the mistake-rate time series goes."
    )
    max_batch: int = Field(
        default=1000,
        ge=1,
        description="Most examples (or feedback items) in one batch request; larger batches "
        "hold a worker longer (deploy/bench/stall.py).",
    )
    one_writer: bool = Field(
        default=True,
        description="One worker at a time learns each model's /learn requests, the others hand "
        "theirs over (no request fails for contention); false: each worker commits its own, "
        "retrying when another committed first (PERCEPTRON_LEARN_ATTEMPTS).",
    )
    learn_wait_s: float = Field(
        default=10.0,
        gt=0,
        description="How long a /learn handed to the model's writer (the worker learning for "
        "it) waits for it before a 503 learn_timeout; the examples were then not learned. One "
        "that reaches the writer itself is learned however long its commit takes.",
    )
    learn_attempts: int = Field(
        default=50, ge=1, description="Optimistic retries of one /learn before answering 503."
    )
    auth: bool = Field(
        default=True, description="Require API keys; 'false' only for local use (logged loudly)."
    )
    api_keys: SecretStr | None = Field(
        default=None, description="Keys as 'role:key[:model|model]', separated by commas."
    )
    api_keys_file: Path | None = Field(
        default=None, description="A file of key entries, one per line (e.g. a mounted secret)."
    )
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        description="Largest request body, in bytes: a packed batch of 1000 x 390 values, or "
        "1000 x 100 as JSON numbers.",
    )
    max_import_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=1024,
        description="Largest body of an import (POST /models/{name}/import, admin): an export "
        "file, its checkpoints with it; a model of 2^18 weights and its averages takes 6 MB.",
    )
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        le=1024 * 1024,
        description="Largest request line and headers, in bytes (431 past it).",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="Time a connection has to send a request's headers (408 past it), from "
        "its opening or the request's first byte.",
    )
    body_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="Time a request has to send its body once its headers came (the "
        "connection is closed past it).",
    )
    max_client_connections: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Connections one worker process serves at once (503 past it).",
    )
    max_streams: int = Field(
        default=32,
        ge=1,
        le=10_000,
        description="Event streams (GET /models/{name}/events) one worker process holds open "
        "at once (503 too_many_streams past it).",
    )
    stream_poll_s: float = Field(
        default=0.25,
        ge=0.05,
        le=5.0,
        description="How often an open event stream reads its model's version and counters "
        "(one HMGET) to push what changed.",
    )
    stream_keepalive_s: float = Field(
        default=15.0,
        gt=0,
        le=300,
        description="An event stream with nothing new sends a comment this often, so that "
        "proxies keep it open.",
    )
    stream_max_s: float = Field(
        default=3600.0,
        gt=0,
        le=86_400,
        description="An event stream ends after this long; an EventSource connects again at "
        "once (its retry) and gets the figures anew: no connection is held for ever.",
    )
    max_features: int = Field(default=100_000, ge=1, description="Most features in one example.")
    max_name_length: int = Field(default=256, ge=1, description="Longest feature name.")
    max_hash_bits: int = Field(default=24, ge=1, le=30, description="Largest hash_bits.")
    max_classes: int = Field(default=1000, ge=2, le=9999, description="Most classes of a model.")
    max_models: int = Field(default=1000, ge=1, description="Most models in the store.")
    max_weights: int = Field(
        default=2**25, ge=1, description="Most weights of one model (rows x dimension)."
    )
    max_pending_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=0,
        description="Most bytes of predictions one model may hold awaiting their label "
        "(estimated; answered ones no longer count); past it /predict answers 429. 0: no limit.",
    )
    replica_memory_bytes: int = Field(
        default=1024 * 1024 * 1024,
        ge=1024 * 1024,
        description="Most bytes of model weights one worker keeps in memory; the least "
        "recently used models are dropped past it (and read again from Redis when used).",
    )
    store_check_s: float = Field(
        default=5.0,
        gt=0,
        description="How often each worker checks Redis's eviction policy and memory, and "
        "drops its copies of models deleted, reset or imported through another worker.",
    )
    connection_max_age_s: float = Field(
        default=0.0,
        ge=0,
        description="Ask a keep-alive client to reconnect once its connection is this old, so "
        "that connections spread over the workers (e.g. 2 for producers with few connections); "
        "0: never.",
    )
    writer_sheds_from_workers: int = Field(
        default=4,
        ge=0,
        description="With perceptron serve running this many workers or more, and no more "
        "workers than the cores it may use, a worker that "
        "writes a model other workers hand requests to asks its own clients to reconnect after "
        "each answer: their requests go to the other workers, and its core to the model's "
        "learning. 0: never.",
    )
    log_level: str = Field(default="info", description="Log level of the service.")
    access_log: bool = Field(
        default=False,
        description="One line per request on standard error (uvicorn's access log). Off by "
        "default: writing it cost 10-15% of a route's requests per second at 64 connections; "
        "the compose stack's nginx writes one of its own.",
    )


class SettingsError(ValueError):
    """Settings that cannot be read, said in one line that names each variable."""


def read_settings() -> Settings:
    """The settings of the environment; SettingsError naming each ``PERCEPTRON_*`` variable
    that is wrong, with what it holds and why, instead of pydantic's traceback."""
    try:
        return Settings()
    except ValidationError as e:
        said = []
        for error in e.errors():
            field = ".".join(str(part) for part in error["loc"])
            said.append(f"PERCEPTRON_{field.upper()}={error['input']!r}: {error['msg']}")
        raise SettingsError("; ".join(said)) from None
