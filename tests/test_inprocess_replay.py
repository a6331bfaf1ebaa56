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
import re
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from perceptron_client import AsyncClient, Client
from service import replay as rp
from service.cli import main as cli
from service.cli import replay_command as command
from service.cli.loopback import free_port
from service.learner import ModelConfig, Perceptron
from service.learner.config import Strategy
from service.replay.tally import Tally
from service.settings import Settings

from .inprocess import BASE_URL, InProcessService
from .run_command import run_replay as run_main

IRIS = rp.load_dataset("iris").shuffled(1).head(45)  # three classes, 4 features
# How a finished progress bar's last draw ends: its closing bracket, the spaces that cover a
# longer draw before it (a rate with fewer digits than the last), and the newline.
BAR_END = re.compile(r"\] *\n\Z")
CANCER = rp.load_dataset("breast_cancer").head(40)


@pytest.fixture
def service() -> Iterator[InProcessService]:
    s = InProcessService(Settings(auth=False, default_model=False)).start()
    yield s
    s.stop()


Replay = Callable[..., rp.Summary]


@pytest.fixture
def replay(service: InProcessService) -> Replay:
    """``rp.replay`` reaching the in-process service: ``replay(data, stream, **options)``."""

    def run(data: rp.Dataset, stream: rp.StreamOptions | None = None, **options: Any) -> Any:
        stream = stream or rp.StreamOptions()
        return rp.replay(
            data,
            rp.ReplayOptions(BASE_URL, stream=stream, **options),
            transport=service.async_transport(),
        )

    return run


def counters(service: InProcessService, model: str) -> Any:
    with Client(BASE_URL, transport=service.transport()) as c:
        return c.read_model(model).counters


def test_every_mode_counts_each_example_once_as_the_service_does(
    service: InProcessService, replay: Replay
) -> None:
    one = replay(CANCER, model="one")
    c = counters(service, "one")
    assert (one.examples, c.predictions, c.feedback, c.seen) == (40, 40, 40, 40)
    assert one.mistakes == c.mistakes and one.mode == "predict"
    learned = replay(CANCER, rp.StreamOptions("learn"), model="learned")
    assert learned.outcomes == one.outcomes  # predict + feedback at once is learn
    for n, stream in enumerate(
        [
            rp.StreamOptions(batch=7),
            rp.StreamOptions("learn", batch=6),
            rp.StreamOptions(delay=3),
            rp.StreamOptions(delay=4, batch=5, concurrency=3),
            rp.StreamOptions("learn", concurrency=2),
        ]
    ):
        s = replay(CANCER, stream, model=f"m{n}")
        c = counters(service, f"m{n}")
        assert s.examples == 40 and c.seen == 40 and s.mistakes == c.mistakes, stream
        assert (s.mode, s.batch, s.concurrency, s.delay) == (
            stream.mode,
            stream.batch,
            stream.concurrency,
            stream.delay,
        )
        if stream.mode == "learn" and stream.concurrency == 1:
            assert s.outcomes == one.outcomes, stream  # learned in order: the same perceptron


@pytest.mark.parametrize("delay", [0, 1, 10])
def test_late_labels_make_the_mistakes_of_the_pure_reference(
    service: InProcessService, replay: Replay, delay: int
) -> None:
    """With labels ``delay`` examples late, each update is decided from the scores kept with
    its prediction and applied when the label comes (docs/conventions.md)."""
    strategies: list[tuple[rp.Dataset, Strategy]] = [(CANCER, "multiclass"), (IRIS, "ovr")]
    for data, multiclass in strategies:
        stream = rp.StreamOptions(delay=delay)
        s = replay(data, stream, model=f"late{delay}", reset=True, multiclass=multiclass)
        config = ModelConfig(
            classes=tuple(data.classes), n_features=data.n_features, multiclass=multiclass
        )
        reference = Perceptron(config).delayed(data.rows, data.labels, delay)
        assert s.outcomes == [o.mistake for o in reference], (data.name, delay)
        updates = sum(o.updated for o in reference)
        assert counters(service, f"late{delay}").updates == updates


def test_a_multiclass_model_is_made_to_the_data_and_reset_on_request(
    service: InProcessService, replay: Replay
) -> None:
    s = replay(IRIS, rp.StreamOptions("learn", batch=10), multiclass="ovr")
    with Client(BASE_URL, transport=service.transport()) as c:
        config = c.read_model("iris").config
        assert (config.multiclass, config.n_features, len(config.classes)) == ("ovr", 4, 3)
        assert c.read_model("iris").counters.learned == 45 == s.examples
        again = replay(IRIS, rp.StreamOptions("learn"), multiclass="ovr", reset=True)
        assert c.read_model("iris").counters.learned == 45
        assert again.outcomes == s.outcomes


def test_a_model_that_does_not_fit_the_data_is_refused(
    service: InProcessService, replay: Replay
) -> None:
    with Client(BASE_URL, transport=service.transport()) as c:
        c.create_model("small", n_features=2, classes=[0, 1])
        c.create_model("other", n_features=30, classes=[0, 2])
    with pytest.raises(rp.ReplayError, match="n_features=2"):
        replay(CANCER, model="small")
    with pytest.raises(rp.ReplayError, match="lack"):
        replay(CANCER, model="other")


def test_a_model_whose_classes_are_the_datas_in_another_form_fits(
    service: InProcessService, replay: Replay
) -> None:
    data = rp.Dataset("t", [[1.0, 0.0], [0.0, 1.0]] * 3, ["\u00e9", "b"] * 3)
    with Client(BASE_URL, transport=service.transport()) as c:
        c.create_model("t", n_features=2, classes=["e\u0301", " b "])
        assert replay(data, rp.StreamOptions("learn"), model="t").examples == 6
        assert c.read_model("t").counters.learned == 6


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"mode": "learn", "delay": 2}, "delay applies", id="delay-with-learn"),
        pytest.param({"batch": 0}, "batch and concurrency", id="batch-0"),
        pytest.param({"concurrency": 0}, "batch and concurrency", id="concurrency-0"),
        pytest.param({"delay": -1}, "delay >= 0", id="negative-delay"),
        pytest.param({"rate": 0.0}, "rate > 0", id="rate-0"),
        pytest.param({"mode": "train"}, "mode must be one of", id="unknown-mode"),
        pytest.param({"retries": -1}, "retries", id="negative-retries"),
    ],
)
def test_stream_options_are_checked_when_made(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rp.StreamOptions(**options)


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
    learn = rp.ReplayOptions(BASE_URL, stream=rp.StreamOptions("learn"))
    s = rp.replay(CANCER, learn, transport=transport)
    assert busy == [0] and s.examples == 40 and counters(service, "breast_cancer").learned == 40


class Terminal(io.StringIO):
    """Text written to a terminal, kept."""

    def isatty(self) -> bool:
        return True


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
    nine = ["--dataset", "iris", "--shuffle", "1", "--limit", "9", "--model", "text"]
    code, out, err = run_main(nine)
    assert code == 0 and "mistakes" in out and err == ""  # no bar but on a terminal
    code, out, err = run_main([*nine, "--reset"], Terminal())
    mistakes = counters(reaching, "text").mistakes
    last = err.split("\r")[-1]  # the bar as it was left
    assert code == 0 and last.startswith("text: 100%|") and BAR_END.search(last)
    assert "9/9 [" in last and f"mistakes {mistakes} ({mistakes / 9:.2%})]" in last
    assert run_main([*nine, "--quiet", "--reset"], Terminal())[2] == ""  # no bar, no notice


def test_the_command_passes_every_option_to_the_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def replay(data: rp.Dataset, options: rp.ReplayOptions, **kwargs: Any) -> rp.Summary:
        seen.update(examples=len(data), options=options, **kwargs)
        return rp.Summary("m", "predict", 3, 2, 4, 0.5, [True, False, False, False])

    monkeypatch.setattr(command, "replay", replay)
    monkeypatch.setenv("PERCEPTRON_API_KEY", "key-from-env")
    monkeypatch.delenv("PERCEPTRON_URL", raising=False)
    code, out, err = run_main(
        ["--dataset", "iris", "--limit", "9", "--model", "m", "--multiclass", "ovo", "--reset",
         "--batch", "3", "--concurrency", "2", "--delay-labels", "4", "--rate", "50",
         "--url", "http://service.test:1", "--timeout", "7", "--quiet"]
    )  # fmt: skip
    assert (code, err, seen["examples"], seen["progress"]) == (0, "", 9, None)
    stream = rp.StreamOptions(mode="predict", batch=3, concurrency=2, delay=4, rate=50.0)
    assert seen["options"] == rp.ReplayOptions(
        url="http://service.test:1",
        api_key="key-from-env",
        timeout=7.0,
        model="m",
        multiclass="ovo",
        reset=True,
        stream=stream,
    )
    assert out.splitlines()[2:4] == ["mistakes      1", "mistake rate  25.00%"]
    run_main(["--dataset", "iris", "--mode", "learn", "--api-key", "given", "--quiet"])
    options = seen["options"]
    assert (options.api_key, options.model, options.url, options.reset) == (
        "given",
        None,  # the dataset's name
        "http://127.0.0.1:8000",
        False,
    )
    assert options.stream == rp.StreamOptions("learn")
    monkeypatch.setenv("PERCEPTRON_URL", "http://service.test:2")
    run_main(["--dataset", "iris", "--quiet"])
    assert (seen["options"].url, seen["options"].api_key) == (
        "http://service.test:2",
        "key-from-env",
    )


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
    assert code == 2 and "'bad name!' is not a model's name" in err  # refused before it sends
    code, _, err = run_main(
        ["--dataset", "iris", "--shuffle", "1", "--limit", "9", "--model", "c", "--quiet",
         "--curve", str(tmp_path)]
    )  # fmt: skip
    assert code == 2 and f"cannot write {tmp_path}: it is a folder" in err
    with Client(BASE_URL, transport=reaching.transport()) as c:  # said before the replay
        assert "c" not in [m.name for m in c.list_models().models]


def test_the_command_reports_a_service_it_cannot_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    monkeypatch.setattr(
        command, "replay", partial(rp.replay, transport=httpx.MockTransport(refuse))
    )
    code, _, err = run_main(["--dataset", "iris", "--quiet", "--url", "http://nowhere.test"])
    assert code == 6 and "cannot reach http://nowhere.test (ConnectError" in err


def test_the_tally_counts_each_example_once_and_shows_the_counts() -> None:
    shown: list[tuple[int, int]] = []

    class Shown(rp.Progress):
        def update(self, done: int, mistakes: int) -> None:
            shown.append((done, mistakes))

    tally = Tally(4, Shown(4, "m", io.StringIO()))
    tally.record([(2, True), (0, False)])
    tally.record([(3, True)])
    assert (tally.labelled, tally.mistakes, shown) == (3, 2, [(2, 1), (3, 2)])
    with pytest.raises(AssertionError, match="1 examples got no answer"):
        tally.outcomes()
    with pytest.raises(AssertionError, match="example 3 was labelled twice"):
        tally.record([(3, False)])
    tally.record([(1, False)])
    assert tally.outcomes() == [False, False, True, True] and shown[-1] == (4, 2)


def test_the_progress_bar_is_drawn_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = Terminal()
    p = rp.Progress(20, "m", tty)
    for done in range(1, 21):
        p.update(done, done // 4)  # within 0.1 s of each other: drawn once or twice
    p.update(20, 5)
    p.close()
    p.close()  # closed already: nothing more
    draws = tty.getvalue().split("\r")[1:]
    assert 2 <= len(draws) <= 5, draws  # when made, maybe once on the way, when done
    assert draws[0].startswith("m:   0%|") and " 0/20 " in draws[0]
    assert draws[0].endswith(", mistakes 0 (-)]")
    assert draws[-1].startswith("m: 100%|") and BAR_END.search(draws[-1])
    assert " 20/20 [" in draws[-1] and "ex/s, mistakes 5 (25.00%)]" in draws[-1]

    plain = io.StringIO()  # a file or a pipe
    p = rp.Progress(20, "m", plain)
    p.update(20, 5)
    p.close()
    assert plain.getvalue() == ""

    monkeypatch.setitem(sys.modules, "tqdm", None)  # installed without the replay extra
    tty = Terminal()
    p = rp.Progress(20, "m", tty)
    p.update(20, 5)
    p.close()
    assert tty.getvalue() == ""


def test_an_error_ends_the_bar_before_its_message(
    service: InProcessService, monkeypatch: pytest.MonkeyPatch
) -> None:
    learned = [0]

    async def gone_after_three(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/learn":
            if learned[0] == 3:
                raise httpx.ConnectError("connection refused", request=request)
            learned[0] += 1
        return await service.async_transport().handle_async_request(request)

    transport = httpx.MockTransport(gone_after_three)
    monkeypatch.setattr(command, "replay", partial(rp.replay, transport=transport))
    args = ["--dataset", "iris", "--shuffle", "1", "--mode", "learn", "--limit", "9"]
    code, _, err = run_main(args, Terminal())
    bar, message, end = err.split("\r")[-1].split("\n")
    assert code == 6 and " 3/9 [" in bar and end == ""  # unreachable: as perceptron models
    assert message.startswith("perceptron replay: cannot reach http://127.0.0.1:8000")


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
    # (the kernel compiled in a process of its own before the workers: none in a fast test)
    monkeypatch.setattr(cli, "_compile_kernel", lambda: ran.update(compiled="app" not in ran))
    # The service's logging, set before the settings are checked (uvicorn sets it again)
    monkeypatch.setattr("logging.config.dictConfig", lambda c: ran.update(logging=c))
    # Unset, and unset again after the test (serve sets it in os.environ): set first, so that
    # monkeypatch records how it was and puts it back.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    monkeypatch.setenv(cli.SERVE_WORKERS, "")
    monkeypatch.delenv(cli.SERVE_WORKERS)
    monkeypatch.setenv("PERCEPTRON_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("PERCEPTRON_AUTH", "false")  # serve checks the keys before any worker
    port = free_port()  # serve tries it before anything starts
    assert cli.main(["serve", "--port", str(port), "--workers", "3"]) == 0
    # Its workers' app, which leaves the warning that auth is off to serve: once, not per worker
    assert ran["app"] == "service.cli.main:worker_app" and ran["factory"] is True
    assert ran["logging"] == ran["log_config"]
    assert (ran["port"], ran["workers"]) == (port, 3)
    # A worker busy for seconds is not taken for hung and killed (uvicorn's default: 5 s)
    assert ran["timeout_worker_healthcheck"] == cli.WORKER_HEALTHCHECK_S >= 30
    assert ran["compiled"] is True  # before the workers started
    assert __import__("os").environ[cli.SERVE_WORKERS] == "3"  # how many, told to each worker
    folder = Path(__import__("os").environ["PROMETHEUS_MULTIPROC_DIR"])
    assert folder.is_dir()  # the workers' shared metrics folder, removed at exit
    monkeypatch.delenv("PERCEPTRON_REDIS_URL")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["serve", "--workers", "2"]) == 2
    assert "PERCEPTRON_REDIS_URL" in err.getvalue()


def test_a_batch_the_service_refuses_leaves_no_model_the_replay_made(
    reaching: InProcessService,
) -> None:
    """--batch past the service's max_batch: 413 batch_too_large at the first request; the
    model the replay made is deleted again (it stayed, empty), and the command says why."""
    code, _, err = run_main(
        ["--dataset", "turning", "--limit", "1500", "--mode", "learn", "--batch", "1500",
         "--model", "big", "--quiet"]
    )  # fmt: skip
    assert code == 2 and "--batch 1500" in err and "was deleted" in err, err
    with Client(BASE_URL, transport=reaching.transport()) as c:
        assert "big" not in [m.name for m in c.list_models().models]
