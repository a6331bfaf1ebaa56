#!/usr/bin/env bash
# Run every check: lint, types, and the whole test suite against real servers it starts itself.
# Without arguments, with the coverage of service/ (in-process: see docs/tests.md) held to a floor.
# Arguments go to pytest instead: e.g. deploy/test.sh -m fast (the fast layer alone).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh test
.venv/bin/ruff check service tests deploy client
.venv/bin/ruff format --check service tests deploy client
# the files of pyproject.toml's [tool.mypy]: service/, tests/, deploy/ and client/
.venv/bin/mypy
if [ $# -gt 0 ]; then
  exec .venv/bin/pytest "$@"
fi
# The fast layer first, with a floor of its own just below what it measured (90%), then the
# rest, its coverage added to the fast layer's, with the floor of the whole suite just below
# what it measured (93.6%; docs/tests.md). Each test runs once.
.venv/bin/pytest -m fast --cov --cov-report= --cov-fail-under=89
exec .venv/bin/pytest -m "not fast" --cov --cov-append --cov-report=term --cov-fail-under=92.5
