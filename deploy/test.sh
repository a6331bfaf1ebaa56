#!/usr/bin/env bash
# Run every check: lint, types, and the whole test suite against real servers it starts itself.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh test
.venv/bin/ruff check service tests
.venv/bin/ruff format --check service tests
.venv/bin/mypy service
exec .venv/bin/pytest "$@"
