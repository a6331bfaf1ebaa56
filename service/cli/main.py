"""The ``perceptron`` console command: ``serve``, ``replay`` and ``models``."""

from __future__ import annotations

import argparse
import copy
import errno
import http.client
import logging
import logging.config
import os
import shutil
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perceptron_client import DEFAULT_URL
from service.cli.checked_arguments import Parser, port, positive_int
from service.cli.exit_codes import CLIENT_CODES, SERVE_CODES, Exit, epilog

if TYPE_CHECKING:
    from fastapi import FastAPI

    from service.settings import Settings

DESCRIPTION = """\
An online-learning perceptron served over HTTP, its weights kept in Redis.

  perceptron serve      run the service (settings: PERCEPTRON_* environment variables)
  perceptron replay     stream a dataset through a running service and count its mistakes
  perceptron models     list, show, create, delete, reset, export and import models; their
                        checkpoints, rollbacks, undos, drift and challengers (and make them
                        from or into scikit-learn estimators)
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
    config.setdefault("filters", {})["probe"] = {"()": "service.api.edge.QuietProbe"}
    config["loggers"]["uvicorn.access"]["filters"] = ["probe"]
    return config


# How many workers ``perceptron serve`` runs, told to each of them (worker_app) through the
# environment they inherit: not a setting.
SERVE_WORKERS = "PERCEPTRON_SERVE_WORKERS"


def worker_app() -> FastAPI:
    """The app of a worker of ``perceptron serve``: its settings were checked before any worker
    started, and auth being off said there, once for all workers."""
    from service.app import create_app
    from service.engine import worker_gc
    from service.learner import kernel

    workers = int(os.environ.get(SERVE_WORKERS, "1"))
    app = create_app(warn_auth_off=False, workers=workers)
    kernel.load()  # the learners' kernel, loaded before the heap is frozen: out of collections
    worker_gc.settle()  # the heap start-up built stays out of every collection (worker_gc.py)
    return app


def listen_problem(host: str, port: int) -> tuple[Exit, str] | None:
    """Why the service cannot listen on ``host``:``port``, tried before anything starts (its
    exit code and words), or None."""
    try:
        found = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as e:
        return Exit.USAGE, f"cannot listen on {host}: {e.strerror} (--host)"
    for family, kind, proto, _, address in found:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return Exit.PORT_IN_USE, (
                        f"port {port} on {host} is in use (another perceptron serve?): "
                        "pick another with --port"
                    )
                return Exit.USAGE, f"cannot listen on {host} port {port}: {e.strerror}"
    return None


def _url_host(host: str) -> str:
    """The host to reach a service listening on ``host`` at, in a URL."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def banner(host: str, port: int, settings: Settings) -> str:
    """Where things are, once the service answers: the dashboard, the docs, a first request."""
    base = f"http://{_url_host(host)}:{port}"
    every = host in ("", "0.0.0.0", "::")
    where = f" (listening on {host}: every address of this machine)" if every else ""
    key = ' -H "Authorization: Bearer $PERCEPTRON_API_KEY"' if settings.auth else ""
    url = "" if base == DEFAULT_URL else f" --url {base}"  # (the commands' default)
    if settings.default_model:
        body = """'{"features": {"word=free": 1, "word=offer": 1}}'"""
        first = f"curl -s {base}/predict{key} -H 'content-type: application/json' -d {body}"
    else:
        first = f"curl -s {base}/models{key}"
    return (
        f"perceptron serve: ready on {base}{where}\n"
        f"  dashboard  {base}/dashboard\n"
        f"  API docs   {base}/docs\n"
        f"  try        {first}\n"
        f"  commands   {command_path()} models list{url}   (and --help)\n"
    )


def command_path(cwd: Path | None = None) -> str:
    """How to run this ``perceptron`` from ``cwd``: its name where the PATH finds it, else its
    path (``.venv/bin/perceptron`` from a checkout whose environment is not activated)."""
    here = Path(sys.executable).with_name("perceptron")
    found = shutil.which("perceptron")
    if found is not None and (not here.exists() or Path(found).resolve() == here.resolve()):
        return "perceptron"
    try:
        return str(here.relative_to(cwd or Path.cwd()))
    except ValueError:
        return str(here)


class _Banner(threading.Thread):
    """Writes ``banner`` once the service answers HTTP; stops asking when told to."""

    def __init__(self, host: str, port: int, text: str) -> None:
        super().__init__(name="perceptron-banner", daemon=True)
        self.host = _url_host(host).strip("[]")
        self.port = port
        self.text = text
        self.stopped = threading.Event()

    def _answers(self) -> bool:
        from service.api.edge import PROBE

        conn = http.client.HTTPConnection(self.host, self.port, timeout=2)
        try:
            conn.request("GET", PROBE)
            return conn.getresponse().status > 0
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def run(self) -> None:
        while not self.stopped.is_set():
            if self._answers():
                if not self.stopped.is_set():
                    sys.stderr.write(self.text)
                    sys.stderr.flush()
                return
            self.stopped.wait(0.2)


def serve(args: argparse.Namespace) -> int:
    from service.settings import Settings, SettingsError, read_settings

    try:
        settings = read_settings()
    except SettingsError as e:
        sys.stderr.write(f"perceptron serve: {e}\n")
        return Exit.USAGE
    local = not settings.redis_url and settings.local_redis_dir
    if not settings.redis_url and not local and args.workers > 1:
        sys.stderr.write(
            "The embedded store lives in one process: set PERCEPTRON_REDIS_URL to run "
            f"{args.workers} workers.\n"
        )
        return Exit.USAGE
    if (problem := listen_problem(args.host, args.port)) is not None:
        code, said = problem  # said before anything starts, the local redis-server included
        sys.stderr.write(f"perceptron serve: {said}\n")
        return code
    if local:
        from service.cli.local_redis import serving_local_redis

        # Its URL in PERCEPTRON_REDIS_URL, for the settings read again and the workers'
        return serving_local_redis(local, lambda: _serve(args, Settings()))
    return _serve(args, settings)


def _compile_kernel() -> None:
    """Compile the learners' kernel once, in a process of its own, before the workers start:
    each then reads it from numba's cache (a second) instead of all compiling it at once."""
    import shutil
    import subprocess

    seed, cache = os.environ.get("NUMBA_CACHE_SEED"), os.environ.get("NUMBA_CACHE_DIR")
    if seed and cache and os.path.isdir(seed) and not os.path.exists(cache):
        shutil.copytree(seed, cache)  # (an image's kernel, compiled when it was built)
    load = "from service.learner import kernel; kernel.load()"
    status: int | str
    try:
        status = subprocess.run([sys.executable, "-c", load], check=False, timeout=300).returncode
    except (subprocess.TimeoutExpired, OSError) as e:
        status = str(e)
    if status:  # (each worker then tries itself, and learns through the plans if not)
        logging.getLogger("perceptron").warning("compiling the learners' kernel failed: %s", status)


# uvicorn kills a worker that does not answer its ping in this time (5 s by default) and starts
# another: a worker busy in one long call that holds the interpreter (the largest import read
# on a loaded machine) answers late but is not hung, and killing it fails what it serves.
WORKER_HEALTHCHECK_S = 30


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    from service.api.edge import KEEP_ALIVE_S, BoundedHttpToolsProtocol
    from service.api.startup import check_settings

    config = log_config(settings.log_level)
    logging.config.dictConfig(config)  # so that what the checks log reads as the service's log
    try:
        # Here, once: a worker that fails its start-up would only be started again and again.
        check_settings(settings)
    except (ValueError, OSError, RuntimeError) as e:
        sys.stderr.write(f"perceptron serve: {e}\n")
        return Exit.USAGE
    _prometheus_dir()
    _compile_kernel()
    os.environ[SERVE_WORKERS] = str(args.workers)  # (for worker_app, in each worker)
    told = _Banner(args.host, args.port, banner(args.host, args.port, settings))
    told.start()
    try:
        uvicorn.run(
            "service.cli.main:worker_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=settings.log_level,
            log_config=config,
            access_log=settings.access_log,
            timeout_graceful_shutdown=10,
            # What one connection may cost a worker (api/edge.py): its head's size and
            # time, its body's time, idle time kept alive, connections at once
            http=BoundedHttpToolsProtocol,
            timeout_keep_alive=KEEP_ALIVE_S,
            limit_concurrency=settings.max_client_connections,
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
        )
    except SystemExit as e:
        if e.code != STARTUP_FAILURE:
            raise
        return Exit.FAILED  # uvicorn said why
    finally:
        told.stopped.set()
        told.join(5)
    return Exit.DONE


class _ServeHelp(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Each option's default, and the exit codes' epilog as written."""


def main(argv: list[str] | None = None) -> int:
    _pin_blas_threads()
    argv = sys.argv[1:] if argv is None else argv
    Parser.as_json = "--json" in argv
    parser = Parser(
        prog="perceptron",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "serve",
        help="run the HTTP service",
        description="Run the HTTP service. Its settings are PERCEPTRON_* environment\n"
        "variables (the table of docs/settings.md); with PERCEPTRON_REDIS_URL it uses that\n"
        "Redis, with PERCEPTRON_LOCAL_REDIS_DIR it starts a redis-server of its own keeping\n"
        "its data there (deploy/serve.sh sets it), else it runs on the embedded in-process\n"
        "store, one worker. Once it answers, it prints where the dashboard and the API docs\n"
        "are, and a first request to try.",
        epilog=epilog(SERVE_CODES),
        formatter_class=_ServeHelp,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=port, default=8000, help="port to listen on")
    p.add_argument(
        "--workers",
        metavar="N",
        type=positive_int,
        default=1,
        help="worker processes sharing the port; more than 1 needs PERCEPTRON_REDIS_URL",
    )
    p.set_defaults(func=serve)
    from service.cli import models_command as manage
    from service.cli import replay_command as replay

    p = sub.add_parser(
        "replay",
        help="stream a dataset through a running service and report its mistakes",
        description=replay.DESCRIPTION,
        epilog=epilog(CLIENT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_arguments(p)
    p.set_defaults(func=replay.run)
    p = sub.add_parser(
        "models",
        help="manage models: create, export, import, roll back, undo, challengers, drift...",
        description=manage.DESCRIPTION,
        epilog=manage.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    manage.add_arguments(p)
    p.set_defaults(func=manage.run)
    if argv[:1] == ["models"]:
        argv = manage.join_dash_values(argv)
    return _run(parser, argv)


def _run(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    """The command ``argv`` names, run; one whose reader closed early (``perceptron models
    list | head``) ends quietly: what was read stands."""
    try:
        try:
            args = parser.parse_args(argv)
            code: int = args.func(args)
        finally:
            sys.stdout.flush()  # (within the try: a --help's output too)
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it where a write cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    raise SystemExit(main())
