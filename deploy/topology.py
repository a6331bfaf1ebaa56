"""What docker-compose.yml starts, as plain processes on loopback, for a machine without Docker.

redis-server (deploy/redis.conf, AOF with ``appendfsync always``) started by
deploy/redis-start.sh with its password from a file, several ``perceptron serve`` processes with
several workers each, reading the Redis password and the API keys from files as in compose, and
nginx (deploy/nginx.conf and deploy/nginx-locations.conf, its upstream lines pointed at those
processes; deploy/nginx-tls.conf too with a certificate) in front of them::

    .venv/bin/python deploy/topology.py              # nginx on a free port; Ctrl-C stops all
    .venv/bin/python deploy/topology.py --port 8080 --apis 3 --workers 2
    .venv/bin/python deploy/topology.py --tls-cert chain.pem --tls-key key.pem   # + HTTPS

Needs redis-server and nginx on PATH (``deploy/setup.sh test`` installs them). Everything binds
to 127.0.0.1; every process is started here and stopped here by its own PID. The tests use
:class:`Topology` to crash an API process or Redis under load.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from service.cli.loopback import HOST, free_port, wait_until

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
# The line of deploy/nginx.conf that names the compose service; replaced by one per process.
UPSTREAM_RE = re.compile(r"^(?P<indent>[ \t]*)server[ \t]+api:8000\b(?P<params>[^;]*);", re.M)
LISTEN_RE = re.compile(r"^(?P<indent>[ \t]*)listen[ \t]+(?P<port>8080|8443)(?P<ssl> ssl)?;", re.M)
ACCESS_LOG_RE = re.compile(r"^(?P<indent>[ \t]*)access_log[ \t]+/var/log/nginx/access\.log\b", re.M)
# Paths inside the containers: the files mounted there (compose) are found here instead.
LOCATIONS_IN_CONTAINER = "/etc/nginx/perceptron-locations.conf"
INCLUDE_RE = re.compile(
    rf"^(?P<indent>[ \t]*)include[ \t]+{re.escape(LOCATIONS_IN_CONTAINER)};", re.M
)
SECRET_RE = re.compile(r"/run/secrets/(?P<name>tls_certificate|tls_key)\b")


def http_status(url: str, timeout: float = 2.0) -> int:
    import httpx

    return httpx.get(url, timeout=timeout).status_code


def redis_answers(port: int, password: str) -> bool:
    """Whether Redis on ``port`` answers a PING after AUTH with ``password``."""

    def command(*words: str) -> bytes:
        parts = [f"*{len(words)}\r\n".encode()]
        for w in words:
            parts.append(f"${len(w.encode())}\r\n".encode() + w.encode() + b"\r\n")
        return b"".join(parts)

    with socket.create_connection((HOST, port), timeout=1) as s:
        s.sendall(command("AUTH", password) + command("PING"))
        reply = b""
        while reply.count(b"\r\n") < 2:
            chunk = s.recv(256)
            if not chunk:
                break
            reply += chunk
        return reply == b"+OK\r\n+PONG\r\n"


def _local_server(template: str, name: str, listen: int, access_log: Path) -> str:
    """The `listen`, `access_log` and `include` lines of one server block, made local."""
    site, n = LISTEN_RE.subn(
        lambda m: f"{m['indent']}listen {HOST}:{listen}{m['ssl'] or ''};", template
    )
    if n != 1:
        raise ValueError(f"{name}: expected one `listen 8080;` or `listen 8443 ssl;` line")
    site, n = ACCESS_LOG_RE.subn(lambda m: f"{m['indent']}access_log {access_log}", site)
    if n != 1:
        raise ValueError(f"{name}: expected one access_log line")
    site, n = INCLUDE_RE.subn(
        lambda m: f"{m['indent']}include {DEPLOY / 'nginx-locations.conf'};", site
    )
    if n != 1:
        raise ValueError(f"{name}: expected one `include {LOCATIONS_IN_CONTAINER};` line")
    return site


def nginx_site(template: str, upstreams: list[int], listen: int, access_log: Path) -> str:
    """deploy/nginx.conf with its upstream, listen, access_log and include lines made local.

    Nothing else of the file is changed but one word: the `resolve` parameter of the upstream
    server line. Docker's DNS needs it (replicas come and go under one name), and the nginx of
    the compose file (1.28) has it, but open-source nginx gained it only in 1.27.3: Debian 12's
    nginx (1.22), which runs this file here, refuses a config with it. Here the upstreams are
    fixed addresses, so nothing is left to re-resolve; tests/test_topology.py checks that every
    other line runs as shipped.
    """

    def servers(m: re.Match[str]) -> str:
        params = " ".join(p for p in m["params"].split() if p != "resolve")
        params = f" {params}" if params else ""
        return "\n".join(f"{m['indent']}server {HOST}:{p}{params};" for p in upstreams)

    site, n = UPSTREAM_RE.subn(servers, template)
    if n != 1:
        raise ValueError("deploy/nginx.conf: expected one `server api:8000 ...;` upstream line")
    return _local_server(site, "deploy/nginx.conf", listen, access_log)


def nginx_tls_site(template: str, listen: int, access_log: Path, cert: Path, key: Path) -> str:
    """deploy/nginx-tls.conf with its listen, access_log and include lines, and the paths of
    its certificate and key (compose secrets), made local."""
    files = {"tls_certificate": cert, "tls_key": key}
    site, n = SECRET_RE.subn(lambda m: str(files[m["name"]]), template)
    if n != 2:
        raise ValueError("deploy/nginx-tls.conf: expected /run/secrets/tls_certificate and tls_key")
    return _local_server(site, "deploy/nginx-tls.conf", listen, access_log)


def nginx_main(workdir: Path, *sites: Path) -> str:
    """A main nginx.conf like the official image's, everything under ``workdir``."""
    temp = "\n".join(
        f"    {kind}_temp_path {workdir / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    includes = "\n".join(f"    include {site};" for site in sites)
    return f"""worker_processes 1;
pid {workdir / "nginx.pid"};
error_log {workdir / "nginx-error.log"} warn;
events {{
    worker_connections 1024;
}}
http {{
    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout 65;
{temp}
{includes}
}}
"""


class Proc:
    """A process started here in its own process group, with its output in a log file."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: Mapping[str, str]) -> None:
        self.name, self.cmd, self.log, self.env = name, cmd, log, dict(env)
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} is not running"
        return self.popen.pid

    def start(self) -> Proc:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                self.cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=ROOT,
                start_new_session=True,  # its own group: a crash takes its workers with it
            )
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def send(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL the process and every child of it, as when its container dies."""
        if self.popen is None:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # the group this process leads
        except ProcessLookupError:
            pass
        self.popen.wait()
        self.popen = None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill_group()  # whatever of its group is left

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return f"--- {self.name} ({self.log}) ---\n" + "\n".join(text[-lines:])


def _require(tool: str) -> str:
    exe = shutil.which(tool) or (
        f"/usr/sbin/{tool}" if Path(f"/usr/sbin/{tool}").exists() else None
    )
    if exe is None:
        raise RuntimeError(f"{tool} is not installed: run deploy/setup.sh test")
    return exe


class Topology:
    """Redis, ``apis`` API processes of ``workers`` workers each, and nginx, on loopback."""

    def __init__(
        self,
        apis: int = 2,
        workers: int = 2,
        http_port: int | None = None,
        appendfsync: str = "always",
        env: Mapping[str, str] | None = None,
        workdir: Path | None = None,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="pcp-topology-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o755)  # nginx workers (another user when run as root) read it
        self.redis_dir = self.workdir / "redis"
        self.redis_dir.mkdir(exist_ok=True)
        self.redis_port = free_port()
        self.http_port = http_port or free_port()
        self.https_port = free_port() if tls else None
        self.api_ports = [free_port() for _ in range(apis)]
        self.access_log = self.workdir / "nginx-access.log"
        base_env = {**os.environ, **(env or {})}
        # The secrets as files, as compose mounts them (/run/secrets/...): Redis's password, and
        # an admin key made for this run unless the environment brings its own keys.
        self.secrets = self.workdir / "secrets"
        self.secrets.mkdir(mode=0o700, exist_ok=True)
        self.redis_password = secrets.token_hex(32)
        password_file = self.secrets / "redis_password"
        password_file.write_text(self.redis_password + "\n")
        self.api_key: str | None = None
        if not (base_env.get("PERCEPTRON_API_KEYS") or base_env.get("PERCEPTRON_API_KEYS_FILE")):
            self.api_key = secrets.token_urlsafe(24)
            keys_file = self.secrets / "api_keys"
            keys_file.write_text(f"admin:{self.api_key}\n")
            base_env["PERCEPTRON_API_KEYS_FILE"] = str(keys_file)

        _require("redis-server")
        self.redis = Proc(
            "redis",
            [
                "sh", str(DEPLOY / "redis-start.sh"),
                "--port", str(self.redis_port),
                "--bind", HOST,
                "--dir", str(self.redis_dir),
                "--appendfsync", appendfsync,
                "--daemonize", "no",
            ],
            self.workdir / "redis.log",
            {
                **base_env,
                "REDIS_PASSWORD_FILE": str(password_file),
                "REDIS_CONF": str(DEPLOY / "redis.conf"),
                "REDIS_RUN_DIR": str(self.workdir / "redis-acl"),
            },
        )  # fmt: skip
        api_env = {
            **base_env,
            "PERCEPTRON_REDIS_URL": self.redis_url,
            "PERCEPTRON_REDIS_PASSWORD_FILE": str(password_file),
            "PERCEPTRON_LOG_LEVEL": base_env.get("PERCEPTRON_LOG_LEVEL", "warning"),
        }
        self.apis = [
            Proc(f"api-{i}", self._serve_cmd(port, workers), self.workdir / f"api-{i}.log", api_env)
            for i, port in enumerate(self.api_ports)
        ]
        site = self.workdir / "perceptron.conf"
        template = (DEPLOY / "nginx.conf").read_text()
        site.write_text(nginx_site(template, self.api_ports, self.http_port, self.access_log))
        sites = [site]
        if tls and self.https_port:
            tls_site = self.workdir / "perceptron-tls.conf"
            tls_template = (DEPLOY / "nginx-tls.conf").read_text()
            tls_site.write_text(
                nginx_tls_site(tls_template, self.https_port, self.access_log, *tls)
            )
            sites.append(tls_site)
        main = self.workdir / "nginx.conf"
        main.write_text(nginx_main(self.workdir, *sites))
        self.nginx_cmd = [
            _require("nginx"), "-p", str(self.workdir), "-c", str(main),
            "-e", str(self.workdir / "nginx-error.log"),
        ]  # fmt: skip
        self.nginx = Proc(
            "nginx", [*self.nginx_cmd, "-g", "daemon off;"], self.workdir / "nginx.log", base_env
        )

    @staticmethod
    def _serve_cmd(port: int, workers: int) -> list[str]:
        serve = ["serve", "--host", HOST, "--port", str(port), "--workers", str(workers)]
        return [sys.executable, "-m", "service.cli.main", *serve]

    def _wait_api(self, i: int, timeout: float) -> None:
        url = self.api_url(i) + "/readyz"
        self._wait(self.apis[i], lambda: http_status(url) == 200, timeout, f"api-{i} ready")

    @property
    def redis_url(self) -> str:
        return f"redis://{HOST}:{self.redis_port}/0"

    @property
    def url(self) -> str:
        """nginx: what clients use."""
        return f"http://{HOST}:{self.http_port}"

    @property
    def https_url(self) -> str:
        """nginx over TLS (deploy/nginx-tls.conf), when started with a certificate."""
        assert self.https_port is not None, "started without tls"
        return f"https://{HOST}:{self.https_port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def api_url(self, i: int) -> str:
        return f"http://{HOST}:{self.api_ports[i]}"

    @property
    def procs(self) -> list[Proc]:
        return [self.redis, *self.apis, self.nginx]

    # -- the whole ---------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> Topology:
        try:
            self.start_redis()
            for api in self.apis:
                api.start()
            for i in range(len(self.apis)):
                self._wait_api(i, timeout)
            test = subprocess.run(
                [*self.nginx_cmd, "-t", "-q"], capture_output=True, text=True, check=False
            )
            if test.returncode != 0:
                raise RuntimeError(f"nginx -t rejects the generated config:\n{test.stderr}")
            self.nginx.start()
            self._wait(
                self.nginx, lambda: http_status(self.url + "/nginx-health") == 200, 10, "nginx"
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.nginx.stop(signal.SIGQUIT)
        for api in self.apis:
            api.stop(signal.SIGTERM)
        self.redis.stop(signal.SIGTERM)

    def logs(self, lines: int = 30) -> str:
        return "\n".join(p.tail(lines) for p in self.procs)

    def _wait(self, proc: Proc, check: Callable[[], bool], timeout: float, what: str) -> None:
        try:
            wait_until(check, timeout, what, alive=proc.alive)
        except (TimeoutError, RuntimeError) as e:
            raise type(e)(f"{e}\n{proc.tail()}") from None

    # -- faults ------------------------------------------------------------------------

    def start_redis(self) -> None:
        """Start redis-server on its port and data directory (so it replays its AOF)."""
        self.redis.start()
        self._wait(
            self.redis,
            lambda: redis_answers(self.redis_port, self.redis_password),
            30,
            "redis-server",
        )

    def kill_redis(self) -> None:
        """SIGKILL redis-server: no shutdown, no final save; only what is in the AOF remains."""
        self.redis.kill_group()

    def freeze_redis(self) -> None:
        """SIGSTOP redis-server: connections open, nothing answers (a hung server)."""
        self.redis.send(signal.SIGSTOP)

    def thaw_redis(self) -> None:
        self.redis.send(signal.SIGCONT)

    def kill_api(self, i: int) -> None:
        """SIGKILL API process ``i`` with its workers, as when its container dies."""
        self.apis[i].kill_group()

    def restart_api(self, i: int, timeout: float = 60.0) -> None:
        """Start API process ``i`` again on its port (after :meth:`kill_api`)."""
        api = self.apis[i]
        api.stop()
        api.start()
        self._wait_api(i, timeout)

    def upstream_counts(self) -> dict[str, int]:
        """Requests nginx sent to each upstream address, from its access log."""
        counts: dict[str, int] = {}
        if not self.access_log.exists():
            return counts
        for line in self.access_log.read_text(errors="replace").splitlines():
            m = re.search(r' upstream="([^"]*)"', line)
            if m:  # "a, b" when nginx tried a then b; "a : b" across internal redirects
                for addr in re.split(r"\s*,\s*|\s+:\s+", m[1]):
                    if addr and addr != "-":
                        counts[addr] = counts.get(addr, 0) + 1
        return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=None, help="nginx port (default: free)")
    parser.add_argument("--apis", type=int, default=2, help="API processes behind nginx")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers per process")
    parser.add_argument(
        "--appendfsync", default="always", choices=["always", "everysec", "no"],
        help="Redis AOF fsync policy",
    )  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None, help="logs and data (default: temp)")
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate chain: HTTPS as well")
    parser.add_argument("--tls-key", type=Path, help="its PEM private key")
    args = parser.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    tls = (args.tls_cert.resolve(), args.tls_key.resolve()) if args.tls_cert else None
    topo = Topology(args.apis, args.workers, args.port, args.appendfsync, workdir=args.dir, tls=tls)
    topo.start()
    out = sys.stdout
    out.write(f"nginx     {topo.url}  (pid {topo.nginx.pid})\n")
    if tls:
        out.write(f"          {topo.https_url}\n")
    for i, api in enumerate(topo.apis):
        out.write(f"api-{i}     {topo.api_url(i)}  (pid {api.pid})\n")
    out.write(f"redis     {topo.redis_url}  (pid {topo.redis.pid}, AOF in {topo.redis_dir})\n")
    out.write(f"secrets   {topo.secrets}  (the Redis password, the API keys)\n")
    if topo.api_key:
        out.write(f"API key   {topo.api_key}  (role admin: 'Authorization: Bearer <key>')\n")
    out.write(f"logs in {topo.workdir}; Ctrl-C stops everything\n")
    out.flush()
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stop:
            time.sleep(0.2)
            dead = [p.name for p in topo.procs if not p.alive()]
            if dead:
                sys.stderr.write(f"stopped by itself: {', '.join(dead)}\n{topo.logs()}\n")
                return 1
    finally:
        topo.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
