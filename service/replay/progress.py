"""The progress bar of a replay."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """A one-line progress bar on a terminal; on anything else, a line every 10%."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._last_tenth = 0
        self._last_done = -1

    def update(self, done: int, mistakes: int, final: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            if not final and now - self._last_draw < 0.1:
                return
        else:
            tenth = done * 10 // max(self.total, 1)
            if tenth <= self._last_tenth and not (final and done != self._last_done):
                return
            self._last_tenth = tenth
        self._last_done = done
        self._last_draw = now
        width = 24
        filled = width * done // max(self.total, 1)
        rate = f"{mistakes / done:6.2%}" if done else "   -  "
        speed = done / max(now - self.start, 1e-9)
        line = (
            f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
            f"mistakes {mistakes} ({rate}) {speed:,.0f} ex/s"
        )
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K" + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
