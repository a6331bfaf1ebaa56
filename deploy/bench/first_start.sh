#!/usr/bin/env bash
# How long a newcomer waits: a fresh clone of this checkout's HEAD, its .venv made by the
# machine's own python3 (its bundled pip), then `bash deploy/serve.sh` until /readyz answers.
# Prints the seconds; run it twice to see the warm package cache.
#   bash deploy/bench/first_start.sh [PORT]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
port=${1:-18991}
dir=$(mktemp -d)
pid=""
trap '[ -z "$pid" ] || kill -INT "$pid" 2>/dev/null; sleep 2; rm -rf "$dir"' EXIT
git clone -q "$root" "$dir/clone"
cd "$dir/clone"
start=$(date +%s.%N)
bash deploy/serve.sh --port "$port" >"$dir/serve.log" 2>&1 &
pid=$!
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
  kill -0 "$pid" 2>/dev/null || { cat "$dir/serve.log"; exit 1; }
  sleep 0.1
done
echo "fresh clone to ready: $(echo "$(date +%s.%N) - $start" | bc) s"
