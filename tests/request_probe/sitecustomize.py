"""Loaded by each process of a service started with this folder on its PYTHONPATH (and
``REQUEST_PROBE_DIR`` set): from SIGUSR1 to SIGUSR2 it notes, in every thread, each of the
service's source files that runs a function, and then writes them to ``<dir>/<pid>.txt``."""

import os
import signal
import sys
import threading

_ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "")
_SERVICE = os.path.join(_ROOT, "service", "")
_DIR = os.environ.get("REQUEST_PROBE_DIR", "")
_files: set[str] = set()


def _note(frame, event, _arg):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
    if event == "call" and frame.f_code.co_filename.startswith(_SERVICE):
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
