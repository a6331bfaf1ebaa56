"""Run Vowpal Wabbit's own daemon loop through the ``pylibvw`` extension.

The PyPI package ``vowpalwabbit`` ships no ``vw`` executable, only ``pylibvw``; but that
binding runs VW's command-line driver, daemon included:

    PYTHONPATH=DIR python vw_daemon.py --daemon --foreground --port 26542 --num_children 2

The parent process forks the children and waits for them (as ``vw --daemon`` does); each child
accepts one connection at a time and answers one prediction line per example line.
"""

from __future__ import annotations

import sys

import pylibvw  # type: ignore[import-not-found]


def main() -> int:
    vw = pylibvw.vw(sys.argv[1:])
    vw.run_parser()
    vw.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
