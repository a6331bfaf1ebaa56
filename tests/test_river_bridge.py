"""River's evaluation against a live model: ``river.evaluate.progressive_val_score`` and River's
metrics run unchanged on ``ServiceClassifier``, and count what the service counts.

On ``perceptron serve --workers 2`` and a real redis-server, River's accuracy over its bundled
Phishing dataset equals one minus the service's own mistake rate over the same stream (and its
confusion matrix the service's). The rest runs on the service in-process and on the real one:
labels that come late, a pipeline, a multiclass dataset, named features, and what falls back to
``POST /learn``.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from river import compose, datasets, evaluate, metrics, preprocessing

from perceptron_client import Client
from perceptron_client.river_bridge import ServiceClassifier

from .inprocess import reach
from .servers import ServiceProcess
from .test_first_session import python_blocks, section

pytestmark = pytest.mark.in_process  # but the first test: on the service in-process and real

ROOT = Path(__file__).resolve().parents[1]
CLIENT_PAGE = ROOT / "deploy" / "CLIENT.md"
PHISHING = list(datasets.Phishing())  # bundled with river (phishing.csv.gz): no download
N_FEATURES = len(PHISHING[0][0])


def service_counts(client: Client, name: str) -> tuple[int, int, float]:
    """The service's own count of labelled examples, of mistakes, and its mistake rate."""
    m = client.metrics(name)
    assert m.mistake_rate.cumulative is not None
    return m.counters.seen, m.counters.mistakes, m.mistake_rate.cumulative


def assert_counted_alike(accuracy: metrics.Accuracy, client: Client, name: str) -> None:
    """River's accuracy is one minus the service's mistake rate: the same examples counted,
    the same ones right."""
    seen, mistakes, rate = service_counts(client, name)
    assert (accuracy.cm.total_weight, accuracy.cm.total_true_positives) == (seen, seen - mistakes)
    assert accuracy.get() == pytest.approx(1 - rate, rel=0, abs=1e-15)  # to the last bit or so


def service_confusion(client: Client, name: str) -> dict[Any, dict[Any, int]]:
    """The service's confusion matrix as River keeps one: true label -> predicted -> count."""
    c = client.metrics(name).confusion
    return {
        c.labels[t]: {c.labels[p]: n for p, n in enumerate(row) if n}
        for t, row in enumerate(c.matrix)
    }


def river_confusion(cm: metrics.ConfusionMatrix) -> dict[Any, dict[Any, int]]:
    return {int(t): {int(p): int(n) for p, n in row.items() if n} for t, row in cm.data.items()}


@pytest.mark.servers  # two worker processes on a real redis-server
def test_rivers_accuracy_is_one_minus_the_services_mistake_rate(
    two_workers: ServiceProcess,
) -> None:
    with Client(two_workers.url) as client:
        client.create_model("phishing-stream", classes=[0, 1], n_features=N_FEATURES)
        model = ServiceClassifier(client, "phishing-stream")
        accuracy, f1 = metrics.Accuracy(), metrics.F1()

        evaluate.progressive_val_score(datasets.Phishing(), model, accuracy + f1)

        assert_counted_alike(accuracy, client, "phishing-stream")
        seen, mistakes, rate = service_counts(client, "phishing-stream")
        assert accuracy.get() == 1 - rate  # here to the last bit
        confusion = service_confusion(client, "phishing-stream")
        assert river_confusion(accuracy.cm) == confusion
        counters = client.read_model("phishing-stream").counters
    # Each label went to the prediction it was for: one prediction and one feedback an example
    assert (counters.predictions, counters.feedback, counters.learned) == (1250, 1250, 0)
    # and the stream is the sequential perceptron: scikit-learn's Perceptron makes 205 mistakes
    # on it (docs/conventions.md, tests/test_sklearn_parity.py)
    assert counters.mistakes == 205 and accuracy.get() == 1 - 205 / 1250
    # River's other metrics read the same confusion: F1 of the positive class (True, 1)
    tp, fp, fn = confusion[1][1], confusion[0][1], confusion[1][0]
    assert f1.get() == pytest.approx(2 * tp / (2 * tp + fp + fn), rel=1e-12)


def assert_prints_what_it_says(block: str, url: str) -> None:
    """A Python block of the docs, run against the service at ``url``, prints what the
    comments of its print lines say."""
    code = block.replace("http://127.0.0.1:8000", url)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    shown = [line.split("  # ", 1)[1] for line in block.splitlines() if "print(" in line]
    assert len(shown) >= 2 and done.stdout.splitlines() == shown


@pytest.mark.servers
def test_the_example_of_the_client_page_runs_as_pasted(two_workers: ServiceProcess) -> None:
    (block,) = python_blocks(section("River", CLIENT_PAGE))
    assert_prints_what_it_says(block, two_workers.url)


# --- the service in-process, and the real one ---------------------------------------------------


@pytest.fixture
def api(client: httpx.Client) -> Iterator[Client]:
    with Client(str(client.base_url), **reach(client)) as c:
        yield c


def test_late_labels_still_find_their_predictions(api: Client) -> None:
    """With labels 25 examples late River copies each x; each label still goes, as feedback,
    to the prediction made for its features."""
    api.create_model("late", classes=[0, 1], n_features=N_FEATURES)
    accuracy = metrics.Accuracy()
    stream = PHISHING[:400]
    evaluate.progressive_val_score(stream, ServiceClassifier(api, "late"), accuracy, delay=25)
    counters = api.read_model("late").counters
    assert (counters.predictions, counters.feedback, counters.learned) == (400, 400, 0)
    assert_counted_alike(accuracy, api, "late")


def test_named_features_take_x_as_it_is(api: Client) -> None:
    api.create_model("named", classes=[0, 1], hash_bits=10)
    accuracy = metrics.Accuracy()
    evaluate.progressive_val_score(PHISHING[:300], ServiceClassifier(api, "named"), accuracy)
    assert_counted_alike(accuracy, api, "named")
    assert api.read_model("named").counters.feedback == 300
    row = api.weights("named").rows[0].weights
    assert isinstance(row, dict) and 0 < len(row) <= N_FEATURES  # hashed names


def test_a_multiclass_pipeline_counts_alike(api: Client) -> None:
    """ImageSegments (bundled, seven string classes) through River's StandardScaler: while its
    transformers learn in predict_one, learn_one hands the model the features it predicted."""
    stream = list(itertools.islice(datasets.ImageSegments(), 400))
    classes = sorted({y for _, y in stream})
    n_features = len(stream[0][0])
    api.create_model("segments", classes=classes, n_features=n_features, multiclass="ovr")
    accuracy = metrics.Accuracy()
    pipeline = preprocessing.StandardScaler() | ServiceClassifier(api, "segments")
    with compose.learn_during_predict():
        evaluate.progressive_val_score(stream, pipeline, accuracy)
    counters = api.read_model("segments").counters
    assert (counters.feedback, counters.learned) == (400, 0)
    assert_counted_alike(accuracy, api, "segments")
    assert 0.5 < accuracy.get() < 1


def test_a_label_without_a_waiting_prediction_is_learned(api: Client) -> None:
    api.create_model("plain", classes=[0, 1], n_features=N_FEATURES)
    model = ServiceClassifier(api, "plain")
    for x, y in PHISHING[:20]:
        model.learn_one(x, y)  # never predicted: POST /learn
    x, y = PHISHING[20]
    model.predict_one(x)
    api.reset_model("plain")  # the prediction lapses
    model.learn_one(x, y)  # its feedback is not found: POST /learn
    counters = api.read_model("plain").counters
    assert (counters.learned, counters.feedback, counters.unknown_feedback) == (1, 0, 1)
    assert model.predict_one(x) in (0, 1)


def test_the_oldest_predictions_stop_waiting_past_max_waiting(api: Client) -> None:
    api.create_model("bounded", classes=[0, 1], n_features=N_FEATURES)
    model = ServiceClassifier(api, "bounded", max_waiting=3)
    for x, _ in PHISHING[:5]:
        model.predict_one(x)
    for x, y in PHISHING[:5]:
        model.learn_one(x, y)
    counters = api.read_model("bounded").counters
    assert (counters.predictions, counters.feedback, counters.learned) == (5, 3, 2)


def test_a_clone_is_refused_not_a_second_view_of_the_live_model(api: Client) -> None:
    with pytest.raises(TypeError, match="share rather than start afresh"):
        ServiceClassifier(api, "any").clone()


def test_features_orders_a_dense_models_columns(api: Client) -> None:
    api.create_model("columns", classes=[0, 1], n_features=2)
    model = ServiceClassifier(api, "columns", features=["b", "a"])
    model.learn_one({"a": 1.0, "b": 3.0, "ignored": 5.0}, True)  # a mistake at 0: learned
    assert api.weights("columns").rows[0].weights == [3.0, 1.0]
    model.learn_one({"a": 2.0}, False)  # b missing: 0
    assert api.weights("columns").rows[0].weights == [3.0, -1.0]


@pytest.mark.parametrize(
    ("config", "features", "says"),
    [
        pytest.param(
            {"n_features": 3}, None, "dense with 3 features; the first x has 9", id="width"
        ),
        pytest.param({"n_features": 3}, ["a"], "'features' names 1", id="features-width"),
        pytest.param({"hash_bits": 4}, ["a"], "has named features", id="features-named"),
    ],
)
def test_features_that_do_not_fit_the_model_are_refused(
    api: Client, config: dict[str, Any], features: list[str] | None, says: str
) -> None:
    api.create_model("misfit", classes=[0, 1], **config)
    with pytest.raises(ValueError, match=says):
        ServiceClassifier(api, "misfit", features=features).predict_one(PHISHING[0][0])
    assert api.read_model("misfit").counters.predictions == 0
