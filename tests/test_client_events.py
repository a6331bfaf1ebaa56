"""The client's event streams (``Client.events``, ``AsyncClient.events``) on a real service of two
workers: each kind read as its route's answer, a label learned through another connection
arriving, a stream the service ends opened again, the model's deletion and the API's refusals
raised as the client's errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from perceptron_client import (
    AsyncClient,
    AuthError,
    Challengers,
    Checkpoints,
    Client,
    DriftReport,
    ModelEvent,
    ModelMetrics,
    NotFoundError,
)

from .servers import RedisServer, ServiceProcess
from .test_models_command import perceptron

pytestmark = pytest.mark.servers

MAX_S = 2  # PERCEPTRON_STREAM_MAX_S: the service ends each stream this soon
KEY = "admin-key-0123456789"
TYPES = {"metrics": ModelMetrics, "checkpoints": Checkpoints, "challengers": Challengers,
         "drift": DriftReport}  # fmt: skip


@pytest.fixture(scope="module")
def service(redis_server: RedisServer) -> Iterator[ServiceProcess]:
    s = ServiceProcess(
        redis_server.url,
        workers=2,
        PERCEPTRON_AUTH="true",
        PERCEPTRON_API_KEYS=f"admin:{KEY}",
        PERCEPTRON_DEFAULT_MODEL="false",
        PERCEPTRON_STREAM_MAX_S=str(MAX_S),
    ).start()
    yield s
    s.stop()


def until(
    events: Iterator[ModelEvent], wanted: str, check: Callable[[Any], bool] | None = None
) -> ModelEvent:
    """The next event of kind ``wanted`` (for which ``check`` holds), within 10 s: the stream
    ends every MAX_S and is opened again, so an event comes at least that often."""
    deadline = time.monotonic() + 10
    for event in events:
        assert isinstance(event.data, TYPES[event.kind])
        if event.kind == wanted and (check is None or check(event.data)):
            return event
        assert time.monotonic() < deadline, f"no {wanted} event within 10 s"
    raise AssertionError("the stream ended")


def test_the_client_reads_each_kind_and_what_changes(service: ServiceProcess) -> None:
    with Client(service.url, api_key=KEY) as c, Client(service.url, api_key=KEY) as other:
        c.create_model("watched", classes=[-1, 1], n_features=2, drift="ddm")
        events = c.events("watched")
        first = [next(events) for _ in range(3)]
        assert sorted(e.kind for e in first) == ["checkpoints", "drift", "metrics"]
        metrics = next(e.data for e in first if isinstance(e.data, ModelMetrics))
        assert (metrics.model, metrics.counters.learned) == ("watched", 0)
        other.learn("watched", [1.0, 2.0], 1)  # through another connection (either worker)
        learned = until(events, "metrics", lambda m: m.counters.learned == 1)
        assert isinstance(learned.data, ModelMetrics) and learned.data.version == 1
        other.add_challenger("watched", "pa", algorithm="pa1")
        shown = until(events, "challengers", lambda d: [x.id for x in d.challengers] == ["pa"])
        assert isinstance(shown.data, Challengers)
        # the service ended the stream (MAX_S): opened again, it sends the model's metrics
        start = time.monotonic()
        until(events, "metrics", lambda m: time.monotonic() - start > MAX_S)
        other.delete_model("watched")
        with pytest.raises(NotFoundError) as gone:
            until(events, "never")
        assert gone.value.code == "model_not_found"


def test_without_reconnecting_the_iteration_ends_with_the_stream(service: ServiceProcess) -> None:
    with Client(service.url, api_key=KEY) as c:
        c.create_model("once", classes=[-1, 1], n_features=2)
        start = time.monotonic()
        kinds = [e.kind for e in c.events("once", reconnect=False)]
        assert kinds == ["metrics", "checkpoints"]
        assert MAX_S - 0.5 < time.monotonic() - start < MAX_S + 5


def test_the_async_client_reads_the_same_events(service: ServiceProcess) -> None:
    async def run() -> list[tuple[str, int]]:
        async with AsyncClient(service.url, api_key=KEY) as c:
            await c.create_model("async", classes=[-1, 1], n_features=2)
            seen: list[tuple[str, int]] = []
            async for event in c.events("async"):
                if isinstance(event.data, ModelMetrics):
                    seen.append((event.kind, event.data.counters.learned))
                    if event.data.counters.learned == 1:
                        break
                    await c.learn("async", [1.0, 2.0], 1)
            return seen

    assert asyncio.run(run()) == [("metrics", 0), ("metrics", 1)]


def test_the_apis_refusals_are_the_clients_errors(service: ServiceProcess) -> None:
    with Client(service.url, api_key=KEY) as c:
        with pytest.raises(NotFoundError) as missing:
            next(c.events("no-such-model"))
        assert missing.value.code == "model_not_found"
        c.create_model("keyed", classes=[-1, 1], n_features=2)
    with Client(service.url, api_key="wrong-key-0123456789") as c, pytest.raises(AuthError):
        next(c.events("keyed"))


def test_perceptron_models_watch_prints_each_event_as_it_comes(service: ServiceProcess) -> None:
    """The command: a line per event (``--json``: the route's body under its kind), ``--count``
    ends it; the model deleted while watched, or never there, exits 3."""
    key = {"PERCEPTRON_API_KEY": KEY}
    with Client(service.url, api_key=KEY) as c:
        c.create_model("cli", classes=[-1, 1], n_features=2, drift="ddm")
        c.learn("cli", [1.0, 2.0], 1)
        c.add_challenger("cli", "pa", algorithm="pa1")
    got = perceptron("models", "watch", "cli", "--count", "4", "--json", url=service.url, **key)
    lines = [json.loads(line) for line in as_json_lines(got)]
    assert sorted(e["event"] for e in lines) == ["challengers", "checkpoints", "drift", "metrics"]
    metrics = next(e["data"] for e in lines if e["event"] == "metrics")
    assert ModelMetrics.model_validate(metrics).counters.learned == 1
    text = perceptron("models", "watch", "cli", "--count", "4", url=service.url, **key)
    assert text.returncode == 0, text.stderr
    rows = {line.split()[1]: line for line in text.stdout.splitlines()}
    assert rows["metrics"].endswith("version 1; 1 labelled, 1 wrong; last 100 1.000")
    assert rows["challengers"].endswith("pa 0 wrong of 0")
    assert rows["drift"].endswith("served stable, pa stable")
    missing = perceptron("models", "watch", "none", url=service.url, **key)
    assert missing.returncode == 3 and "none" in missing.stderr
    with subprocess.Popen(
        [sys.executable, "-m", "service.cli.main", "models", "watch", "cli", "--url", service.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **key},
    ) as watching:  # fmt: skip
        assert watching.stdout is not None and "metrics" in watching.stdout.readline()
        with Client(service.url, api_key=KEY) as c:
            c.delete_model("cli")
        _, said = watching.communicate(timeout=10)
    assert watching.returncode == 3 and "does not exist" in said, said


def as_json_lines(r: subprocess.CompletedProcess[str]) -> list[str]:
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()
