#!/usr/bin/env bash
# The one command that updates the lock files requirements/*.txt: every Python package pinned,
# with the hashes of its files, from the ranges in pyproject.toml, and the installer itself
# (uv, requirements/installer.txt) at UV_VERSION below. deploy/Dockerfile installs
# requirements/service.txt, deploy/setup.sh installs replay.txt or test.txt; all of them pin
# the same version of a package (service.txt and replay.txt are resolved within test.txt).
#
#   bash deploy/lock.sh                              # add what pyproject.toml gained; keep pins
#   bash deploy/lock.sh --upgrade                    # every package to its newest allowed release
#   bash deploy/lock.sh --upgrade-package fastapi    # one package
#
# Then run the tests (bash deploy/test.sh installs the new pins) and commit requirements/.
set -euo pipefail
cd "$(dirname "$0")/.."
# uv resolves and hashes here, and installs everywhere (deploy/setup.sh, deploy/Dockerfile); a
# fixed release of it, so the files change only when the pins do. To move to another release,
# change UV_VERSION and run this script: it locks the new release in requirements/installer.txt.
UV_VERSION=0.13.9
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
if [ "$(.venv/bin/uv --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  if grep -q "^uv==$UV_VERSION " requirements/installer.txt; then
    wanted=(--require-hashes -r requirements/installer.txt)
  else
    wanted=("uv==$UV_VERSION") # a new release, locked below
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check "${wanted[@]}" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
fi

# For every Linux and macOS machine and image with Python 3.11 or newer (pyproject.toml's
# requires-python), not only this one.
compile() {
  .venv/bin/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes \
    --custom-compile-command "bash deploy/lock.sh" "$@"
}
echo "uv==$UV_VERSION" | compile - -o requirements/installer.txt "$@"
compile pyproject.toml --extra test -o requirements/test.txt "$@"
compile pyproject.toml --extra replay -c requirements/test.txt -o requirements/replay.txt "$@"
compile pyproject.toml -c requirements/test.txt -o requirements/service.txt "$@"
# What builds the package itself (pyproject.toml's build-system.requires).
.venv/bin/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
  | compile - -o requirements/build.txt "$@"
