"""docker-compose.yml and deploy/Dockerfile: valid Compose, and true to the service they run.

The Compose schema is the one the ``docker-compose`` 1.29.2 wheel ships
(compose/config/compose_spec.json), fetched with ``pip download`` into pytest's cache at test
time. Every command, port, health-check path and PERCEPTRON_* variable these files use is then
checked against the service itself: the CLI's parser, the app's routes, the Settings fields.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from service.app import create_app
from service.cli import main as cli
from service.settings import Settings

from .inprocess import InProcessService

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
NGINX_LOCATIONS = ROOT / "deploy" / "nginx-locations.conf"
NGINX_TLS = ROOT / "deploy" / "nginx-tls.conf"
TLS_COMPOSE = ROOT / "deploy" / "compose.tls.yml"
REDIS_START = ROOT / "deploy" / "redis-start.sh"
DOCKERIGNORE = ROOT / ".dockerignore"
REDIS_CONF = ROOT / "deploy" / "redis.conf"
DEPLOY_MD = ROOT / "deploy" / "DEPLOY.md"
SPEC_PACKAGE = "docker-compose==1.29.2"
SPEC_MEMBER = "compose/config/compose_spec.json"
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_?KEY|AUTH", re.I)
SECRETS_DIR = "/run/secrets/"
MIB = 1024 * 1024

# -- Compose's variable interpolation: $$, $VAR, ${VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:?e} ---------

_VAR = re.compile(
    r"\$(?:(?P<escaped>\$)|(?P<plain>[A-Za-z_][A-Za-z0-9_]*)"
    r"|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})"
)


class MissingVariable(ValueError):
    pass


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """The file as Compose sees it with ``env`` as the environment (and .env)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        if m["escaped"]:
            return "$"
        name = m["plain"] or m["name"]
        op, arg, current = m["op"], m["arg"] or "", env.get(name)
        unset = current is None or (op is not None and op.startswith(":") and current == "")
        if op in ("-", ":-"):
            return arg if unset else str(current)
        if op in ("?", ":?"):
            if unset:
                raise MissingVariable(f"{name}: {arg}")
            return str(current)
        return current or ""

    return _VAR.sub(one, value)


def variables(text: str) -> set[str]:
    return {m["plain"] or m["name"] for m in _VAR.finditer(text) if not m["escaped"]}


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def compose_schema(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """compose_spec.json out of the docker-compose wheel, downloaded once into pytest's cache."""
    cache = getattr(pytestconfig, "cache", None)  # None under -p no:cacheprovider
    folder = cache.mkdir("compose-spec") if cache else tmp_path_factory.mktemp("compose-spec")
    wheels = sorted(folder.glob("docker_compose-1.29.2-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-q", "-d", str(folder), SPEC_PACKAGE],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        wheels = sorted(folder.glob("docker_compose-1.29.2-*.whl"))
    assert wheels, f"pip download {SPEC_PACKAGE} left no wheel in {folder}"
    with zipfile.ZipFile(wheels[0]) as wheel:
        schema: dict[str, Any] = json.loads(wheel.read(SPEC_MEMBER))
    return schema


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker()

    @checker.checks("duration")
    def is_duration(value: object) -> bool:
        return (
            not isinstance(value, str)
            or re.fullmatch(r"(\d+(\.\d+)?(ns|us|ms|s|m|h))+", value) is not None
        )

    @checker.checks("ports")
    def is_ports(value: object) -> bool:
        if isinstance(value, int):
            return 0 < value < 65536
        return bool(
            re.fullmatch(
                r"((\d{1,3}\.){3}\d{1,3}:)?(\d+(-\d+)?:)?\d+(-\d+)?(/(tcp|udp|sctp))?", str(value)
            )
        )

    return checker


def compose_errors(schema: dict[str, Any], doc: Any) -> list[str]:
    validator = jsonschema.Draft201909Validator(schema, format_checker=_format_checker())
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    ]


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


@pytest.fixture(scope="module")
def compose(raw: dict[str, Any]) -> dict[str, Any]:
    """The file as `docker compose up` reads it with no variable set."""
    doc: dict[str, Any] = interpolate(raw, {})
    return doc


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    s: dict[str, dict[str, Any]] = compose["services"]
    return s


@pytest.fixture(scope="module")
def routes() -> set[tuple[str, str]]:
    """(METHOD, path) of every route of the app, from its OpenAPI schema."""
    app = create_app(Settings(redis_url=None, default_model=False, auth=False))
    paths: dict[str, dict[str, Any]] = app.openapi()["paths"]
    return {(method.upper(), path) for path, ops in paths.items() for method in ops}


def answers(path: str) -> int:
    """The status the app (in-process, on its embedded store) answers to GET ``path``."""
    service = InProcessService(Settings(default_model=False, auth=False)).start()
    try:
        return service.client().get(path).status_code
    finally:
        service.stop()


def parse_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the service's own argument parser makes of ``argv`` (nothing is started)."""
    seen: dict[str, Any] = {}

    def fake_serve(args: Any) -> int:
        seen.update(vars(args))
        return 0

    monkeypatch.setattr(cli, "serve", fake_serve)
    assert cli.main(argv) == 0
    return seen


def settings_env_names() -> set[str]:
    prefix = Settings.model_config.get("env_prefix", "")
    return {f"{prefix}{name}".upper() for name in Settings.model_fields}


# -- the Dockerfile ---------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def exec_form(args: str) -> list[str]:
    if args.startswith("["):
        value: list[str] = json.loads(args)
        return value
    return ["/bin/sh", "-c", args]


@pytest.fixture(scope="module")
def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    return instructions[last_from:]


def healthcheck_url(test: list[str] | str) -> str:
    text = test if isinstance(test, str) else " ".join(test)
    urls: list[str] = re.findall(r"https?://[^\s'\"]+", text)
    assert len(urls) == 1, f"expected one URL in the health check {text!r}"
    return urls[0]


# -- the Compose file is valid ----------------------------------------------------------------


@pytest.mark.servers  # pip downloads the spec on a cold cache
def test_compose_file_is_valid_against_the_compose_spec(
    compose_schema: dict[str, Any], compose: dict[str, Any]
) -> None:
    assert compose_schema["$schema"].startswith("http://json-schema.org/draft/2019-09")
    assert compose_errors(compose_schema, compose) == []


@pytest.mark.servers  # pip downloads the spec on a cold cache
def test_the_schema_check_catches_mistakes(
    compose_schema: dict[str, Any], compose: dict[str, Any]
) -> None:
    """Mistakes the schema is relied on to catch are caught."""
    mistakes = {
        "unknown service key": ("api", "healthcheck", "test_cmd", ["CMD", "true"]),
        "replicas not a number": ("api", "deploy", "replicas", "three"),
        "bad duration": ("redis", "healthcheck", "interval", "5 seconds"),
        "bad depends_on condition": ("nginx", "depends_on", "api", {"condition": "healthy"}),
    }
    for what, (service, section, key, value) in mistakes.items():
        doc = copy.deepcopy(compose)
        doc["services"][service][section][key] = value
        assert compose_errors(compose_schema, doc), f"the schema accepted a {what}"
    doc = copy.deepcopy(compose)
    doc["services"]["api"]["ports"] = ["8000:80:90"]
    assert compose_errors(compose_schema, doc), "the schema accepted a malformed port"


def test_compose_needs_no_variable_only_its_secret_files(raw: dict[str, Any]) -> None:
    """`docker compose up` needs no variable: every one has a default, and no secret is one.

    What it needs are the files of its secrets (deploy/secrets.sh writes them), under secrets/,
    which git and the build context both leave out."""
    interpolate(raw, {})
    for text in (COMPOSE.read_text(), TLS_COMPOSE.read_text()):
        assert not [m["name"] for m in _VAR.finditer(text) if m["op"] in ("?", ":?")]
        assert re.search(r"\$\{\w+\}", text) is None, "a variable without a default"
        assert not [v for v in variables(text) if SECRET_NAME.search(v) and "FILE" not in v]
    for name, secret in {
        **raw["secrets"],
        **yaml.safe_load(TLS_COMPOSE.read_text())["secrets"],
    }.items():
        assert secret["file"].startswith("./secrets/"), (name, secret)
    assert "secrets/" in (ROOT / ".gitignore").read_text().split()
    assert dockerignored("secrets/redis_password")


def test_every_compose_variable_is_documented(raw: dict[str, Any]) -> None:
    doc = DEPLOY_MD.read_text()
    text = COMPOSE.read_text() + TLS_COMPOSE.read_text()
    missing = sorted(v for v in variables(text) if v not in doc)
    assert missing == [], f"deploy/DEPLOY.md does not mention {missing}"


# -- helpers of the checks below ---------------------------------------------------------------


def size_bytes(value: str | int) -> int:
    """A Docker (``512m``, ``2g``) or Redis (``1gb``, ``256mb``) size in bytes."""
    m = re.fullmatch(r"(\d+)([kmg]?)b?", str(value).strip().lower())
    assert m is not None, f"not a size: {value!r}"
    unit: int = 1024 ** " kmg".index(m[2] or " ")  # int ** int is typed Any: it may be a float
    return int(m[1]) * unit


def knob(raw_value: Any) -> tuple[str, str]:
    """(VARIABLE, default) of a value written ``${VARIABLE:-default}``."""
    m = re.fullmatch(r"\$\{(\w+):-([^}]+)\}", str(raw_value))
    assert m is not None, f"{raw_value!r} is not a ${{VARIABLE:-default}} knob"
    return m[1], m[2]


def secret_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path to secret name, for the compose secrets a service mounts."""
    out = {}
    for entry in service.get("secrets", []):
        name = entry if isinstance(entry, str) else entry["source"]
        target = name if isinstance(entry, str) else entry.get("target", name)
        out[target if target.startswith("/") else SECRETS_DIR + target] = name
    return out


def dockerignore_patterns() -> list[tuple[bool, str]]:
    out = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negate = line.startswith("!")
            out.append((negate, line.lstrip("!").strip("/")))
    return out


def _glob_regex(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"(\*\*/?|\*|\?)", pattern)
    regex = "".join(
        ".*"
        if p.startswith("**")
        else "[^/]*"
        if p == "*"
        else "[^/]"
        if p == "?"
        else re.escape(p)
        for p in parts
    )
    return re.compile(regex)


def dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` out of the build context (Docker's rules: the last
    pattern that matches the path or one of its parent folders decides)."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negate, pattern in dockerignore_patterns():
        regex = _glob_regex(pattern)
        if any(regex.fullmatch(p) for p in prefixes):
            ignored = not negate
    return ignored


# -- services ---------------------------------------------------------------------------------


def test_redis_is_official_image_with_aof_and_maxmemory_on_a_named_volume(
    compose: dict[str, Any], services: dict[str, dict[str, Any]], raw: dict[str, Any]
) -> None:
    redis = services["redis"]
    assert redis["image"].split(":")[0] in ("redis", "docker.io/library/redis")
    mounts = {v.split(":")[1]: v.split(":")[0] for v in redis["volumes"]}
    # Started by deploy/redis-start.sh, which runs redis-server with the mounted redis.conf.
    entrypoint = redis["entrypoint"]
    assert entrypoint[0] == "sh" and (ROOT / mounts[entrypoint[1]]).resolve() == REDIS_START
    start = REDIS_START.read_text()
    conf_default = re.search(r"conf=\$\{REDIS_CONF:-([^}]+)\}", start)
    assert conf_default is not None and (ROOT / mounts[conf_default[1]]).resolve() == REDIS_CONF
    conf = dict(
        line.split(None, 1) for line in REDIS_CONF.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )  # fmt: skip
    assert conf["appendonly"] == "yes"
    assert conf["maxmemory-policy"] == "noeviction"
    # Never open: protected mode on, and no password in the file (it comes from the secret).
    assert conf["protected-mode"] == "yes"
    assert "requirepass" not in conf and "aclfile" not in conf
    command = redis["command"]
    fsync = command[command.index("--appendfsync") + 1]
    assert fsync in ("always", "everysec")
    # noeviction applies only under a maxmemory: one is set, below the container's limit with
    # room for the AOF rewrite's fork (copy-on-write) and client buffers.
    raw_command = raw["services"]["redis"]["command"]
    assert knob(raw_command[raw_command.index("--maxmemory") + 1])[0] == "REDIS_MAXMEMORY"
    maxmemory = size_bytes(command[command.index("--maxmemory") + 1])
    assert 0 < maxmemory and maxmemory * 3 // 2 <= size_bytes(redis["mem_limit"])
    # The data directory (the image's /data) is a named volume declared at the top level.
    assert mounts["/data"] in compose["volumes"]
    test = " ".join(redis["healthcheck"]["test"])
    assert "redis-cli" in test and "ping" in test
    assert "/run/secrets/redis_password" in test  # it authenticates with the secret


def test_api_runs_the_cli_with_arguments_it_accepts(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    api = services["api"]
    build = api["build"]
    assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    command = api["command"]
    assert command[0] == "perceptron"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["perceptron"] == "service.cli.main:main"
    args = parse_cli(command[1:], monkeypatch)
    assert args["command"] == "serve"
    assert args["host"] == "0.0.0.0"
    assert args["workers"] >= 1
    assert [str(args["port"])] == [str(p) for p in api["expose"]]
    # A typo in an argument would make the container exit: the parser refuses it.
    with pytest.raises(SystemExit):
        parse_cli(["serve", "--wokers", "2"], monkeypatch)


def test_container_health_is_liveness_and_nothing_waits_on_readiness(
    services: dict[str, dict[str, Any]],
    routes: set[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API's container health is /healthz (the process answers), not /readyz (Redis answers
    too): a Redis outage must not turn replicas unhealthy, which would keep nginx from starting
    (it waits for a healthy API) and fail `up --wait`. tests/test_deploy_run.py runs both
    probes during an outage."""
    api = services["api"]
    url = urlsplit(healthcheck_url(api["healthcheck"]["test"]))
    port = parse_cli(api["command"][1:], monkeypatch)["port"]
    assert (url.hostname, url.port) == ("127.0.0.1", port)
    assert url.path == "/healthz"
    assert {("GET", "/healthz"), ("GET", "/readyz")} <= routes
    assert answers(url.path) == 200
    assert ("GET", "/nowhere") not in routes
    # nginx waits for a live API; the API waits for Redis to be started, not healthy: it
    # reconnects by itself, so a replica can be started or replaced while Redis is down.
    assert services["nginx"]["depends_on"]["api"]["condition"] == "service_healthy"
    assert api["depends_on"]["redis"]["condition"] == "service_started"
    text = COMPOSE.read_text() + DOCKERFILE.read_text()
    assert "/readyz" not in re.sub(r"#.*", "", text), "a health check on readiness"


def test_api_scales_behind_nginx(services: dict[str, dict[str, Any]]) -> None:
    api = services["api"]
    assert api["deploy"]["replicas"] >= 2
    # Replicas cannot share a container name or a published host port.
    assert "container_name" not in api
    assert "ports" not in api
    assert "healthcheck" in services["redis"]


def test_api_environment_names_only_settings_that_exist(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = services["api"]["environment"]
    known = settings_env_names()
    assert "PERCEPTRON_REDIS_URL" in known
    used = {k for k in env if k.startswith("PERCEPTRON_")}
    assert used, "the api service sets no PERCEPTRON_* variable"
    assert used <= known, f"not settings of the service: {sorted(used - known)}"
    # Every PERCEPTRON_* word anywhere in the compose file or the Dockerfile is a setting.
    mentioned = set(
        re.findall(r"PERCEPTRON_[A-Z0-9_]+", COMPOSE.read_text() + DOCKERFILE.read_text())
    )
    assert mentioned <= known, f"not settings of the service: {sorted(mentioned - known)}"
    # And the values, as interpolated by default, are valid settings: the files of the secrets
    # it mounts stand at their paths here.
    mounted = secret_mounts(services["api"])
    contents = {"api_keys": "admin:" + "k" * 32 + "\n", "redis_password": "p" * 64 + "\n"}
    for key in list(known):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        if str(value).startswith(SECRETS_DIR):
            assert str(value) in mounted, f"{key}: {value} is not a secret the api mounts"
            local = tmp_path / mounted[str(value)]
            local.write_text(contents[mounted[str(value)]])
            value = local
        monkeypatch.setenv(key, str(value))
    settings = Settings()
    create_app(settings)  # the app accepts this configuration (its API keys, among others)
    url = urlsplit(settings.redis_url or "")
    assert (url.scheme, url.hostname, url.port) == ("redis", "redis", 6379)
    assert url.hostname in services
    assert url.password is None and settings.redis_password_file is not None
    assert settings.api_keys is None and settings.api_keys_file is not None
    assert settings.redis_timeout_s > 0


def test_secrets_are_files_never_environment_or_command_line(raw: dict[str, Any]) -> None:
    """Every secret is a compose secret (a file under /run/secrets/), mounted only into the
    services that read it; none is in an environment, a command line or the image."""
    tls = yaml.safe_load(TLS_COMPOSE.read_text())
    declared = {**raw["secrets"], **tls["secrets"]}
    readers: dict[str, set[str]] = {}
    for doc in (raw, tls):
        for name, service in doc["services"].items():
            for secret in secret_mounts(service).values():
                assert secret in declared, (name, secret)
                readers.setdefault(secret, set()).add(name)
    assert readers == {
        "api_keys": {"api"},
        "redis_password": {"redis", "api"},
        "grafana_admin_password": {"grafana"},
        "prometheus_api_key": {"prometheus"},
        "tls_certificate": {"nginx"},
        "tls_key": {"nginx"},
    }
    for name, service in raw["services"].items():
        mounted = secret_mounts(service)
        for key, value in (service.get("environment") or {}).items():
            if SECRET_NAME.search(key):
                # only the path of a file it mounts (PERCEPTRON_*_FILE, Grafana's *__FILE)
                assert key.endswith("FILE") and value in mounted, (name, key, value)
        words = service.get("command", []) + service.get("entrypoint", [])
        for word in words:
            assert not re.search(r"requirepass|password|--user|api.?key", str(word), re.I), word
    assert "requirepass" not in REDIS_CONF.read_text().replace("# ", "")
    for word, args in dockerfile_instructions(DOCKERFILE.read_text()):
        if word in ("ENV", "ARG"):
            assert not SECRET_NAME.search(args), f"{word} {args}"


def test_nginx_fronts_the_api_service(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    nginx = services["nginx"]
    assert nginx["image"].split(":")[0] in ("nginx", "docker.io/library/nginx")
    mounts = {v.split(":")[1]: v.split(":")[0] for v in nginx["volumes"]}
    assert (ROOT / mounts["/etc/nginx/conf.d/default.conf"]).resolve() == NGINX_CONF
    conf = NGINX_CONF.read_text()
    # The locations it includes are the file mounted where it includes them from.
    (included,) = re.findall(r"^\s*include\s+(\S+);", conf, re.M)
    assert (ROOT / mounts[included]).resolve() == NGINX_LOCATIONS
    locations = NGINX_LOCATIONS.read_text()
    listen = re.findall(r"^\s*listen\s+(\d+);", conf, re.M)
    published = [str(p).split(":") for p in nginx["ports"]]
    assert [int(container) for *_, container in published] == [int(p) for p in listen]
    # Plain HTTP (keys in headers) is published on loopback unless HTTP_BIND says otherwise.
    assert [host for host, *_ in published] == ["127.0.0.1"]
    # The upstream names the api service on the port its command serves.
    upstreams = re.findall(r"^\s*server\s+([\w.-]+):(\d+)\b", conf, re.M)
    api_port = parse_cli(services["api"]["command"][1:], monkeypatch)["port"]
    assert upstreams == [("api", str(api_port))]
    assert re.search(r"proxy_pass\s+http://perceptron_api;", locations)
    # nginx passes on every body the service accepts (batches): its limit is no smaller.
    size = re.search(r"client_max_body_size\s+(\d+)([km]?);", locations)
    assert size is not None
    factor = {"": 1, "k": 1024, "m": 1024 * 1024}[size[2]]
    assert int(size[1]) * factor >= Settings.model_fields["max_body_bytes"].default
    # Its health check asks nginx itself, at a location the config defines.
    url = urlsplit(healthcheck_url(nginx["healthcheck"]["test"]))
    assert url.port in (None, *map(int, listen))
    assert re.search(rf"location\s+=\s+{re.escape(url.path)}\s*\{{", locations)


def test_tls_option_serves_the_same_locations_with_certificates_from_secrets(
    compose_schema: dict[str, Any], raw: dict[str, Any]
) -> None:
    """deploy/compose.tls.yml on top of docker-compose.yml: valid, nginx publishes the port
    nginx-tls.conf listens on, with the certificate and key as the secrets it mounts."""
    tls = yaml.safe_load(TLS_COMPOSE.read_text())
    merged = copy.deepcopy(raw)
    nginx = merged["services"]["nginx"]
    for key in ("ports", "volumes", "secrets"):  # compose appends these lists
        nginx[key] = nginx.get(key, []) + tls["services"]["nginx"][key]
    merged["secrets"].update(tls["secrets"])
    doc = interpolate(merged, {})
    assert compose_errors(compose_schema, doc) == []
    nginx = doc["services"]["nginx"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in nginx["volumes"]}
    assert (ROOT / mounts["/etc/nginx/conf.d/tls.conf"]).resolve() == NGINX_TLS
    site = NGINX_TLS.read_text()
    (listen,) = re.findall(r"^\s*listen\s+(\d+)\s+ssl;", site, re.M)
    assert listen in [str(p).split(":")[-1] for p in nginx["ports"]]
    files = dict(re.findall(r"^\s*(ssl_certificate|ssl_certificate_key)\s+(\S+);", site, re.M))
    mounted = secret_mounts(nginx)
    assert {k: mounted[v] for k, v in files.items()} == {
        "ssl_certificate": "tls_certificate",
        "ssl_certificate_key": "tls_key",
    }
    # The same locations as plain HTTP, and no protocol older than TLS 1.2.
    assert re.findall(r"^\s*include\s+(\S+);", site, re.M) == re.findall(
        r"^\s*include\s+(\S+);", NGINX_CONF.read_text(), re.M
    )
    (protocols,) = re.findall(r"^\s*ssl_protocols\s+([^;]+);", site, re.M)
    assert set(protocols.split()) <= {"TLSv1.2", "TLSv1.3"}


def test_monitoring_profile_adds_prometheus_and_grafana(
    services: dict[str, dict[str, Any]],
) -> None:
    assert {n for n, s in services.items() if "monitoring" in s.get("profiles", [])} == {
        "prometheus",
        "grafana",
    }
    for name in ("redis", "api", "nginx"):
        assert "profiles" not in services[name], f"{name} must start without a profile"
    sources = {
        name: {v.split(":")[0] for v in services[name]["volumes"]}
        for name in ("prometheus", "grafana")
    }
    assert "./deploy/prometheus.yml" in sources["prometheus"]
    assert {"./deploy/grafana/provisioning", "./deploy/grafana/dashboards"} <= sources["grafana"]
    # Every file prometheus.yml reads (its API key) is a secret mounted where it looks for it.
    targets = set(secret_mounts(services["prometheus"]))
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    files = {
        job["authorization"]["credentials_file"]
        for job in prometheus["scrape_configs"]
        if "credentials_file" in job.get("authorization", {})
    }
    assert files and files <= targets, f"prometheus.yml reads {sorted(files - targets)}"
    # It scrapes the api service on the port the API serves.
    for job in prometheus["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            assert (sd["names"], sd["port"]) == (["api"], 8000)
    # Every rule file it names is mounted, read-only, where it reads it (a relative path
    # from the config file's folder), from the file of that name beside it in deploy/.
    volumes = {v.split(":")[1]: v.split(":") for v in services["prometheus"]["volumes"]}
    config_at = PurePosixPath(volumes["/etc/prometheus/prometheus.yml"][1]).parent
    assert prometheus["rule_files"], "prometheus.yml loads no alert rules"
    for name in prometheus["rule_files"]:
        source, target, *options = volumes[str(config_at / name)]
        assert options == ["ro"], f"{target} is not mounted read-only"
        assert (ROOT / source).resolve() == (ROOT / "deploy" / name).resolve()
        assert (ROOT / source).is_file(), source
    # Grafana's admin password is its secret, not a default.
    env = services["grafana"]["environment"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] in secret_mounts(services["grafana"])


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    used = {
        v.split(":")[0]
        for s in compose["services"].values()
        for v in s.get("volumes", [])
        if not v.startswith((".", "/"))
    }
    assert used and used <= declared


# -- bounded resources, hardening, networks, images -------------------------------------------


def test_every_service_has_bounded_memory_cpu_processes_and_logs(
    raw: dict[str, Any], services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, service in services.items():
        raw_service = raw["services"][name]
        for key in ("mem_limit", "cpus", "pids_limit"):
            assert key in service, f"{name} has no {key}"
            variable, _ = knob(raw_service[key])  # a knob of .env
            assert variable.startswith(name.upper()), (name, variable)
        assert 32 * MIB <= size_bytes(service["mem_limit"])
        assert 0 < float(service["cpus"]) and 16 <= int(service["pids_limit"])
        logging = service["logging"]
        assert logging["driver"] == "json-file"
        assert size_bytes(logging["options"]["max-size"]) <= 100 * MIB
        assert 1 <= int(logging["options"]["max-file"]) <= 10
    # The weights each API worker keeps, and a worker's own memory, fit the API's limit.
    api = services["api"]
    workers = parse_cli(api["command"][1:], monkeypatch)["workers"]
    replica = int(api["environment"]["PERCEPTRON_REPLICA_MEMORY_BYTES"])
    assert workers * (replica + 150 * MIB) <= size_bytes(api["mem_limit"])


def test_every_service_is_hardened(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"] and "cap_add" not in service, name
        assert "no-new-privileges:true" in service["security_opt"], name
        assert not service.get("privileged") and "network_mode" not in service, name
        assert service.get("restart") == "unless-stopped", name
        # Not root: a user of the image named here, or the image's own (the API's Dockerfile
        # USER, Prometheus' nobody, Grafana's grafana).
        assert service.get("user", "") not in ("root", "0", "0:0"), name
    assert {n for n, s in services.items() if "user" in s} == {"redis", "nginx"}
    # Where the read-only services write: tmpfs for what is lost at a restart anyway.
    assert "/tmp" in services["api"]["tmpfs"] and "/tmp" in services["redis"]["tmpfs"]
    # nginx writes its pid file and temporary files in /tmp (deploy/nginx-main.conf): in the
    # image /run and /var/cache/nginx belong to root, and its unprivileged master cannot.
    assert services["nginx"]["tmpfs"] == ["/tmp"]
    main = (ROOT / "deploy" / "nginx-main.conf").read_text()
    written = re.findall(r"^\s*(?:pid|\w+_temp_path)\s+(\S+);", main, re.M)
    assert len(written) == 6 and all(p.startswith("/tmp/") for p in written), written
    assert "include /etc/nginx/conf.d/*.conf;" in main
    mounts = [v.split(":")[1] for v in services["nginx"]["volumes"]]
    assert "/etc/nginx/nginx.conf" in mounts
    # redis-start.sh writes the ACL file on the tmpfs.
    run_dir = re.search(r"run_dir=\$\{REDIS_RUN_DIR:-([^}]+)\}", REDIS_START.read_text())
    assert run_dir is not None
    assert any(run_dir[1].startswith(t.rstrip("/") + "/") for t in services["redis"]["tmpfs"])


def test_networks_keep_redis_away_from_nginx(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    nets = {name: set(service["networks"]) for name, service in services.items()}
    assert all(nets.values()), "a service on the default network"
    assert nets["redis"] == {"back"} and compose["networks"]["back"]["internal"] is True
    assert {n for n, s in nets.items() if s & nets["redis"]} == {"redis", "api"}
    assert nets["nginx"] & nets["api"] and not nets["nginx"] & nets["redis"]
    assert nets["prometheus"] & nets["api"] and nets["grafana"] & nets["prometheus"]
    assert set().union(*nets.values()) == set(compose["networks"])


def test_images_are_versioned_and_pinnable_by_digest(
    compose_schema: dict[str, Any], raw: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    """Every image is a `${NAME_IMAGE:-image:tag}` knob (set it to image:tag@sha256:... in .env to
    pin a digest); no :latest; the built image is tagged with the package's version."""
    digest = "@sha256:" + "0" * 64
    pinned_env = {}
    for name, service in raw["services"].items():
        if "build" in service:
            image = services[name]["image"]
            version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
            assert image == f"perceptron-service:{version}"
            variable, default = knob(service["build"]["args"]["PYTHON_IMAGE"])
        else:
            variable, default = knob(service["image"])
        assert variable == f"{name.upper()}_IMAGE" or variable == "PYTHON_IMAGE", variable
        repository, _, tag = default.rpartition(":")
        assert repository and re.fullmatch(r"v?\d+(\.\d+)+(-[a-z0-9.-]+)?|\d+\.\d+-[a-z-]+", tag)
        pinned_env[variable] = default + digest
    assert re.search(r":latest\b", COMPOSE.read_text()) is None
    pinned = interpolate(raw, pinned_env)
    assert compose_errors(compose_schema, pinned) == []
    for name, service in pinned["services"].items():
        image = service["build"]["args"]["PYTHON_IMAGE"] if "build" in service else service["image"]
        assert image.endswith(digest), name
    # The Dockerfile takes its base image from that build argument, a tag by default too.
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    assert instructions[0] == (
        "ARG",
        f"PYTHON_IMAGE={knob(raw['services']['api']['build']['args']['PYTHON_IMAGE'])[1]}",
    )
    assert {args.split()[0] for word, args in instructions if word == "FROM"} == {"${PYTHON_IMAGE}"}


# -- the Dockerfile ---------------------------------------------------------------------------


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions, one list per stage (each from its FROM)."""
    out: list[list[tuple[str, str]]] = []
    for word, args in dockerfile_instructions(text):
        if word == "FROM":
            out.append([])
        if out:
            out[-1].append((word, args))
    return out


def test_dockerfile_builds_in_two_stages_and_runs_as_a_non_root_uid(
    final_stage: list[tuple[str, str]],
) -> None:
    build, final = stages(DOCKERFILE.read_text())
    assert final == final_stage
    assert build[0][1].endswith(" AS build")
    # Only the installed environment crosses over: no source, no build tools.
    copies = [args for word, args in final if word == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"]
    # The base image's pip, setuptools and wheel are removed from the runtime image.
    runs = " ".join(args for word, args in final if word == "RUN")
    assert re.search(r"pip uninstall --yes( --quiet)? pip setuptools wheel", runs)
    # USER by number (a runtime can check it is not root without /etc/passwd): the uid and gid
    # the stage creates for `perceptron`.
    users = [args for word, args in final if word == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*:[1-9]\d*", users[-1]), users
    uid, gid = users[-1].split(":")
    assert f"--uid {uid} --gid perceptron" in runs and f"--gid {gid} perceptron" in runs
    # Everything it copies from the build context exists, and the context lets it in.
    for word, args in build + final:
        if word == "COPY" and not args.startswith("--from"):
            *sources, _ = shlex.split(args)
            for source in sources:
                assert (ROOT / source).exists(), source
                assert not dockerignored(source), f".dockerignore keeps {source} out"


def test_dockerfile_installs_the_lock_before_copying_the_source() -> None:
    """A layer of the locked dependencies alone, so a change of the code reinstalls nothing;
    installed with their hashes; the package itself without dependencies."""
    build, _ = stages(DOCKERFILE.read_text())
    steps = [(word, args) for word, args in build if word in ("COPY", "RUN")]
    first_copy, first_run = steps[0], (steps[1][0], " ".join(steps[1][1].split()))
    assert first_copy[0] == "COPY" and first_run[0] == "RUN"
    *sources, _ = shlex.split(first_copy[1])
    assert sources and all(s.startswith("requirements/") for s in sources), sources
    # The image's pip installs only the pinned installer and setuptools, which depend on
    # nothing; the installer (uv) installs the lock.
    pip, _, rest = first_run[1].partition("python -m uv pip install")
    installer_and_setuptools = "-r requirements/installer.txt -r requirements/build.txt"
    assert f"pip install --require-hashes {installer_and_setuptools}" in pip
    assert "--require-hashes -r requirements/service.txt" in rest
    assert all("service" not in s for s in sources if not s.endswith(".txt"))
    source_at = next(i for i, (w, a) in enumerate(steps) if w == "COPY" and "service" in a.split())
    assert source_at > 1
    last = steps[-1][1]
    assert "install --no-deps" in last and "--no-build-isolation" in last


def test_dockerfile_command_and_healthcheck_match_the_service(
    final_stage: list[tuple[str, str]],
    routes: set[tuple[str, str]],
    services: dict[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cmds = [exec_form(args) for word, args in final_stage if word == "CMD"]
    assert len(cmds) == 1
    command = cmds[0]
    assert command[0] == "perceptron"
    args = parse_cli(command[1:], monkeypatch)
    assert (args["command"], args["host"]) == ("serve", "0.0.0.0")
    compose_args = parse_cli(services["api"]["command"][1:], monkeypatch)
    assert args["port"] == compose_args["port"]
    exposed = [args_ for word, args_ in final_stage if word == "EXPOSE"]
    assert exposed == [str(args["port"])]
    checks = [a for word, a in final_stage if word == "HEALTHCHECK"]
    assert len(checks) == 1
    url = urlsplit(healthcheck_url(checks[0]))
    assert url.port == args["port"]
    assert url.path == "/healthz"  # liveness, as compose's
    assert ("GET", url.path) in routes
    assert answers(url.path) == 200


def test_dockerignore_keeps_secrets_and_local_files_out_of_the_build_context() -> None:
    for path in (".env", ".env.local", "secrets", "secrets/redis_password", ".venv/bin/python",
                 ".git/config", "tests/test_compose.py", "service/__pycache__/app.cpython-311.pyc",
                 "deploy/Dockerfile", "docker-compose.yml"):  # fmt: skip
        assert dockerignored(path), path
    for path in ("pyproject.toml", "README.md", "requirements/service.txt", "service/app.py",
                 "service/dashboard/index.html", "client/perceptron_client/clients.py",
                 "client/perceptron_client/py.typed"):  # fmt: skip
        assert not dockerignored(path), path
    # The matcher itself: a pattern that lets a folder in, and a later one that keeps it out.
    assert _glob_regex("**/*.pyc").fullmatch("a/b/c.pyc")
    assert not _glob_regex("*.pyc").fullmatch("a/c.pyc")


# -- the lock files ---------------------------------------------------------------------------

LOCKS = ROOT / "requirements"
LOCK_LINE = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)(?:\s*;\s*([^\\]+?))?\s*\\?$")


def locked(path: Path) -> dict[str, list[tuple[str, str | None, list[str]]]]:
    """name -> [(version, marker, hashes)] of a lock file (uv pip compile --generate-hashes)."""
    out: dict[str, list[tuple[str, str | None, list[str]]]] = {}
    current: list[str] | None = None
    for line in path.read_text().splitlines():
        m = LOCK_LINE.match(line)
        if m:
            name = re.sub(r"[-_.]+", "-", m[1]).lower()
            current = []
            out.setdefault(name, []).append((m[2], m[3], current))
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            current.append(line.strip().split(":", 1)[1].rstrip(" \\"))
        elif line.strip() and not line.lstrip().startswith("#"):
            raise AssertionError(f"{path.name}: unexpected line {line!r}")
    return out


def test_lock_files_pin_every_requirement_with_hashes_and_agree() -> None:
    from packaging.markers import Marker
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wants = {
        "service": project["project"]["dependencies"],
        "replay": project["project"]["dependencies"]
        + project["project"]["optional-dependencies"]["replay"],
        "test": project["project"]["dependencies"]
        + project["project"]["optional-dependencies"]["test"],
        "build": project["build-system"]["requires"],
    }
    env = {
        "python_version": "3.11",
        "python_full_version": "3.11.7",
        "sys_platform": "linux",
        "platform_python_implementation": "CPython",
        "implementation_name": "cpython",
    }
    versions: dict[str, str] = {}
    for name, requirements in wants.items():
        lock = locked(LOCKS / f"{name}.txt")
        assert lock, name
        # Generated by the one documented command.
        assert "bash deploy/lock.sh" in (LOCKS / f"{name}.txt").read_text().splitlines()[1]
        for pins in lock.values():
            for _version, _marker, hashes in pins:
                assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes)
        # What pyproject.toml asks for (a newer range not yet locked fails here) is pinned.
        for text in requirements:
            req = Requirement(text)
            key = re.sub(r"[-_.]+", "-", req.name).lower()
            assert key in lock, f"{name}.txt does not pin {req.name}: run bash deploy/lock.sh"
            chosen = [v for v, m, _ in lock[key] if m is None or Marker(m).evaluate(env)]
            assert len(chosen) == 1 and req.specifier.contains(chosen[0]), (name, text, chosen)
        # One version of a package whatever the file (on Python 3.11, the image's).
        for key, pins in lock.items():
            for version, marker, _ in pins:
                if marker is None or Marker(marker).evaluate(env):
                    assert versions.setdefault(key, version) == version, (name, key)
    # The installer is locked too: uv alone, at lock.sh's version, with the hashes of its files.
    installer = locked(LOCKS / "installer.txt")
    uv_version = re.search(r"^UV_VERSION=(\S+)$", (ROOT / "deploy/lock.sh").read_text(), re.M)
    assert uv_version and list(installer) == ["uv"], installer
    assert [(v, m) for v, m, _ in installer["uv"]] == [(uv_version[1], None)]
    assert len(installer["uv"][0][2]) >= 10  # a wheel for each platform
    # The image and deploy/setup.sh both install from these files, with the installer.
    setup = (ROOT / "deploy" / "setup.sh").read_text()
    assert "--require-hashes -r requirements/build.txt" in setup
    assert re.search(r"--require-hashes\s*\\?\s*-r requirements/installer.txt", setup)
    assert 'lock="requirements/replay.txt"' in setup and 'lock="requirements/test.txt"' in setup
    assert "requirements/service.txt" in DOCKERFILE.read_text()


def test_this_environment_was_installed_from_the_lock() -> None:
    """deploy/setup.sh test installed exactly the pins of requirements/test.txt here."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.markers import Marker

    wrong = []
    for key, pins in locked(LOCKS / "test.txt").items():
        for pinned, marker, _ in pins:
            if marker is not None and not Marker(marker).evaluate():
                continue
            try:
                installed = version(key)
            except PackageNotFoundError:
                installed = None
            if installed != pinned:
                wrong.append((key, pinned, installed))
    assert wrong == []
