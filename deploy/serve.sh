#!/usr/bin/env bash
# Run the service on http://127.0.0.1:8000 (embedded store unless PERCEPTRON_REDIS_URL is set).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
exec .venv/bin/perceptron serve "$@"
