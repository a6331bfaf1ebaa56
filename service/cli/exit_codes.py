"""What the ``perceptron`` commands share: their exit codes, one per cause and the same in every
command; where the commands that talk to a service find it (options, then the environment);
and the words for a file they cannot read or write.

Scripts act on the exit code alone; each command's ``--help`` lists the codes it may give
(``epilog``), from the table here.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import httpx

from perceptron_client import (
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    AuthError,
    ConflictError,
    NotFoundError,
    PerceptronError,
    UnavailableError,
)
from service.cli.checked_arguments import positive_number

URL_VARIABLE = "PERCEPTRON_URL"
KEY_VARIABLE = "PERCEPTRON_API_KEY"


class Exit(IntEnum):
    """The exit code of every ``perceptron`` command, one per cause."""

    DONE = 0
    FAILED = 1
    USAGE = 2
    NOT_FOUND = 3
    CONFLICT = 4
    AUTH = 5
    UNAVAILABLE = 6
    PORT_IN_USE = 7


MEANING = {
    Exit.DONE: "done (serve: stopped)",
    Exit.FAILED: "the service refused the request (invalid input) or failed (serve: did not start)",
    Exit.USAGE: "wrong usage (options, settings), or a file that cannot be read or written",
    Exit.NOT_FOUND: "no such model, checkpoint or challenger",
    Exit.CONFLICT: "a conflict with what the model is now: it exists with another "
    "configuration, a version no longer kept, a challenger id taken, a promotion refused",
    Exit.AUTH: "no API key, or a key that may not do this",
    Exit.UNAVAILABLE: "the service cannot be reached or is unavailable: try again later",
    Exit.PORT_IN_USE: "the port to listen on is in use",
}

# The codes of the commands that talk to a service (models, replay) and of the one that runs it
CLIENT_CODES = tuple(code for code in Exit if code is not Exit.PORT_IN_USE)
SERVE_CODES = (Exit.DONE, Exit.FAILED, Exit.USAGE, Exit.PORT_IN_USE)

_BY_ERROR: list[tuple[type[PerceptronError], Exit]] = [
    (NotFoundError, Exit.NOT_FOUND),
    (ConflictError, Exit.CONFLICT),
    (AuthError, Exit.AUTH),
    (UnavailableError, Exit.UNAVAILABLE),
]


def epilog(codes: tuple[Exit, ...]) -> str:
    """The 'exit codes:' section of a command's ``--help``."""
    return "exit codes:\n" + "".join(f"  {int(c)}  {MEANING[c]}\n" for c in codes)


def exit_for(error: PerceptronError | httpx.TransportError) -> Exit:
    """The exit code for an error answer of the service, or for no answer at all."""
    if isinstance(error, httpx.TransportError):
        return Exit.UNAVAILABLE
    return next((code for cls, code in _BY_ERROR if isinstance(error, cls)), Exit.FAILED)


def unreachable(url: str, e: httpx.TransportError) -> PerceptronError:
    """No answer from the service at ``url``, said as an error without a status: ``unreachable``
    when the request was never sent, ``no_answer`` when it was (it may have been done)."""
    if isinstance(e, httpx.ConnectError | httpx.ConnectTimeout | httpx.UnsupportedProtocol):
        return PerceptronError(0, "unreachable", f"cannot reach {url} ({type(e).__name__}: {e})")
    return PerceptronError(
        0,
        "no_answer",
        f"no answer from {url} ({type(e).__name__}: {e}); the request may have been done: "
        "look before you send it again",
    )


def failure(command: str, e: PerceptronError | str, as_json: bool) -> str:
    """What ``perceptron COMMAND`` says on stderr of a failure: an error the service answered
    (or ``unreachable``, ``no_answer``), or a wrong use of the command (a string); with --json:
    ``{"status", "code", "detail"}`` (status null but for the service's answers)."""
    if not as_json:
        said = e if isinstance(e, str) else e.detail if e.status == 0 else str(e)
        return f"perceptron {command}: {said}"
    if isinstance(e, str):
        return json.dumps({"status": None, "code": "usage", "detail": e})
    return json.dumps({"status": e.status or None, "code": e.code, "detail": e.detail})


# --- the service a command talks to -------------------------------------------------------------


@dataclass(frozen=True)
class ServiceTarget:
    """Where a command sends its requests, and with which key."""

    url: str
    api_key: str | None
    timeout: float


def add_service_options(group: argparse._ArgumentGroup) -> None:
    """--url, --api-key and --timeout, read by ``service_target``."""
    group.add_argument("--url", help=f"service URL (default: ${URL_VARIABLE}, else {DEFAULT_URL})")
    group.add_argument("--api-key", metavar="KEY", help=f"API key (default: ${KEY_VARIABLE})")
    group.add_argument(
        "--timeout",
        metavar="S",
        type=positive_number,
        default=DEFAULT_TIMEOUT,
        help=f"seconds a request ({DEFAULT_TIMEOUT:g})",
    )


def service_target(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> ServiceTarget:
    """The service of a command's options, each missing one from the environment: the URL
    and the key together, so that a key never goes to a service other than the one named."""
    url = args.url or environ.get(URL_VARIABLE) or DEFAULT_URL
    api_key = args.api_key or environ.get(KEY_VARIABLE) or None
    return ServiceTarget(checked_url(url), api_key, args.timeout)


def checked_url(url: str) -> str:
    """``url``, when it names a service (http or https, and a host), else a ValueError that
    says so (before anything is sent)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise ValueError(f"{url[:200]!r} is not a URL ({e}).") from e
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{url[:200]!r} is not a service's URL: http(s)://HOST[:PORT].")
    return url


# --- files ------------------------------------------------------------------------------------


def _not_a_folder(path: Path) -> Path | None:
    """The first part of ``path``'s folder that exists and is not a folder, if any."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def _missing_folder(path: Path) -> Path | None:
    """The first folder on the way to ``path`` that does not exist, if any."""
    for parent in reversed(path.parents):
        if not parent.exists():
            return parent
    return None


def _cause(path: Path, error: OSError | None, writing: bool) -> str:
    if error is not None and error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "permission denied" if error.errno != errno.EROFS else "read-only file system"
    if path.is_dir():
        return "it is a folder, not a file"
    if (part := _not_a_folder(path)) is not None:
        return f"{part} is a file, not a folder"
    if (missing := _missing_folder(path)) is not None:
        return f"the folder {missing} does not exist"
    if not path.exists() and not writing:
        return "no such file"
    if error is None:
        return "permission denied"
    return (error.strerror or str(error)).lower()


def file_error(path: str | os.PathLike[str], error: OSError, *, writing: bool = False) -> str:
    """One line naming the file and why it cannot be read (or written)."""
    verb = "write" if writing else "read"
    return f"cannot {verb} {os.fspath(path)}: {_cause(Path(path), error, writing)}"


def unwritable(path: str | os.PathLike[str]) -> str | None:
    """Why a file cannot be written at ``path`` (``file_error``'s words), or None if it can.

    Checked before the work whose result goes there, so that none of it is thrown away.
    """
    p = Path(path)
    folder = p.parent
    if (
        p.is_dir()
        or not folder.is_dir()
        or not os.access(folder, os.W_OK | os.X_OK)
        or (p.exists() and not os.access(p, os.W_OK))
    ):
        return f"cannot write {os.fspath(path)}: {_cause(p, None, writing=True)}"
    return None
