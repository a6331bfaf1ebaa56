"""The ``perceptron`` console command."""

from __future__ import annotations

import argparse
import os
import sys


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
        timeout_graceful_shutdown=10,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    _pin_blas_threads()
    parser = argparse.ArgumentParser(prog="perceptron", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the HTTP service (settings: PERCEPTRON_* variables)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1)
    p.set_defaults(func=serve)
    from . import replay

    p = sub.add_parser(
        "replay",
        help="stream a dataset through a running service and report its mistakes",
        description=replay.DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_arguments(p)
    p.set_defaults(func=replay.run)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
