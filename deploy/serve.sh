#!/usr/bin/env bash
# Run the service on http://127.0.0.1:8000. Without PERCEPTRON_REDIS_URL it starts a redis-server
# of its own, on a Unix socket, that keeps the models in data/redis (git-ignored), and stops it
# when the service stops. PERCEPTRON_LOCAL_REDIS_DIR picks another folder; set and empty, the
# embedded in-process store instead (one process, nothing kept).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
# Local use: no API keys unless asked for (the service warns loudly). Deployments set keys.
export PERCEPTRON_AUTH="${PERCEPTRON_AUTH:-false}"
if [ -z "${PERCEPTRON_REDIS_URL:-}" ]; then
  export PERCEPTRON_LOCAL_REDIS_DIR="${PERCEPTRON_LOCAL_REDIS_DIR-$PWD/data/redis}"
fi
exec .venv/bin/perceptron serve "$@"
