"""Loaded by each process of a service started with this folder on its PYTHONPATH (and
``REQUEST_PROBE_DIR`` set): from SIGUSR1 to SIGUSR2 it notes, in every thread, each of the
service's source files that runs a function, and then writes them to ``<dir>/<pid>.txt``.
Calls made in the asyncio tasks named in ``REQUEST_PROBE_SKIP_TASKS`` (comma-separated: the
rounds that come every few seconds whatever is asked) are left out."""

import asyncio
import os
import signal
import sys
import threading

_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "")
_SERVICE = os.path.join(_ROOT, "service", "")
_DIR = os.environ.get("REQUEST_PROBE_DIR", "")
_SKIP = set(os.environ.get("REQUEST_PROBE_SKIP_TASKS", "").split(","))
_files: set[str] = set()


def _note(frame, event, _arg):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
    if event == "call" and frame.f_code.co_filename.startswith(_SERVICE):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # a thread without an event loop
            task = None
        if task is None or task.get_name() not in _SKIP:
            _files.add(frame.f_code.co_filename[len(_ROOT) :])


def _start(*_: object) -> None:
    _files.clear()
    threading.setprofile(_note)
    sys.setprofile(_note)


def _stop(*_: object) -> None:
    sys.setprofile(None)
    threading.setprofile(None)
    with open(os.path.join(_DIR, f"{os.getpid()}.txt"), "w") as out:
        out.write("".join(f + "\n" for f in sorted(_files)))


if _DIR:
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
