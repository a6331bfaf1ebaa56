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
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from service import cli
from service.app import create_app
from service.settings import Settings

from .inprocess import InProcessService

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
REDIS_CONF = ROOT / "deploy" / "redis.conf"
DEPLOY_MD = ROOT / "deploy" / "DEPLOY.md"
SPEC_PACKAGE = "docker-compose==1.29.2"
SPEC_MEMBER = "compose/config/compose_spec.json"
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_?KEY|AUTH", re.I)
# What a user must put in .env (or the environment) before `docker compose up`: nothing else.
REQUIRED = {"PERCEPTRON_API_KEYS": "admin:" + "k" * 32}

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
        return not isinstance(value, str) or re.fullmatch(r"(\d+(\.\d+)?(ns|us|ms|s|m|h))+", value)

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
    """The file as `docker compose up` reads it with only the required variables set."""
    doc: dict[str, Any] = interpolate(raw, REQUIRED)
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
    urls = re.findall(r"https?://[^\s'\"]+", text)
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


def test_compose_needs_only_the_api_keys_to_come_up(raw: dict[str, Any]) -> None:
    """`docker compose up -d --build` needs PERCEPTRON_API_KEYS, and says so; all else defaults."""
    with pytest.raises(MissingVariable, match="PERCEPTRON_API_KEYS"):
        interpolate(raw, {})
    interpolate(raw, REQUIRED)
    text = COMPOSE.read_text()
    required = {m["name"] for m in _VAR.finditer(text) if m["op"] in ("?", ":?")}
    assert required == set(REQUIRED)
    assert re.search(r"\$\{\w+\}", text) is None, "a variable without a default"


def test_every_compose_variable_is_documented(raw: dict[str, Any]) -> None:
    doc = DEPLOY_MD.read_text()
    missing = sorted(v for v in variables(COMPOSE.read_text()) if v not in doc)
    assert missing == [], f"deploy/DEPLOY.md does not mention {missing}"


# -- services ---------------------------------------------------------------------------------


def test_redis_is_official_image_with_aof_on_a_named_volume(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    redis = services["redis"]
    assert redis["image"].split(":")[0] in ("redis", "docker.io/library/redis")
    command = redis["command"]
    assert command[0] == "redis-server"
    conf_in_container = command[1]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in redis["volumes"]}
    assert (ROOT / mounts[conf_in_container]).resolve() == REDIS_CONF
    conf = dict(
        line.split(None, 1) for line in REDIS_CONF.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )  # fmt: skip
    assert conf["appendonly"] == "yes"
    assert conf["maxmemory-policy"] == "noeviction"
    fsync = command[command.index("--appendfsync") + 1]
    assert fsync in ("always", "everysec")
    # The data directory (the image's /data) is a named volume declared at the top level.
    assert mounts["/data"] in compose["volumes"]
    test = redis["healthcheck"]["test"]
    assert "redis-cli" in " ".join(test) and "ping" in " ".join(test)


def test_api_runs_the_cli_with_arguments_it_accepts(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    api = services["api"]
    build = api["build"]
    assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    command = api["command"]
    assert command[0] == "perceptron"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["perceptron"] == "service.cli:main"
    args = parse_cli(command[1:], monkeypatch)
    assert args["command"] == "serve"
    assert args["host"] == "0.0.0.0"
    assert args["workers"] >= 1
    assert [str(args["port"])] == [str(p) for p in api["expose"]]
    # A typo in an argument would make the container exit: the parser refuses it.
    with pytest.raises(SystemExit):
        parse_cli(["serve", "--wokers", "2"], monkeypatch)


def test_api_healthcheck_is_a_readiness_route_on_the_served_port(
    services: dict[str, dict[str, Any]],
    routes: set[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = services["api"]
    url = urlsplit(healthcheck_url(api["healthcheck"]["test"]))
    port = parse_cli(api["command"][1:], monkeypatch)["port"]
    assert (url.hostname, url.port) == ("127.0.0.1", port)
    assert url.path == "/readyz"
    assert ("GET", url.path) in routes
    assert answers(url.path) == 200
    assert ("GET", "/nowhere") not in routes


def test_api_scales_behind_nginx(services: dict[str, dict[str, Any]]) -> None:
    api = services["api"]
    assert api["deploy"]["replicas"] >= 2
    # Replicas cannot share a container name or a published host port.
    assert "container_name" not in api
    assert "ports" not in api
    assert api["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "healthcheck" in services["redis"]


def test_api_environment_names_only_settings_that_exist(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
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
    # And the values, as interpolated by default, are valid settings.
    for key in list(known):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    settings = Settings()
    create_app(settings)  # the app accepts this configuration (its API keys, among others)
    url = urlsplit(settings.redis_url or "")
    assert (url.scheme, url.hostname, url.port) == ("redis", "redis", 6379)
    assert url.hostname in services
    assert settings.redis_timeout_s > 0


def test_secrets_come_from_the_environment(raw: dict[str, Any]) -> None:
    """No literal secret in the compose file; no secret baked into the image."""
    for name, service in raw["services"].items():
        env = service.get("environment") or {}
        for key, value in env.items():
            if SECRET_NAME.search(key):
                assert re.fullmatch(r"\$\{\w+(:?[-?][^}]*)?\}", str(value)), (name, key)
        command = service.get("command") or []
        if "--requirepass" in command:
            assert re.fullmatch(r"\$\{\w+(:?-)?\}", command[command.index("--requirepass") + 1])
    env = raw["services"]["api"]["environment"]
    assert env["PERCEPTRON_API_KEYS"].startswith("${PERCEPTRON_API_KEYS:?")
    redis_url = env["PERCEPTRON_REDIS_URL"]
    assert "${REDIS_PASSWORD" in redis_url
    assert "${REDIS_PASSWORD" in " ".join(raw["services"]["redis"]["command"])
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
    listen = re.findall(r"^\s*listen\s+(\d+);", conf, re.M)
    published = [str(p).rsplit(":", 1) for p in nginx["ports"]]
    assert [int(container) for _, container in published] == [int(p) for p in listen]
    # The upstream names the api service on the port its command serves.
    upstreams = re.findall(r"^\s*server\s+([\w.-]+):(\d+)\b", conf, re.M)
    api_port = parse_cli(services["api"]["command"][1:], monkeypatch)["port"]
    assert upstreams == [("api", str(api_port))]
    assert re.search(r"proxy_pass\s+http://perceptron_api;", conf)
    # nginx passes on every body the service accepts (batches): its limit is no smaller.
    size = re.search(r"client_max_body_size\s+(\d+)([km]?);", conf)
    assert size is not None
    factor = {"": 1, "k": 1024, "m": 1024 * 1024}[size[2]]
    assert int(size[1]) * factor >= Settings.model_fields["max_body_bytes"].default
    assert nginx["depends_on"]["api"]["condition"] == "service_healthy"
    # Its health check asks nginx itself, at a location the config defines.
    url = urlsplit(healthcheck_url(nginx["healthcheck"]["test"]))
    assert url.port in (None, *map(int, listen))
    assert re.search(rf"location\s+=\s+{re.escape(url.path)}\s*\{{", conf)


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
    # Every file prometheus.yml reads (its API key) is mounted where it looks for it.
    targets = {v.split(":")[1] for v in services["prometheus"]["volumes"]}
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    files = {
        job["authorization"]["credentials_file"]
        for job in prometheus["scrape_configs"]
        if "credentials_file" in job.get("authorization", {})
    }
    assert files <= targets, f"prometheus.yml reads {sorted(files - targets)}, not mounted"
    # It scrapes the api service on the port the API serves.
    for job in prometheus["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            assert (sd["names"], sd["port"]) == (["api"], 8000)


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    used = {
        v.split(":")[0]
        for s in compose["services"].values()
        for v in s.get("volumes", [])
        if not v.startswith((".", "/"))
    }
    assert used and used <= declared


# -- the Dockerfile ---------------------------------------------------------------------------


def test_dockerfile_is_small_and_runs_as_a_non_root_user(
    final_stage: list[tuple[str, str]],
) -> None:
    base = final_stage[0][1].split()[0]
    assert re.fullmatch(r"python:3\.1[1-9]-slim", base), base
    users = [args for word, args in final_stage if word == "USER"]
    assert users, "the final stage sets no USER"
    assert users[-1].split(":")[0] not in ("root", "0")
    # Everything it copies from the build context exists.
    all_instructions = dockerfile_instructions(DOCKERFILE.read_text())
    for word, args in all_instructions:
        if word == "COPY" and not args.startswith("--from"):
            *sources, _ = shlex.split(args)
            for source in sources:
                assert (ROOT / source).exists(), source


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
    assert ("GET", url.path) in routes
    assert answers(url.path) == 200
