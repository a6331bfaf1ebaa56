"""What docker-compose.yml and deploy/Dockerfile promise, run on loopback without Docker.

- Secrets as files: deploy/secrets.sh writes them; Redis starts through deploy/redis-start.sh
  with compose's arguments and reads its password from its file; the API runs with compose's
  environment, its /run/secrets/ paths pointed at those files. Nothing secret shows in a
  process's command line or environment, and nothing starts without its secret.
- Liveness apart from readiness: during a Redis outage the container health check (compose's
  command, run as is) passes while /readyz says 503, and readiness comes back with Redis.
- The image's build stage (the Dockerfile's own COPY and RUN lines, /opt/venv and /src put in a
  temporary folder) installs the lock file with its hashes into an environment without pip
  or setuptools, and the service runs from it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import redis
import yaml

from service.api.startup import check_settings
from service.app import create_app
from service.cli.loopback import free_port, wait_until
from service.settings import Settings

from .servers import RedisServer
from .test_compose import DOCKERFILE, interpolate, stages

pytestmark = pytest.mark.servers  # Redis and API processes

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
SECRETS_DIR = "/run/secrets/"


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    doc: dict[str, Any] = interpolate(yaml.safe_load(COMPOSE.read_text()), {})
    s: dict[str, dict[str, Any]] = doc["services"]
    return s


class Started:
    """Processes this test started, each in its own session; stopped by their own PIDs."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its own group: it and its workers
                proc.wait()

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)


@pytest.fixture
def started() -> Iterator[Started]:
    s = Started()
    try:
        yield s
    finally:
        s.stop_all()


def local(path: str, secrets: Path) -> str:
    """A /run/secrets/NAME path of the containers, as the file NAME under ``secrets`` here."""
    assert path.startswith(SECRETS_DIR), path
    return str(secrets / path.removeprefix(SECRETS_DIR))


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def shown(pid: int) -> bytes:
    """What `ps` and `docker inspect` could show of a process: command line and environment."""
    try:
        return (Path(f"/proc/{pid}/cmdline").read_bytes() + b"\0") + Path(
            f"/proc/{pid}/environ"
        ).read_bytes()
    except OSError:
        return b""


def serve_cmd(port: int, workers: int) -> list[str]:
    return [sys.executable, "-m", "service.cli.main", "serve", "--host", "127.0.0.1",
            "--port", str(port), "--workers", str(workers)]  # fmt: skip


def healthcheck(test: list[str], port: int) -> subprocess.CompletedProcess[str]:
    """A compose health check of the api service, run here against ``port`` instead of 8000."""
    assert test[0] == "CMD"
    cmd = [sys.executable if w == "python" else w.replace(":8000/", f":{port}/") for w in test[1:]]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def without_secret_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERCEPTRON_", "REDIS"))}
    return {**env, **extra}


# -- secrets as files ---------------------------------------------------------------------------


def test_redis_and_the_api_run_on_their_secret_files(
    services: dict[str, dict[str, Any]], started: Started, tmp_path: Path
) -> None:
    secrets = tmp_path / "secrets"
    subprocess.run(["bash", "deploy/secrets.sh", str(secrets)], cwd=ROOT, check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    assert secrets.stat().st_mode & 0o777 == 0o700
    password = (secrets / "redis_password").read_text().rstrip("\n")
    keys = dict(
        line.split(":", 1) for line in (secrets / "api_keys").read_text().splitlines()
        if line and not line.startswith("#")
    )  # fmt: skip
    assert set(keys) == {"admin", "train", "predict"} and len(password) >= 32
    assert keys["predict"] == (secrets / "prometheus_api_key").read_text().strip()
    secret_values = [password.encode(), *(k.encode() for k in keys.values())]

    # Redis as compose starts it: its entrypoint and command, the secret's file, on loopback.
    r = services["redis"]
    script_in_container = r["entrypoint"][1]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in r["volumes"]}
    (password_in_container,) = [SECRETS_DIR + s for s in r["secrets"] if s == "redis_password"]
    port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    redis_proc = started.start(
        [r["entrypoint"][0], str(ROOT / mounts[script_in_container]), *r["command"],
         "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--daemonize", "no"],
        without_secret_env({
            "REDIS_PASSWORD_FILE": local(password_in_container, secrets),
            "REDIS_RUN_DIR": str(tmp_path / "acl"),
            "REDIS_CONF": str(ROOT / "deploy" / "redis.conf"),
        }),
        tmp_path / "redis.log",
    )  # fmt: skip
    client = redis.Redis(port=port, password=password)
    wait_until(client.ping, timeout=20, what="redis-server with its password")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, password="not" + password).ping()
    config = client.config_get("*")
    maxmemory = config["maxmemory"]  # compose's REDIS_MAXMEMORY default, 1gb
    assert maxmemory is not None and int(maxmemory) == 1024**3
    assert config["maxmemory-policy"] == "noeviction" and config["appendonly"] == "yes"
    assert config["protected-mode"] == "yes"
    acl = next((tmp_path / "acl").iterdir())
    assert acl.stat().st_mode & 0o777 == 0o600 and password not in acl.read_text()
    # Compose's health check of Redis, with its secret's path and the port made local.
    (check,) = [w for w in r["healthcheck"]["test"] if "redis-cli" in w]
    check = check.replace("-h 127.0.0.1", f"-h 127.0.0.1 -p {port}")
    here = check.replace(password_in_container, local(password_in_container, secrets))
    assert subprocess.run(["sh", "-c", here], timeout=30).returncode == 0
    (tmp_path / "wrong").write_text("wrong\n")
    wrong = check.replace(password_in_container, str(tmp_path / "wrong"))
    assert subprocess.run(["sh", "-c", wrong], timeout=30).returncode != 0

    # The API with compose's environment: its secrets' paths and Redis's address made local.
    api = services["api"]
    env: dict[str, str] = {}
    for key, value in api["environment"].items():
        value = str(value)
        if value.startswith(SECRETS_DIR):
            value = local(value, secrets)
        if key == "PERCEPTRON_REDIS_URL":
            url = urlsplit(value)
            assert url.hostname == "redis" and url.password is None
            value = urlunsplit(url._replace(netloc=f"127.0.0.1:{port}"))
        env[key] = value
    http = free_port()
    api_proc = started.start(serve_cmd(http, 2), without_secret_env(env), tmp_path / "api.log")
    base = f"http://127.0.0.1:{http}"
    try:
        wait_until(lambda: httpx.get(base + "/readyz", timeout=2).status_code == 200, timeout=60,
                   what="the API ready on Redis with the password from its file")  # fmt: skip
    except TimeoutError:
        pytest.fail((tmp_path / "api.log").read_text()[-3000:])
    with httpx.Client(base_url=base, timeout=10) as c:
        admin = {"Authorization": f"Bearer {keys['admin']}"}
        assert c.get("/models").status_code == 401
        assert c.put("/models/secret", json={"classes": [0, 1], "n_features": 2},
                     headers=admin).status_code == 201  # fmt: skip
        train = {"Authorization": f"Bearer {keys['train']}"}
        learn = {"model": "secret", "features": [1, 0], "label": 1}
        assert c.post("/learn", json=learn, headers=train).status_code == 200
        scrape = c.get("/metrics", headers={"Authorization": f"Bearer {keys['predict']}"})
        assert scrape.status_code == 200
    assert client.exists("pcp:models")  # the API wrote to this Redis, with the password

    # No secret in any command line or environment of Redis, the API or its workers.
    pids = descendants(redis_proc.pid) + descendants(api_proc.pid)
    assert len(pids) >= 4  # redis-server, the API, its two workers
    for pid in pids:
        seen = shown(pid)
        assert seen and not [s for s in secret_values if s in seen], pid


def test_nothing_starts_without_its_secret(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    missing = tmp_path / "missing"
    for path in (empty, missing):
        r = subprocess.run(
            ["sh", "deploy/redis-start.sh", "--port", str(free_port())], cwd=ROOT,
            env=without_secret_env({"REDIS_PASSWORD_FILE": str(path),
                                    "REDIS_RUN_DIR": str(tmp_path / "acl")}),
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert r.returncode == 1 and str(path) in r.stderr, r
        assert not (tmp_path / "acl").exists()
    keys = tmp_path / "keys"
    keys.write_text("admin:" + "k" * 32 + "\n")
    url = "redis://127.0.0.1:1/0"
    # `perceptron serve` checks before starting any worker (a worker that fails its start-up
    # would only be started again): it exits 2 and says why.
    r = subprocess.run(
        serve_cmd(free_port(), 2),
        env=without_secret_env({"PERCEPTRON_REDIS_URL": url,
                                "PERCEPTRON_REDIS_PASSWORD_FILE": str(missing),
                                "PERCEPTRON_API_KEYS_FILE": str(keys)}),
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2 and str(missing) in r.stderr, r.stderr[-2000:]
    # What it checks, and create_app (each worker) refuses the same.
    cases = {
        "empty password file": (
            Settings(redis_url=url, redis_password_file=empty, api_keys_file=keys),
            "PERCEPTRON_REDIS_PASSWORD_FILE",
        ),
        "two passwords": (
            Settings(redis_url="redis://:pw@127.0.0.1:1/0", redis_password_file=keys,
                     api_keys_file=keys),
            "give the password one way",
        ),
        "no API keys file": (
            Settings(redis_url=url, redis_password_file=keys, api_keys_file=missing),
            str(missing),
        ),
    }  # fmt: skip
    for what, (settings, said) in cases.items():
        for check in (check_settings, create_app):
            with pytest.raises((ValueError, OSError)) as info:
                check(settings)
            assert said in str(info.value), (what, check, info.value)
    check_settings(Settings(redis_url=url, redis_password_file=keys, api_keys_file=keys))


# -- liveness apart from readiness --------------------------------------------------------------


def test_liveness_holds_through_a_redis_outage_while_readiness_follows_redis(
    services: dict[str, dict[str, Any]], started: Started, tmp_path: Path
) -> None:
    """Compose's own health check of the api service passes whether Redis answers or not;
    /readyz says 503 while it does not, and 200 once it does, with no restart."""
    store = RedisServer()  # its port, nothing listening on it yet: Redis is down
    http = free_port()
    env = without_secret_env({"PERCEPTRON_REDIS_URL": store.url, "PERCEPTRON_AUTH": "false",
                              "PERCEPTRON_REDIS_TIMEOUT_S": "1"})  # fmt: skip
    api = started.start(serve_cmd(http, 2), env, tmp_path / "api.log")
    base = f"http://127.0.0.1:{http}"
    test = services["api"]["healthcheck"]["test"]
    try:
        wait_until(lambda: httpx.get(base + "/healthz", timeout=2).status_code == 200,
                   timeout=60, what="the API alive without Redis")  # fmt: skip

        def probes() -> tuple[int, int, int]:
            ready = httpx.get(base + "/readyz", timeout=5)
            return healthcheck(test, http).returncode, ready.status_code, api.poll() or 0

        assert probes() == (0, 503, 0)  # alive, not ready: the container stays healthy
        assert httpx.get(base + "/readyz", timeout=5).json()["code"] == "store_unavailable"
        store.start()
        wait_until(lambda: probes() == (0, 200, 0), timeout=20, what="ready once Redis is up")
        store.stop()
        assert probes() == (0, 503, 0)
        store.start()
        wait_until(lambda: probes() == (0, 200, 0), timeout=20, what="ready again")
    finally:
        store.stop()
        shutil.rmtree(store.dir, ignore_errors=True)
    assert api.poll() is None, "the API process was restarted or died"
    # The check fails when the process does not answer: it is a real liveness probe.
    started.stop(api)
    assert healthcheck(test, http).returncode != 0


# -- the image's build stage, from the lock -----------------------------------------------------


def test_the_image_build_stage_installs_the_lock_and_the_service_runs_from_it(
    started: Started, tmp_path: Path
) -> None:
    build, _ = stages(DOCKERFILE.read_text())
    paths = {"/opt/venv": tmp_path / "venv", "/src": tmp_path / "src"}

    def here(text: str) -> str:
        for container, path in paths.items():
            text = re.sub(rf"{re.escape(container)}(?=[/\s]|$)", str(path), text)
        return text

    # `python` is this environment's (with the locked setuptools and uv, as the stage's has);
    # pip's and uv's caches only save downloads: the hashes are checked all the same.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    workdir = ROOT
    for word, args in build[1:]:
        if word == "ENV":
            for key, value in re.findall(r"(\w+)=(\S+)", args):
                if key not in ("PIP_NO_CACHE_DIR", "UV_NO_CACHE"):
                    env[key] = value
        elif word == "WORKDIR":
            workdir = Path(here(args))
            workdir.mkdir(parents=True, exist_ok=True)
        elif word == "COPY":  # a folder's content into the destination, as Docker does
            *sources, dest = args.split()
            target = workdir / dest
            for source in map(ROOT.joinpath, sources):
                if source.is_dir():
                    ignore = shutil.ignore_patterns("__pycache__")
                    shutil.copytree(source, target, dirs_exist_ok=True, ignore=ignore)
                else:
                    into = target / source.name if dest.endswith("/") else target
                    into.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, into)
        elif word == "RUN":
            r = subprocess.run(["sh", "-c", here(args)], cwd=workdir, env=env,
                               capture_output=True, text=True, timeout=400)  # fmt: skip
            assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-3000:])
        else:
            raise AssertionError(f"the test does not know how to run {word} here")

    venv = paths["/opt/venv"]
    # No pip or setuptools in the environment the image runs, and every dependency present.
    probe = "import importlib.util as u; print(u.find_spec('pip'), u.find_spec('setuptools'))"
    out = subprocess.run([venv / "bin" / "python", "-c", probe], capture_output=True, text=True)
    assert out.stdout.split() == ["None", "None"], out
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                            "check"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    # The installed service, not this checkout's: run from a folder outside it.
    http = free_port()
    proc = started.start(
        [str(venv / "bin" / "perceptron"), "serve", "--host", "127.0.0.1", "--port", str(http)],
        without_secret_env({"PERCEPTRON_AUTH": "false", "PYTHONPATH": ""}),
        tmp_path / "api.log",
    )
    base = f"http://127.0.0.1:{http}"
    wait_until(lambda: httpx.get(base + "/healthz", timeout=2).status_code == 200, timeout=60,
               what="the service from the built environment")  # fmt: skip
    p = httpx.post(base + "/predict", json={"features": {"a": 1.0}}, timeout=10)
    assert p.status_code == 200, p.text
    # the service and the client it uses (perceptron_client, from client/), both installed
    where = subprocess.run(
        [venv / "bin" / "python", "-c",
         "import service, perceptron_client as c; print(service.__file__); print(c.__file__)"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert len(lines := where.stdout.split()) == 2, where
    assert all(line.startswith(str(venv)) for line in lines), where
    assert proc.poll() is None
