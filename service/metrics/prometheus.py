"""Prometheus exposition: per-model figures read from Redis, per-endpoint HTTP figures.

With several worker processes, prometheus-client's multiprocess mode aggregates the HTTP
figures of every worker (``PROMETHEUS_MULTIPROC_DIR``, set by ``perceptron serve``); the
per-model figures come from Redis, so every worker reports the same numbers.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from service.contract import store_protocol as protocol
from service.contract.store_protocol import RING_SIZE, Meta
from service.contract.store_values import Observations
from service.learner import ModelConfig
from service.metrics.figures import (
    confusion_cells,
    delay_counts,
    ring_mistakes,
    source_rows,
    without_defaults,
)
from service.metrics.readiness import Serving, ServingCollector

log = logging.getLogger("perceptron")

REQUESTS = Counter(
    "perceptron_http_requests",
    "HTTP requests answered, by route template, method and status.",
    ["route", "method", "status"],
)
LATENCY = Histogram(
    "perceptron_http_request_duration_seconds",
    "Time to answer an HTTP request, by route template and method.",
    ["route", "method"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

# Per worker (a ``pid`` label in multiprocess mode): the models it keeps in memory.
REPLICA_BYTES = Gauge(
    "perceptron_worker_replica_bytes",
    "Bytes of model weights this worker keeps in memory (PERCEPTRON_REPLICA_MEMORY_BYTES "
    "bounds them).",
    multiprocess_mode="liveall",
)
REPLICAS = Gauge(
    "perceptron_worker_replicas",
    "Models this worker keeps in memory.",
    multiprocess_mode="liveall",
)
REPLICA_EVICTIONS = Counter(
    "perceptron_worker_replica_evictions",
    "Models a worker dropped from memory to stay within PERCEPTRON_REPLICA_MEMORY_BYTES.",
)


def record_replicas(count: int, nbytes: int, evicted: int = 0) -> None:
    """What a worker keeps in memory, after it took, dropped or evicted a model."""
    REPLICAS.set(count)
    REPLICA_BYTES.set(nbytes)
    if evicted:
        REPLICA_EVICTIONS.inc(evicted)


def forget_worker() -> None:
    """At a clean exit: this worker's per-worker figures leave the exposition."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


# Every counter the meta hash keeps (updates is the version, exported on its own).
COUNTERS = {c.name: c.help for c in protocol.COUNTERS if c.name != "updates"}


class ModelCollector:
    """Per-model figures from the observations read for this scrape."""

    def __init__(self, models: list[tuple[str, ModelConfig, Observations]]) -> None:
        self.models = models

    def collect(self) -> Iterator[Metric]:
        families = {
            k: CounterMetricFamily(f"perceptron_model_{k}", help_, labels=["model"])
            for k, help_ in COUNTERS.items()
        }
        updates = CounterMetricFamily(
            "perceptron_model_updates", "Weight updates (the model's version).", labels=["model"]
        )
        rate = GaugeMetricFamily(
            "perceptron_model_mistake_rate",
            "Mistake rate over all labelled examples, the last 100 or 1000, or the labels that "
            "came (without_defaults: those by default left out).",
            labels=["model", "window"],
        )
        radius = GaugeMetricFamily(
            "perceptron_model_max_feature_norm",
            "R: the largest feature norm seen.",
            labels=["model"],
        )
        confusion = CounterMetricFamily(
            "perceptron_model_confusion",
            "Labelled examples by true and served label.",
            labels=["model", "true", "served"],
        )
        shown = []
        for name, config, obs in self.models:
            meta = obs.meta
            try:  # a model whose counters are not numbers is left out, not every model
                values = {k: float(meta.get(k, 0)) for k in (*COUNTERS, Meta.VERSION, Meta.R2)}
                seen, mistakes = int(meta.get(Meta.SEEN, 0)), int(meta.get("mistakes", 0))
            except ValueError:
                log.error(
                    "model %r has counters that are not numbers; its figures are left out", name
                )
                continue
            for k, family in families.items():
                family.add_metric([name], values[k])
            updates.add_metric([name], values[Meta.VERSION])
            if seen:
                rate.add_metric([name, "all"], mistakes / seen)
                came = without_defaults({k: int(values[k]) for k in COUNTERS})
                if came is not None:
                    rate.add_metric([name, "without_defaults"], came)
                for last in (100, 1000):
                    m, n = ring_mistakes(obs.ring, seen, last, RING_SIZE)
                    if n:  # (none known: those since an import, say)
                        rate.add_metric([name, str(last)], m / n)
            radius.add_metric([name], math.sqrt(max(values[Meta.R2], 0.0)))
            for served, true, count in confusion_cells(config, meta):
                confusion.add_metric(
                    [name, str(config.classes[true]), str(config.classes[served])], float(count)
                )
            shown.append((name, obs))
        yield from families.values()
        yield from (updates, rate, radius, confusion)
        yield from self.by_source(shown)
        yield from self.delays(shown)

    @staticmethod
    def delays(models: list[tuple[str, Observations]]) -> Iterator[Metric]:
        """How late labels come, and the predictions whose default is still to come."""
        delay = HistogramMetricFamily(
            "perceptron_model_label_delay_seconds",
            "Time from a prediction to its label (feedback applied; defaults left out).",
            labels=["model"],
        )
        awaiting = GaugeMetricFamily(
            "perceptron_model_awaiting_default",
            "Predictions of a model with a default_label still waiting for their label.",
            labels=["model"],
        )
        bounds = [*(str(float(b)) for b in protocol.DELAY_BUCKETS_S), "+Inf"]
        for name, obs in models:
            cumulative, total = [], 0
            for bound, n in zip(bounds, delay_counts(obs.delays), strict=True):
                total += n
                cumulative.append((bound, float(total)))
            sum_s = obs.delays.get(protocol.Field.DELAY_MS, 0) / 1000
            delay.add_metric([name], cumulative, sum_s)
            awaiting.add_metric([name], float(obs.awaiting_default))
        yield from (delay, awaiting)

    @staticmethod
    def by_source(models: list[tuple[str, Observations]]) -> Iterator[Metric]:
        """What each API key (by its name) taught each model: labelled examples, mistakes
        among them, and the updates they caused."""
        families = [
            CounterMetricFamily(
                f"perceptron_model_source_{what}",
                f"{help_} by the API key's name (empty with keys off).",
                labels=["model", "source"],
            )
            for what, help_ in (
                ("seen", "Labelled examples sent"),
                ("mistakes", "Mistakes among the labelled examples sent"),
                ("updates", "Weight updates caused"),
            )
        ]
        for name, obs in models:
            for source, *counts in source_rows(obs.meta):
                for family, count in zip(families, counts, strict=True):
                    family.add_metric([name, source], float(count))
        yield from families


class ChallengerCollector:
    """Each challenger's figures (``admin/challengers.py``'s, by model), labelled ``learner``
    with its id."""

    def __init__(self, shown: list[tuple[str, list[dict[str, Any]]]]) -> None:
        self.shown = shown

    def collect(self) -> Iterator[Metric]:
        labels = ["model", "learner"]
        counts = {
            "seen": "Labelled examples a challenger learned since it was added.",
            "mistakes": "A challenger's mistakes, by progressive validation.",
            "updates": "Labelled examples that changed a challenger's weights.",
            "drift_warnings": "Warnings of a challenger's drift detector, on its mistakes.",
            "drifts": "Drifts a challenger's drift detector found in its mistakes.",
        }
        families = {
            k: CounterMetricFamily(f"perceptron_challenger_{k}", help_, labels=labels)
            for k, help_ in counts.items()
        }
        rate = GaugeMetricFamily(
            "perceptron_challenger_mistake_rate",
            "A challenger's mistake rate over all it learned, or the last 100 or 1000.",
            labels=[*labels, "window"],
        )
        windows = {"all": "all", "last_100": "100", "last_1000": "1000"}
        for model, challengers in self.shown:
            for c in challengers:
                for k, family in families.items():
                    family.add_metric([model, c["id"]], float(c[k]))
                for key, window in windows.items():
                    if c["mistake_rate"][key] is not None:
                        rate.add_metric([model, c["id"], window], c["mistake_rate"][key])
        yield from families.values()
        yield rate


def exposition(
    models: Iterable[tuple[str, ModelConfig, Observations]],
    serving: Serving | None = None,
    challengers: list[tuple[str, list[dict[str, Any]]]] | None = None,
) -> bytes:
    """The text format of the HTTP figures (every worker's), the models' figures, and the
    replica's serving state (``readiness.py``) when given."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        data = generate_latest(registry)
    else:
        from prometheus_client import REGISTRY

        data = generate_latest(REGISTRY)
    models_registry = CollectorRegistry()
    models_registry.register(ModelCollector(list(models)))
    if serving is not None:
        models_registry.register(ServingCollector(serving))
    if challengers:
        models_registry.register(ChallengerCollector(challengers))
    return data + generate_latest(models_registry)
