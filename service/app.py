"""create_app(settings) -> FastAPI: the lifespan opens the store; errors map to HTTP here."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import (
    BusyLoadingError,
    RedisError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException

from service.admin.worker import Worker
from service.api import problems
from service.api.auth import Unauthorized
from service.api.connections import (
    RecycleConnections,
    ShedWhileWriting,
    usable_cores,
    writer_sheds,
)
from service.api.edge import Edge
from service.api.openapi import openapi_intro
from service.api.routes import (
    challenger_routes,
    dashboard,
    docs,
    drift_routes,
    events,
    health,
    history_routes,
    home,
    learner_routes,
    learning_routes,
    model_routes,
    scrape,
)
from service.api.startup import load_keys
from service.api.streams import Streams
from service.engine.tasks import cancel_all
from service.errors import ServiceError, TooManyPending, Unavailable, store_unavailable
from service.metrics.prometheus import forget_worker
from service.settings import Settings
from service.store import Store, describe_store, open_store
from service.store.connect import redis_password
from service.store.refusals import service_error, store_refusal

log = logging.getLogger("perceptron")


def create_app(
    settings: Settings | None = None,
    *,
    store: Callable[[], Store] | None = None,
    clock: Callable[[], float] = time.time,
    warn_auth_off: bool = True,
    workers: int = 1,
) -> FastAPI:
    """The app. For tests, which run it in-process on a store and a clock of their own:
    ``store`` makes the store each lifespan opens (and closes at shutdown); ``clock``.
    ``warn_auth_off=False``: the workers of ``perceptron serve``, which said it once for all;
    ``workers``: how many of them share its port."""
    settings = settings or Settings()
    keys = load_keys(settings, warn_auth_off=warn_auth_off)
    redis_password(settings)  # a missing or empty file stops start-up here, not per request

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log.info("store: %s", describe_store(settings))
        worker = Worker(store() if store else open_store(settings), settings, clock)
        app.state.worker = worker
        made = not settings.default_model
        warn = _Every(DEFAULT_LOG_S)  # why 'default' is not made yet: once a minute
        with suppress(Exception):  # Redis may not be up yet: both are tried again below
            await asyncio.wait_for(worker.models.check_store(), settings.redis_timeout_s)
            made = made or await _make_default(worker, warn)
        worker.start()
        starter = None if made else asyncio.create_task(_ensure_default(worker, warn))
        try:
            yield
        finally:
            app.state.streams.stop()  # (served in-process: no server told them)
            if starter is not None:
                await cancel_all([starter])
            await worker.close()
            await worker.store.close()
            forget_worker()

    app = FastAPI(
        title="Perceptron service",
        summary="An online perceptron over HTTP; its weights shared through Redis.",
        description=openapi_intro.DESCRIPTION,
        openapi_tags=openapi_intro.TAGS,
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served from this host by api/routes/docs.py, not from a CDN
        redoc_url=None,
    )
    _add_routes(app)
    app.state.keys = keys
    app.state.streams = Streams(settings.max_streams)
    _add_middleware(app, settings, workers)
    _add_error_handlers(app)
    return app


def _add_routes(app: FastAPI) -> None:
    app.include_router(learning_routes.router)  # first: the hot routes match soonest
    app.include_router(model_routes.router)
    app.include_router(history_routes.router)
    app.include_router(learner_routes.router)
    app.include_router(drift_routes.router)
    app.include_router(challenger_routes.router)
    app.include_router(events.router)
    app.include_router(health.router)
    app.include_router(dashboard.router)
    app.include_router(scrape.router)
    app.include_router(docs.router)
    app.include_router(home.router)
    app.mount("/dashboard/static", dashboard.static, name="dashboard-static")
    app.mount("/docs", docs.swagger_assets, name="docs-assets")
    app.mount("/redoc", docs.redoc_assets, name="redoc-assets")


def _add_middleware(app: FastAPI, settings: Settings, workers: int) -> None:
    app.add_middleware(
        Edge, max_bytes=settings.max_body_bytes, import_bytes=settings.max_import_bytes
    )
    if settings.connection_max_age_s:  # opt-in: only producers with few connections gain
        app.add_middleware(RecycleConnections, max_age_s=settings.connection_max_age_s)
    if writer_sheds(workers, settings.writer_sheds_from_workers, usable_cores()):
        app.add_middleware(ShedWhileWriting)


class _Every:
    """Say a thing at most once every ``period_s`` seconds: a retry loop's warnings."""

    def __init__(self, period_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.period_s, self.clock = period_s, clock
        self.last: float | None = None

    def __call__(self, message: str, *args: object) -> None:
        now = self.clock()
        if self.last is None or now - self.last >= self.period_s:
            self.last = now
            log.warning(message, *args)


DEFAULT_RETRY_S = 1.0  # between two attempts to create the 'default' model
DEFAULT_LOG_S = 60.0  # between two warnings that it is not created yet


async def _make_default(worker: Worker, warn: Callable[..., None] = log.warning) -> bool:
    """Create the 'default' model once per store; whether that is settled.

    Once made, the store remembers it: a deleted 'default' stays deleted across restarts
    (PERCEPTRON_DEFAULT_MODEL=false skips it altogether).
    """
    try:
        if not await worker.store.default_made():
            await worker.models.create_model(
                "default", {"hash_bits": min(18, worker.settings.max_hash_bits)}
            )
            await worker.store.mark_default_made()
    except Unavailable as e:  # e.g. a store that may evict keys: wait until it is fixed
        warn("the 'default' model is not created yet: %s", e.message)
        return False
    except ServiceError as e:
        log.warning("the 'default' model was not created: %s", e.message)
    return True


async def _ensure_default(worker: Worker, warn: Callable[..., None]) -> None:
    """:func:`_make_default`, retrying every second until the store answers; its warnings
    once a minute (``warn``), not at every attempt."""
    while True:
        try:
            if await _make_default(worker, warn):
                return
        except Exception as e:  # the store may not be up yet
            warn("store not reachable yet (%s); will create 'default' later", e)
        await asyncio.sleep(DEFAULT_RETRY_S)


def _error(
    status: int, code: str, detail: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"detail": detail, "code": code}, status_code=status, headers=headers)


async def _explained(request: Request, code: str) -> Unavailable | None:
    """The store's reason for an answer that keys may have been evicted (Models.explain)."""
    worker: Worker | None = getattr(request.app.state, "worker", None)
    return None if worker is None else await worker.models.explain(code)


def _answer(exc: ServiceError) -> JSONResponse:
    headers = None
    if isinstance(exc, Unavailable | TooManyPending):
        headers = {"Retry-After": str(exc.retry_after_s)}
    elif isinstance(exc, Unauthorized):
        headers = {"WWW-Authenticate": "Bearer"}
    if exc.labelled_by is not None:
        body = {"detail": exc.message, "code": exc.code, "labelled_by": exc.labelled_by}
        return JSONResponse(body, status_code=exc.status, headers=headers)
    return _error(exc.status, exc.code, exc.message, headers)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def on_service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return _answer(await _explained(request, exc.code) or exc)

    @app.exception_handler(HTTPException)
    async def on_http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # FastAPI's own 400 is a body it could not decode (e.g. not UTF-8): not JSON either.
        if exc.status_code == 400:
            return _error(
                400, "malformed_json", "The request body is not valid JSON: send a JSON object."
            )
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = dict(exc.headers) if exc.headers else None
        return _error(exc.status_code, code, str(exc.detail), headers)

    @app.exception_handler(RequestValidationError)
    async def on_invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        route = request.scope.get("route")
        body = problems.body_schema(route)
        if first.get("type") == "json_invalid":
            return _error(400, "malformed_json", problems.not_json(first, body))
        content_type = request.headers.get("content-type", "")
        detail = problems.explain(errors, body, content_type, problems.parameters(route))
        return _error(422, "validation_error", detail)

    @app.exception_handler(RedisConnectionError)
    @app.exception_handler(RedisTimeoutError)
    async def on_store_down(request: Request, exc: Exception) -> JSONResponse:
        log.warning("store unavailable: %s", type(exc).__name__)
        with suppress(Exception):
            await request.app.state.worker.store.drop_idle_connections()
        down = store_unavailable()
        return _error(down.status, down.code, down.message, {"Retry-After": "1"})

    @app.exception_handler(RedisError)
    @app.exception_handler(BusyLoadingError)  # a ConnectionError too, yet Redis answered it
    async def on_store_refusal(request: Request, exc: Exception) -> JSONResponse:
        # Redis answered, but refused the command. Each write is one script that Redis
        # refuses before its first write, so nothing was half applied.
        code, detail = store_refusal(exc)
        if code == "internal_error":
            log.error("the store refused a command: %s", exc)
            return _error(500, code, detail)
        log.warning("store refused a command (%s): %s", code, exc)
        return _answer(await _explained(request, code) or service_error(exc))

    @app.exception_handler(Exception)
    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        # Starlette logs the traceback; the client still gets the documented JSON body.
        return _error(500, "internal_error", "The service failed to answer; this is a bug.")
