"""``perceptron models watch``'s output, from a stream of the service's own bodies (each kind's
route answered by the service, sent as events through a transport): a line per event, or its
JSON, ``--count`` ending it. (tests/test_client_events.py runs the command against a real
service, as its own process.)"""

from __future__ import annotations

import argparse
import json

import httpx
import pytest

from perceptron_client import Client, ModelMetrics
from service.cli.checked_arguments import positive_int
from service.cli.watch_command import watch

from .conftest import MakeService

KINDS = ("metrics", "checkpoints", "challengers", "drift")


@pytest.mark.in_process
def test_watch_prints_a_line_or_the_json_of_each_event(
    make_service: MakeService, capsys: pytest.CaptureFixture[str]
) -> None:
    http = make_service(default_model=False)
    model = {"classes": [-1, 1], "n_features": 2, "drift": {"detector": "ddm"}}
    assert http.put("/models/w", json=model).status_code == 201
    assert http.post("/learn", json={"model": "w", "features": [1, 2], "label": 1}).is_success
    assert http.put("/models/w/challengers/pa", json={"algorithm": "pa1"}).status_code == 201
    bodies = {kind: http.get(f"/models/w/{kind}").json() for kind in KINDS}
    bodies["drift"]["events"] = [
        {"learner": "served", "kind": "drift", "at_seen": 1200, "time": 1.0,
         "action": "retrained", "version": 41},
    ]  # fmt: skip
    stream = "".join(f"event: {k}\ndata: {json.dumps(v)}\n\n" for k, v in bodies.items())

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=stream)

    for as_json in (False, True):
        with Client("http://perceptron.test", transport=httpx.MockTransport(handle)) as c:
            watch(c, argparse.Namespace(name="w", json=as_json, count=4))
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 4
        if as_json:
            got = [json.loads(line) for line in lines]
            assert [e["event"] for e in got] == list(KINDS)
            assert ModelMetrics.model_validate(got[0]["data"]).counters.learned == 1
            continue
        rows = {line.split()[1]: line for line in lines}
        assert rows["metrics"].endswith("version 1; 1 labelled, 1 wrong; last 100 1.000")
        assert rows["checkpoints"].endswith("0 kept; every version from 0 on can be restored")
        assert rows["challengers"].endswith("pa 0 wrong of 0")
        assert rows["drift"].endswith(
            "served stable, pa stable; last: served drift at its example 1,200, retrained after "
            "version 41"
        )


@pytest.mark.parametrize(("text", "taken"), [("1", True), ("12", True), ("0", False), ("x", False)])
def test_watch_counts_only_a_positive_whole_number(text: str, taken: bool) -> None:
    if taken:
        assert positive_int(text) == int(text)
    else:  # (argparse says either is an invalid value)
        with pytest.raises((argparse.ArgumentTypeError, ValueError)):
            positive_int(text)
