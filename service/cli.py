"""The ``perceptron`` console command: ``serve``, ``replay`` and ``models``."""

from __future__ import annotations

import argparse
import copy
import os
import sys
from typing import Any

DESCRIPTION = """\
An online-learning perceptron served over HTTP, its weights kept in Redis.

  perceptron serve      run the service (settings: PERCEPTRON_* environment variables)
  perceptron replay     stream a dataset through a running service and count its mistakes
  perceptron models     list, show, create, delete, reset, export and import models
"""
EPILOG = "'perceptron COMMAND --help' describes a command and its options."


def _pin_blas_threads() -> None:
    # Vectors here are small: BLAS threads only burn the other cores. Set before numpy loads.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def _prometheus_dir() -> None:
    """Give the workers one fresh folder to share HTTP metrics in (multiprocess mode)."""
    import atexit
    import shutil
    import tempfile

    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path, exist_ok=True)
    else:
        path = tempfile.mkdtemp(prefix="perceptron-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
        atexit.register(shutil.rmtree, path, ignore_errors=True)


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging, with the service's own log ('perceptron') beside it."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["perceptron"] = {
        "handlers": ["default"],
        "level": level.upper(),
        "propagate": False,
    }
    return config


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .settings import Settings

    settings = Settings()
    if not settings.redis_url and settings.local_redis_dir:
        from .local_redis import serving_local_redis

        return serving_local_redis(settings.local_redis_dir, lambda: serve(args))
    if not settings.redis_url and args.workers > 1:
        sys.stderr.write(
            "The embedded store lives in one process: set PERCEPTRON_REDIS_URL to run "
            f"{args.workers} workers.\n"
        )
        return 2
    from .startup import check_settings

    try:
        # Here, once: a worker that fails its start-up would only be started again and again.
        check_settings(settings)
    except (ValueError, OSError, RuntimeError) as e:
        sys.stderr.write(f"perceptron serve: {e}\n")
        return 2
    _prometheus_dir()
    uvicorn.run(
        "service.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=settings.log_level,
        log_config=log_config(settings.log_level),
        timeout_graceful_shutdown=10,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    _pin_blas_threads()
    parser = argparse.ArgumentParser(
        prog="perceptron",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "serve",
        help="run the HTTP service",
        description="Run the HTTP service. Its settings are PERCEPTRON_* environment "
        "variables (the README's settings table); without PERCEPTRON_REDIS_URL it runs on "
        "the embedded in-process store, one worker.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    p.add_argument(
        "--workers",
        metavar="N",
        type=int,
        default=1,
        help="worker processes sharing the port; more than 1 needs PERCEPTRON_REDIS_URL",
    )
    p.set_defaults(func=serve)
    from . import manage, replay

    p = sub.add_parser(
        "replay",
        help="stream a dataset through a running service and report its mistakes",
        description=replay.DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_arguments(p)
    p.set_defaults(func=replay.run)
    p = sub.add_parser(
        "models",
        help="list, show, create, delete, reset, export or import models",
        description=manage.DESCRIPTION,
        epilog=manage.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    manage.add_arguments(p)
    p.set_defaults(func=manage.run)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
