"""What the alert rules (deploy/alerts.yml) need besides the models' counters: whether this
replica is ready, Redis's memory against its maxmemory, and each model's pending predictions
against their cap. Read at each scrape; kept apart from ``prometheus.ModelCollector``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric

from service.contract.store_values import MemoryUse

READY = "perceptron_ready"
MEMORY_USED = "perceptron_redis_memory_used_bytes"
MEMORY_MAX = "perceptron_redis_maxmemory_bytes"
PENDING = "perceptron_model_pending_bytes"
PENDING_MAX = "perceptron_model_pending_max_bytes"


@dataclass(slots=True)
class Serving:
    """One scrape's reading of this replica's serving state, filled in as it is read."""

    ready: bool  # what /readyz answers: 200 (True) or 503
    pending_max: int  # PERCEPTRON_MAX_PENDING_BYTES (0: no limit)
    memory: list[MemoryUse] = field(default_factory=list)  # none when Redis did not answer
    pending: dict[str, int] = field(default_factory=dict)  # model -> bytes awaiting labels


class ServingCollector:
    """The gauges of a ``Serving``: readiness always, the rest for what was read."""

    def __init__(self, serving: Serving) -> None:
        self.serving = serving

    def collect(self) -> Iterator[Metric]:
        s = self.serving
        yield GaugeMetricFamily(
            READY,
            "1 when this replica is ready (GET /readyz answers 200: Redis answers, evicts no "
            "model and has memory left), else 0.",
            value=float(s.ready),
        )
        used = GaugeMetricFamily(
            MEMORY_USED, "Bytes of memory Redis uses (INFO used_memory).", labels=["node"]
        )
        limit = GaugeMetricFamily(
            MEMORY_MAX,
            "Redis's maxmemory (0: no limit); past it a noeviction Redis refuses writes.",
            labels=["node"],
        )
        for m in s.memory:
            used.add_metric([m.node], float(m.used_bytes))
            limit.add_metric([m.node], float(m.max_bytes))
        pending = GaugeMetricFamily(
            PENDING,
            "Bytes of predictions awaiting their label, as the cap counts them (an estimate).",
            labels=["model"],
        )
        cap = GaugeMetricFamily(
            PENDING_MAX,
            "Most bytes of predictions a model may hold awaiting their label "
            "(PERCEPTRON_MAX_PENDING_BYTES; 0: no limit); past it /predict answers 429.",
            labels=["model"],
        )
        for name, held in sorted(s.pending.items()):
            pending.add_metric([name], float(held))
            cap.add_metric([name], float(s.pending_max))
        yield from (used, limit, pending, cap)
