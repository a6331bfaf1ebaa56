"""``perceptron replay`` and the ``perceptron`` command against the service in-process.

The replay's own tests (test_replay.py) stream whole datasets through a real service; these
stream a few dozen examples through the app in-process, which is what their counting,
batching, delays, concurrency and errors need, in milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from service import cli
from service import replay as rp
from service.client import AsyncClient, Client
from service.replay import command
from service.settings import Settings

from .inprocess import BASE_URL, InProcessService

IRIS = rp.load_dataset("iris").shuffled(1).head(45)  # three classes, 4 features
CANCER = rp.load_dataset("breast_cancer").head(40)


@pytest.fixture
def service() -> Iterator[InProcessService]:
    s = InProcessService(Settings(auth=False, default_model=False)).start()
    yield s
    s.stop()


@pytest.fixture
def replay(service: InProcessService) -> Any:
    """``rp.replay`` reaching the in-process service."""
    return partial(rp.replay, url=BASE_URL, transport=service.async_transport())


def counters(service: InProcessService, model: str) -> Any:
    with Client(BASE_URL, transport=service.transport()) as c:
        return c.read_model(model).counters


def test_every_mode_counts_each_example_once_as_the_service_does(
    service: InProcessService, replay: Any
) -> None:
    one = replay(CANCER, model="one")
    c = counters(service, "one")
    assert (one.examples, c.predictions, c.feedback, c.seen) == (40, 40, 40, 40)
    assert one.mistakes == c.mistakes and one.mode == "predict"
    learned = replay(CANCER, model="learned", mode="learn")
    assert learned.outcomes == one.outcomes  # predict + feedback at once is learn
    for kwargs in (
        {"batch": 7},
        {"mode": "learn", "batch": 6},
        {"delay": 3},
        {"delay": 4, "batch": 5, "concurrency": 3},
        {"mode": "learn", "concurrency": 2},
    ):
        name = "m" + str(len(kwargs)) + "-".join(map(str, kwargs.values()))
        s = replay(CANCER, model=name, **kwargs)
        c = counters(service, name)
        assert s.examples == 40 and c.seen == 40 and s.mistakes == c.mistakes, kwargs
        if kwargs.get("mode") == "learn" and "concurrency" not in kwargs:
            assert s.outcomes == one.outcomes, kwargs  # learned in order: the same perceptron


def test_a_multiclass_model_is_made_to_the_data_and_reset_on_request(
    service: InProcessService, replay: Any
) -> None:
    s = replay(IRIS, multiclass="ovr", mode="learn", batch=10)
    with Client(BASE_URL, transport=service.transport()) as c:
        config = c.read_model("iris").config
        assert (config.multiclass, config.n_features, len(config.classes)) == ("ovr", 4, 3)
        assert c.read_model("iris").counters.learned == 45 == s.examples
        again = replay(IRIS, multiclass="ovr", mode="learn", reset=True)
        assert c.read_model("iris").counters.learned == 45
        assert again.outcomes == s.outcomes


def test_a_model_that_does_not_fit_the_data_is_refused(
    service: InProcessService, replay: Any
) -> None:
    with Client(BASE_URL, transport=service.transport()) as c:
        c.create_model("small", n_features=2, classes=[0, 1])
        c.create_model("other", n_features=30, classes=[0, 2])
    with pytest.raises(rp.ReplayError, match="n_features=2"):
        replay(CANCER, model="small")
    with pytest.raises(rp.ReplayError, match="lack"):
        replay(CANCER, model="other")
    with pytest.raises(ValueError, match="delay applies"):
        replay(CANCER, mode="learn", delay=2)
    with pytest.raises(ValueError, match="batch and concurrency"):
        replay(CANCER, batch=0)


def test_a_busy_service_is_retried_as_it_asks(service: InProcessService) -> None:
    """A 503 is sent again after Retry-After; the example is counted once."""
    busy = [2]

    async def sometimes_busy(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/learn" and busy[0]:
            busy[0] -= 1
            return httpx.Response(
                503, json={"detail": "busy", "code": "model_busy"}, headers={"Retry-After": "0"}
            )
        return await service.async_transport().handle_async_request(request)

    transport = httpx.MockTransport(sometimes_busy)
    s = rp.replay(CANCER, url=BASE_URL, mode="learn", transport=transport)
    assert busy == [0] and s.examples == 40 and counters(service, "breast_cancer").learned == 40


def run_main(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["replay", *args])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def reaching(service: InProcessService, monkeypatch: pytest.MonkeyPatch) -> InProcessService:
    """The command's replays reach the in-process service (whatever --url says)."""
    monkeypatch.setattr(command, "replay", partial(rp.replay, transport=service.async_transport()))
    return service


def test_the_command_replays_prints_and_draws(reaching: InProcessService, tmp_path: Path) -> None:
    curve = tmp_path / "curve.png"
    code, out, err = run_main(
        ["--dataset", "iris", "--limit", "30", "--shuffle", "2", "--mode", "learn", "--batch", "4",
         "--json", "--quiet", "--curve", str(curve), "--window", "5"]
    )  # fmt: skip
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert summary["examples"] == 30 and summary["curve"] == str(curve)
    assert curve.read_bytes().startswith(b"\x89PNG")
    assert summary["mistakes"] == counters(reaching, "iris").mistakes
    code, out, err = run_main(
        ["--dataset", "iris", "--shuffle", "1", "--limit", "9", "--model", "text"]
    )
    assert code == 0 and "mistakes" in out and "text [" in err  # the progress bar


def test_the_command_says_what_is_wrong(reaching: InProcessService, tmp_path: Path) -> None:
    assert run_main(["--dataset", "iris", "--mode", "learn", "--delay", "3"])[0] == 2
    code, _, err = run_main(["--dataset", "iris", "--label-column", "y"])
    assert code == 2 and "--label-column" in err
    code, _, err = run_main(["--csv", str(tmp_path / "missing.csv")])
    assert code == 2 and "missing.csv" in err
    with Client(BASE_URL, transport=reaching.transport()) as c:
        c.create_model("iris", n_features=2)
    code, _, err = run_main(["--dataset", "iris", "--quiet"])
    assert code == 2 and "n_features=2" in err
    code, _, err = run_main(["--dataset", "iris", "--model", "bad name!", "--quiet"])
    assert code == 1 and "invalid_model_name" in err
    code, _, err = run_main(
        ["--dataset", "iris", "--shuffle", "1", "--limit", "9", "--model", "c", "--quiet",
         "--curve", str(tmp_path)]
    )  # fmt: skip
    assert code == 2 and "perceptron replay:" in err  # a folder is no PNG file


def test_the_command_reports_a_service_it_cannot_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    monkeypatch.setattr(
        command, "replay", partial(rp.replay, transport=httpx.MockTransport(refuse))
    )
    code, _, err = run_main(["--dataset", "iris", "--quiet", "--url", "http://nowhere.test"])
    assert code == 1 and "cannot reach http://nowhere.test (ConnectError" in err


def test_the_progress_bar_draws_tenths_or_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = io.StringIO()
    p = rp.Progress(20, "m", plain)
    for done in range(1, 21):
        p.update(done, done // 4)
    p.update(20, 5, final=True)
    lines = plain.getvalue().splitlines()
    assert len(lines) == 10 and lines[-1].startswith("m [" + "#" * 24 + "] 20/20 mistakes 5")

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Terminal()
    p = rp.Progress(20, "m", tty)
    p.update(1, 0)
    p.update(2, 1)  # within 0.1 s of the last draw: not drawn
    p.update(20, 5, final=True)
    text = tty.getvalue()
    assert text.count("\r") == 2 and text.endswith("\x1b[K\n") and "(25.00%)" in text


def test_the_async_client_against_the_app_on_its_own_loop(service: InProcessService) -> None:
    async def run() -> tuple[int, int]:
        async with AsyncClient(BASE_URL, transport=service.async_transport()) as c:
            await c.create_model("m", classes=["a", "b"], n_features=2)
            preds = await asyncio.gather(*(c.predict("m", [i, 1]) for i in range(10)))
            await c.feedback_batch([(p.prediction_id, "b") for p in preds])
            learned = await c.learn_batch("m", [[1, 0], [0, 1]], ["a", "b"])
            counters = (await c.read_model("m")).counters
            return counters.feedback, learned.version - counters.updates

    assert asyncio.run(run()) == (10, 0)  # every prediction answered, each update counted


# --- perceptron serve, without serving ---------------------------------------------------------


def test_serve_runs_uvicorn_with_the_app_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: dict[str, Any] = {}
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: ran.update(app=app, **kw))
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.setenv("PERCEPTRON_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("PERCEPTRON_AUTH", "false")  # serve checks the keys before any worker
    assert cli.main(["serve", "--port", "8123", "--workers", "3"]) == 0
    assert ran["app"] == "service.app:create_app" and ran["factory"] is True
    assert (ran["port"], ran["workers"]) == (8123, 3)
    folder = Path(__import__("os").environ["PROMETHEUS_MULTIPROC_DIR"])
    assert folder.is_dir()  # the workers' shared metrics folder, removed at exit
    monkeypatch.delenv("PERCEPTRON_REDIS_URL")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["serve", "--workers", "2"]) == 2
    assert "PERCEPTRON_REDIS_URL" in err.getvalue()
