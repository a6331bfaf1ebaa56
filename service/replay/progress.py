"""The progress bar of a replay, drawn by tqdm."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm


def _bar(total: int, label: str, stream: TextIO) -> tqdm[Any] | None:
    """tqdm's bar on a terminal; None on anything else (a file, a pipe) or without tqdm."""
    if not stream.isatty():
        return None
    try:  # the replay extra: a service installed without it replays without a bar
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(
        total=total,
        desc=label,
        unit="ex",
        postfix=_mistakes(0, 0),
        file=stream,
        dynamic_ncols=True,
    )


def _mistakes(done: int, mistakes: int) -> str:
    return f"mistakes {mistakes} ({mistakes / done:.2%})" if done else "mistakes 0 (-)"


class Progress:
    """Examples labelled out of all, their rate, and the mistakes so far, on a terminal.

    Redrawn on one line at most ten times a second, and left on screen at the end. Nothing
    is written when ``stream`` (default: stderr) is not a terminal.
    """

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._bar = _bar(total, label, self._stream)

    def note(self, text: str) -> None:
        """A line of text on the stream (a terminal or not), above the bar when one is drawn."""
        if self._bar is not None:
            self._bar.write(text, file=self._stream)
        else:
            self._stream.write(text + "\n")
            self._stream.flush()

    def update(self, done: int, mistakes: int) -> None:
        """``done`` examples labelled so far, ``mistakes`` of them."""
        if self._bar is None:
            return
        self._bar.set_postfix_str(_mistakes(done, mistakes), refresh=False)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        """Leave the bar as it is and end its line (by whoever made it, when the replay ends
        or fails; again: nothing)."""
        if self._bar is not None:
            self._bar.close()
