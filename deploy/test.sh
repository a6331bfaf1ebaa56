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
# Each layer on two test processes (pytest-xdist; pytest-cov combines their coverage): the
# fast layer test by test (CPU-bound, in-process); the rest a module at a time on the same
# process (--dist loadfile), so a module's servers (its two_workers, the compose stack, the
# cluster) start once and its tests run in their order, one at a time. The servers layer
# mostly waits on its servers, so the two share the two cores; docs/tests.md has the timings.
.venv/bin/pytest -m fast -n 2 --cov --cov-report= --cov-fail-under=89
exec .venv/bin/pytest -m "not fast" -n 2 --dist loadfile \
  --cov --cov-append --cov-report=term --cov-fail-under=92.5
