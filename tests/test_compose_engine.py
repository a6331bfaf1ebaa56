"""The compose stack on a real container engine: built, started and checked through nginx as a
user would, under the hardening the compose file promises.

The engine is whichever answers ``docker info``: the local socket, or ``DOCKER_HOST``. The stack
is built and started as ``docker compose up -d --build --wait`` does it (``PERCEPTRON_COMPOSE_PULL``
sets ``--pull``: ``missing`` by default, as a user's first ``up``; ``never`` where the base images
are already on the engine), as its own compose project on free loopback ports, beside any stack
of the checkout, and is taken down with its volumes at the end. Where no engine answers, each
test is skipped with the reason; ``PERCEPTRON_REQUIRE_ENGINE=1`` (CI's, ``.ci/run``) makes that
a failure. An engine that answers and then cannot build or start the stack fails the module.
About 1.5 minutes with the images cached; a machine's first run also builds the API image.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.cli.loopback import free_port, wait_until

pytestmark = pytest.mark.servers  # a Docker engine, its containers

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "perceptron-engine-check"
PULL = os.environ.get("PERCEPTRON_COMPOSE_PULL", "missing")
# Each service, the user it runs as: the compose file's `user`, else the image's USER.
USERS = {"redis": "redis", "api": "perceptron", "nginx": "nginx"}


@dataclass
class Stack:
    env: dict[str, str]
    http: str
    https_port: int
    keys: dict[str, str]  # role -> key
    secrets: list[str]  # every secret's value

    def compose(self, *args: str, files: tuple[str, ...] = ()) -> str:
        command = ["docker", "compose", "-p", PROJECT]
        for f in files:
            command += ["-f", f]
        done = subprocess.run(
            [*command, *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0:
            raise AssertionError(f"docker compose {' '.join(args)}: {done.stderr[-3000:]}")
        return done.stdout

    def containers(self) -> dict[str, list[dict[str, Any]]]:
        """Each service's containers, as docker inspect describes them."""
        ids = self.compose("ps", "-q").split()
        found: dict[str, list[dict[str, Any]]] = {}
        for c in json.loads(docker("inspect", *ids, env=self.env)):
            found.setdefault(c["Config"]["Labels"]["com.docker.compose.service"], []).append(c)
        return found

    def client(self, role: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.keys[role]}"} if role else {}
        return httpx.Client(base_url=self.http, headers=headers, timeout=30)

    def ready(self) -> None:
        """Until nginx answers /readyz with 200: every layer up, Redis included."""

        def answers() -> bool:
            try:
                return httpx.get(self.http + "/readyz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answers, timeout=120, what="/readyz through nginx")


def docker(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stderr[-2000:]}")
    return done.stdout


def engine() -> dict[str, str]:
    """The environment to reach a container engine that answers, with its compose plugin; the
    tests are skipped (failed, where an engine is required) when there is none."""
    docker_cli = shutil.which("docker")
    answers = docker_cli is not None and subprocess.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=60
    ).returncode == 0  # fmt: skip
    if not answers:
        why = (
            "no container engine answers `docker info` (the local socket or DOCKER_HOST): "
            "start one to run the compose stack's tests"
        )
        if os.environ.get("PERCEPTRON_REQUIRE_ENGINE") == "1":
            pytest.fail(f"{why} (PERCEPTRON_REQUIRE_ENGINE=1)")
        pytest.skip(why)
    env = dict(os.environ)
    plugin = subprocess.run(["docker", "compose", "version"], env=env, capture_output=True)
    if plugin.returncode != 0:
        pytest.fail(f"an engine answers but `docker compose` does not: {plugin.stderr[-500:]!r}")
    return env


def tls_files() -> list[Path]:
    """A self-signed certificate and its key in secrets/, where compose.tls.yml reads them;
    the files made here (a user's own are left alone)."""
    cert, key = ROOT / "secrets" / "tls_certificate.pem", ROOT / "secrets" / "tls_key.pem"
    if cert.exists() and key.exists():
        return []
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    key.chmod(0o444)  # nginx, its own user, reads it (compose.tls.yml)
    return [cert, key]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed: it makes the TLS check's certificate")
    env = engine()
    subprocess.run(["bash", "deploy/secrets.sh"], cwd=ROOT, check=True, capture_output=True)
    made = tls_files()
    http_port, https_port = free_port(), free_port()
    env = {**env, "HTTP_PORT": str(http_port), "HTTPS_PORT": str(https_port)}
    env["HTTPS_BIND"] = "127.0.0.1"
    keys: dict[str, str] = {}
    for line in (ROOT / "secrets" / "api_keys").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            role, key = line.split(":", 1)
            keys.setdefault(role.strip(), key.strip())
    secrets = [*keys.values(), (ROOT / "secrets" / "redis_password").read_text().strip()]
    s = Stack(env, f"http://127.0.0.1:{http_port}", https_port, keys, secrets)
    try:
        try:
            s.compose("up", "-d", "--build", "--pull", PULL, "--wait")
        except AssertionError as e:  # with what the services said
            raise AssertionError(f"{e}\n{s.compose('logs', '--tail', '20')[-4000:]}") from None
        s.ready()
        yield s
    finally:
        try:
            s.compose("down", "-v", "--timeout", "20")
        finally:
            for f in made:
                f.unlink(missing_ok=True)


def test_every_container_runs_as_its_user_on_a_read_only_root(stack: Stack) -> None:
    found = stack.containers()
    assert {k: len(v) for k, v in found.items()} == {"redis": 1, "api": 3, "nginx": 1}
    for service, containers in found.items():
        for c in containers:
            name = c["Name"].lstrip("/")
            assert c["State"]["Health"]["Status"] == "healthy", name
            host = c["HostConfig"]
            assert host["ReadonlyRootfs"] is True, name
            assert host["CapDrop"] == ["ALL"] and not host["CapAdd"], name
            assert "no-new-privileges:true" in host["SecurityOpt"], name
            assert docker("exec", name, "id", "-un", env=stack.env).strip() == USERS[service]
            write = subprocess.run(
                ["docker", "exec", name, "sh", "-c", "touch /written-here"],
                env=stack.env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert write.returncode != 0 and "Read-only file system" in write.stderr, name
            # Every process, the container's first included (nginx's master), unprivileged.
            uids = docker("exec", name, "sh", "-c", "cat /proc/[0-9]*/status", env=stack.env)
            real = re.findall(r"^Uid:\s+(\d+)", uids, re.M)
            assert real and "0" not in real, (name, real)


def test_keys_and_roles_through_nginx(stack: Stack) -> None:
    with stack.client() as anyone:
        assert anyone.post("/predict", json={"features": {"a": 1}}).status_code == 401
    with stack.client("predict") as reader:
        r = reader.put("/models/roles", json={"n_features": 2})
        assert (r.status_code, r.json()["code"]) == (403, "forbidden")
    with stack.client("admin") as admin:
        assert admin.put("/models/roles", json={"n_features": 2}).status_code == 201
        assert admin.delete("/models/roles").status_code == 204


def test_a_prediction_and_its_feedback_learn_through_nginx(stack: Stack) -> None:
    with stack.client("admin") as admin, stack.client("train") as trainer:
        assert admin.put("/models/e", json={"n_features": 2}).status_code == 201
        predicted = trainer.post("/predict", json={"model": "e", "features": [1.0, 2.0]})
        assert predicted.status_code == 200, predicted.text
        label = -predicted.json()["label"]  # a mistake: the model learns
        fed = trainer.post(
            "/feedback", json={"prediction_id": predicted.json()["prediction_id"], "label": label}
        )
        assert fed.status_code == 200 and fed.json()["mistake"] is True, fed.text
        assert admin.get("/models/e").json()["version"] == 1


def test_the_dashboard_and_the_api_docs_are_served(stack: Stack) -> None:
    with stack.client() as anyone:
        page = anyone.get("/dashboard")
        assert page.status_code == 200 and "<html" in page.text.lower()
        parts = re.findall(r'(?:src|href)="(dashboard/[^"]+)"', page.text)  # its scripts, styles
        assert len(parts) >= 3 and all(anyone.get("/" + p).status_code == 200 for p in parts)
        docs = anyone.get("/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower()
        assert anyone.get("/openapi.json").json()["info"]["title"] == "Perceptron service"


def weights(stack: Stack, name: str) -> dict[str, Any]:
    with stack.client("admin") as admin:
        r = admin.get(f"/models/{name}/weights")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


def test_a_model_survives_a_redis_restart_and_a_down_and_up(stack: Stack) -> None:
    with stack.client("admin") as admin:
        assert admin.put("/models/kept", json={"n_features": 3}).status_code == 201
        for x, y in (([1, 2, 3], 1), ([-1, 0, 2], -1), ([3, -2, 1], 1), ([0, 1, -1], -1)):
            r = admin.post("/learn", json={"model": "kept", "features": x, "label": y})
            assert r.status_code == 200, r.text
    before = weights(stack, "kept")
    assert before["version"] >= 1
    stack.compose("restart", "redis")
    stack.ready()
    assert weights(stack, "kept") == before
    stack.compose("down", "--timeout", "20")  # the volume stays
    stack.compose("up", "-d", "--pull", PULL, "--wait")
    stack.ready()
    assert weights(stack, "kept") == before


def test_no_secret_is_visible_in_inspect_or_a_process_list(stack: Stack) -> None:
    assert all(len(s) >= 16 for s in stack.secrets)
    found = stack.containers()
    ids = [c["Id"] for cs in found.values() for c in cs]
    seen = docker("inspect", *ids, env=stack.env) + docker(
        "compose", "-p", PROJECT, "top", env=stack.env
    )
    seen += subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    for c in found["api"][:1] + found["redis"] + found["nginx"]:
        name = c["Name"].lstrip("/")
        seen += docker(
            "exec",
            name,
            "sh",
            "-c",
            "cat /proc/[0-9]*/cmdline /proc/1/environ | tr '\\0' ' '",
            env=stack.env,
        )
    for secret in stack.secrets:
        assert secret not in seen
    # The secrets are where they should be: a file in the services that need one.
    api = found["api"][0]["Name"].lstrip("/")
    assert docker("exec", api, "ls", "/run/secrets", env=stack.env).split() == [
        "api_keys",
        "redis_password",
    ]


def test_nginx_serves_https_with_the_tls_file(stack: Stack) -> None:
    files = ("docker-compose.yml", "deploy/compose.tls.yml")
    stack.compose("up", "-d", "--pull", PULL, "--wait", files=files)
    try:
        with httpx.Client(verify=False, timeout=30) as c:  # the test's own self-signed one

            def answers() -> bool:
                try:
                    return c.get(f"https://127.0.0.1:{stack.https_port}/healthz").is_success
                except httpx.HTTPError:
                    return False

            wait_until(answers, timeout=60, what="HTTPS through nginx")
        nginx = stack.containers()["nginx"][0]
        assert nginx["HostConfig"]["ReadonlyRootfs"] is True
        assert nginx["State"]["Health"]["Status"] == "healthy"
    finally:
        stack.compose("up", "-d", "--pull", PULL, "--wait")  # back to plain HTTP alone
