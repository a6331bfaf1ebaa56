"""Layers import downward: the learner and the protocol are pure (no Redis, no web framework),
the store knows nothing of the API, the learning code on replicas needs no store, and the
Python client none of the server."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.servers  # a fresh interpreter per module

# module -> packages it must not pull in, even indirectly
PURE = {
    "service.learner": ("redis", "fastapi", "starlette", "service.store", "service.api"),
    "service.names": ("redis", "fastapi", "starlette", "numpy", "service.store", "service.api"),
    "service.protocol": ("redis", "fastapi", "starlette", "service.store", "service.api"),
    "service.learn_sequence": ("redis", "fastapi", "starlette", "service.store", "service.api"),
    "service.replica": ("redis", "fastapi", "starlette", "service.store", "service.api"),
    "service.handoff": ("redis", "fastapi", "starlette", "service.store", "service.api"),
    "service.store": (
        "fastapi",
        "starlette",
        "service.api",
        "service.learning",
        "service.startup",
    ),
    "service.replicas": ("fastapi", "starlette", "service.api", "service.learning"),
    "service.metrics": ("service.api", "service.learning", "service.store"),
    "service.group_commit": ("redis", "fastapi", "starlette", "service.store", "service.api"),
    # what users of the Python client install and import (client/, a distribution of its own,
    # perceptron-client): nothing of the server, not one service.* module, and not numpy, an
    # optional extra of it (tests/test_client_install.py installs it alone)
    "perceptron_client": (
        "service",
        "redis",
        "fastapi",
        "starlette",
        "uvicorn",
        "fakeredis",
        "numpy",
        "pybase64",
    ),
}


@pytest.mark.parametrize("module", sorted(PURE))
def test_a_module_does_not_pull_in_a_higher_layer(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {PURE[module]!r} "
        f"or any(m == p or m.startswith(p + '.') for p in {PURE[module]!r})]\n"
        "print(','.join(sorted(bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"
