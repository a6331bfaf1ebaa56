"""The helpers that the tests, the benchmarks and deploy/topology.py start servers with."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from service.cli import loopback


def test_a_free_port_can_be_bound_on_loopback() -> None:
    port = loopback.free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind((loopback.HOST, port))  # nothing holds it


def test_wait_until_returns_once_the_check_answers_and_treats_errors_as_not_yet() -> None:
    calls: list[int] = []

    def check() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionRefusedError  # the server is not listening yet
        return len(calls) >= 3

    loopback.wait_until(check, timeout=5, what="a server")
    assert len(calls) == 3


def test_wait_until_gives_up_after_its_timeout_naming_what_it_waited_for() -> None:
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="0.2 s waiting for the answer"):
        loopback.wait_until(lambda: False, timeout=0.2, what="the answer")
    assert 0.2 <= time.monotonic() - start < 2


def test_wait_until_stops_at_once_when_the_process_waited_for_has_exited() -> None:
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="redis-server: the process exited"):
        loopback.wait_until(lambda: False, timeout=30, what="redis-server", alive=lambda: False)
    assert time.monotonic() - start < 1


def test_redis_server_command_binds_loopback_persists_nothing_and_takes_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("shutil.which", lambda name: f"/bin/{name}")
    cmd = loopback.redis_server_command(6390, tmp_path, "--appendonly", "yes")
    assert cmd[0] == "/bin/redis-server"
    options = dict(zip(cmd[1::2], cmd[2::2], strict=True))
    assert options["--port"] == "6390"
    assert options["--bind"] == "127.0.0.1"
    assert options["--save"] == ""
    assert options["--dir"] == str(tmp_path)
    assert cmd[-2:] == ["--appendonly", "yes"]  # after the default "no": redis-server keeps it


def test_redis_server_command_says_how_to_install_a_missing_redis_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(RuntimeError, match="deploy/setup.sh test"):
        loopback.redis_server_command(6390, tmp_path)
