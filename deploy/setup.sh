#!/usr/bin/env bash
# Prepare this checkout on a fresh Debian machine: system packages, then .venv with the service
# and the Python packages of the lock files in requirements/.
# Usage: deploy/setup.sh [test]   (the service and its replay command; "test" adds what the
# test suite needs)
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
if [ "${1:-}" = "test" ]; then
  # the dashboard's browser test drives Debian's Chromium (Playwright downloads no browser here)
  [ -x /usr/bin/chromium ] || need_apt+=(chromium)
  # nginx in front of the API processes: the compose topology run on loopback (tests/test_topology.py)
  [ -x /usr/sbin/nginx ] || need_apt+=(nginx)
  # a real Prometheus runs the Grafana dashboard's queries (tests/test_grafana.py)
  [ -x /usr/bin/prometheus ] || need_apt+=(prometheus)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "installing system packages: ${need_apt[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
# The pinned versions of requirements/ (bash deploy/lock.sh updates them), the same that
# deploy/Dockerfile installs; pip checks every file against its hash, and refuses a package
# whose dependencies the lock file does not pin. Then the package itself, editable. (The test
# lock holds every package of the replay lock: a checkout set up for the tests stays so, and
# deploy/serve.sh does not install again.)
lock="requirements/replay.txt"
if [ "${1:-}" = "test" ] || [ -f ".venv/.installed-test" ]; then lock="requirements/test.txt"; fi
stamp=".venv/.installed-$(basename "$lock" .txt)"
if [ ! -f "$stamp" ] || [ "$lock" -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # (the filter drops pip's notes about local index folders this machine may not have)
  pip_install() {
    .venv/bin/pip install -q --disable-pip-version-check "$@" \
      2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
  }
  pip_install --require-hashes -r requirements/build.txt -r "$lock"
  pip_install --no-deps --no-build-isolation -e .
  touch "$stamp"
fi
