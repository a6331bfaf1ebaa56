#!/usr/bin/env bash
# Prepare this checkout on a fresh Debian machine: system packages, then .venv with the service
# and the Python packages of the lock files in requirements/.
# Usage: deploy/setup.sh [test]   (the service and its replay command; "test" adds what the
# test suite needs)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "setup: $*" >&2; }
fail() {
  echo "setup: FAILED: $*" >&2
  exit 1
}

need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
if [ "${1:-}" = "test" ]; then
  # the dashboard's browser test drives Debian's Chromium (Playwright downloads no browser here)
  [ -x /usr/bin/chromium ] || need_apt+=(chromium)
  # nginx in front of the API processes: the compose topology run on loopback (tests/test_topology.py)
  [ -x /usr/sbin/nginx ] || need_apt+=(nginx)
  # a real Prometheus runs the Grafana dashboard's queries and the alert rules
  # (tests/test_grafana.py); promtool, in the same package, checks and unit-tests the rules
  # (tests/test_alerts.py)
  { [ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ]; } || need_apt+=(prometheus)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  say "installing system packages: ${need_apt[*]}"
  $sudo_cmd apt-get update -qq || fail "apt-get update (the list of Debian's packages) failed"
  # Quietly: no questions, needrestart (where installed) neither asks nor runs, and what the
  # packages' scripts print (debconf's and Perl's notes) is shown only if the install fails.
  apt_log=$(mktemp)
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 NEEDRESTART_MODE=l \
    apt-get install -y -qq -o Dpkg::Use-Pty=0 "${need_apt[@]}" >"$apt_log" 2>&1 \
    || { cat "$apt_log" >&2; fail "apt-get could not install ${need_apt[*]}"; }
  rm -f "$apt_log"
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$python" --version 2>&1)"
  "$python" -m venv .venv || fail "$python -m venv .venv (Debian: apt-get install python3-venv)"
fi

# The installer is pinned too: uv, at the version and with the hashes of
# requirements/installer.txt. The machine's own pip only installs that one file (uv has no
# dependencies, so whatever pip the venv came with resolves nothing); uv then installs the
# lock files. An older pip resolves a dependency's extra (pytest-cov's coverage[toml]) to the
# newest release on the index instead of the pinned one and fails under --require-hashes the
# day that release appears: the reason the packages are not installed by pip.
uv_wanted=$(sed -n 's/^uv==\([^ ;\\]*\).*/\1/p' requirements/installer.txt)
uv=.venv/bin/uv
if [ "$("$uv" --version 2>/dev/null | cut -d' ' -f2)" != "$uv_wanted" ]; then
  say "installing the installer: uv $uv_wanted (requirements/installer.txt)"
  # (the filter drops pip's notes about local index folders this machine may not have)
  .venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes \
    -r requirements/installer.txt 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2) \
    || fail "pip could not install uv $uv_wanted from requirements/installer.txt (is the package index reachable?)"
fi

# The pinned versions of requirements/ (bash deploy/lock.sh updates them), the same that
# deploy/Dockerfile installs; uv checks every file against its hash, and refuses a package
# whose dependencies the lock file does not pin. Then the package itself, editable. (The test
# lock holds every package of the replay lock: a checkout set up for the tests stays so, and
# deploy/serve.sh does not install again.)
lock="requirements/replay.txt"
if [ "${1:-}" = "test" ] || [ -f ".venv/.installed-test" ]; then lock="requirements/test.txt"; fi
stamp=".venv/.installed-$(basename "$lock" .txt)"
if [ ! -f "$stamp" ] || [ "$lock" -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
  || [ requirements/installer.txt -nt "$stamp" ]; then
  say "installing the Python packages of $lock with uv (hashes checked)"
  # (UV_SYSTEM_CERTS: the machine's certificate store, as pip uses it, a proxy's CA included)
  export UV_PYTHON=.venv/bin/python VIRTUAL_ENV=.venv UV_SYSTEM_CERTS="${UV_SYSTEM_CERTS-1}"
  started=$SECONDS
  "$uv" pip install --quiet --require-hashes -r requirements/build.txt -r "$lock" \
    || fail "uv could not install $lock: the message above says which package and why
  (the lock pins every package with its hashes: a hash mismatch means the file on the index
  is not the one locked; 'not found' that the index, or the network to it, is not reachable)"
  "$uv" pip install --quiet --no-deps --no-build-isolation -e . \
    || fail "uv could not install this checkout's package (pyproject.toml) into .venv"
  touch "$stamp"
  say "installed in $((SECONDS - started)) s"
fi

# A copy of the client installed into .venv (the README's `pip install ./client`, run in this
# venv) would shadow this checkout's client/, which the service and the tests import: removed.
if ! .venv/bin/python -c 'import pathlib, perceptron_client as c, sys
sys.exit(pathlib.Path("client").resolve() not in pathlib.Path(c.__file__).resolve().parents)' 2>/dev/null; then
  say "removing the copy of perceptron-client installed into .venv: this checkout's client/ is used"
  UV_PYTHON=.venv/bin/python VIRTUAL_ENV=.venv "$uv" pip uninstall --quiet perceptron-client \
    || fail "uv could not remove the copy of perceptron-client installed into .venv"
fi
