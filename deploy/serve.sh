#!/usr/bin/env bash
# Run the service on http://127.0.0.1:8000 (embedded store unless PERCEPTRON_REDIS_URL is set).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
# Local use: no API keys unless asked for (the service warns loudly). Deployments set keys.
export PERCEPTRON_AUTH="${PERCEPTRON_AUTH:-false}"
exec .venv/bin/perceptron serve "$@"
