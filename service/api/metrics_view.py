"""Assembling a model's metrics response from the store's observations and a replica."""

from __future__ import annotations

import math

from service.api.model_answers import counters_of
from service.api.schemas.metrics_schemas import (
    Confusion,
    Curve,
    CurvePoint,
    LabelDelays,
    MistakeBound,
    MistakeRates,
    ModelMetrics,
    Series,
    SeriesPoint,
    SourceCounts,
)
from service.contract.store_protocol import RING_SIZE, Meta
from service.contract.store_values import Observations
from service.engine.replica import Replica
from service.metrics.figures import (
    confusion,
    curve_points,
    defaulted_share,
    delay_counts,
    delay_quantile,
    mistake_bound,
    ring_mistakes,
    series_points,
    source_rows,
    weight_norm,
    without_defaults,
)


def model_metrics(rep: Replica, obs: Observations, bucket_s: int) -> ModelMetrics:
    counters = counters_of(obs.meta)
    seen = counters.seen

    windows = {last: ring_mistakes(obs.ring, seen, last, RING_SIZE) for last in (100, 1000)}

    def rate(last: int) -> float | None:
        m, n = windows[last]
        return m / n if n else None

    r2 = float(obs.meta.get(Meta.R2, 0.0))
    every, curve = curve_points(obs.curve)
    return ModelMetrics(
        model=rep.name,
        version=int(obs.meta.get(Meta.VERSION, 0)),
        counters=counters,
        mistake_rate=MistakeRates(
            cumulative=counters.mistakes / seen if seen else None,
            last_100=rate(100),
            last_1000=rate(1000),
            last_100_examples=windows[100][1],
            last_1000_examples=windows[1000][1],
            without_defaults=without_defaults(counters.model_dump()),
        ),
        series=Series(
            bucket_s=bucket_s,
            points=[SeriesPoint(**p) for p in series_points(obs.series, bucket_s)],
        ),
        curve=Curve(every=every, points=[CurvePoint(**p) for p in curve]),
        confusion=Confusion(
            labels=list(rep.config.classes), matrix=confusion(rep.config, obs.meta)
        ),
        weight_norm=weight_norm(rep.weights),
        max_feature_norm=math.sqrt(r2),
        mistake_bound=MistakeBound(
            **mistake_bound(rep.config, rep.weights, obs.recent, r2, counters.mistakes)
        ),
        sources=[
            SourceCounts(source=s, labelled=n, mistakes=m, updates=u)
            for s, n, m, u in source_rows(obs.meta)
        ],
        labels=LabelDelays(
            median_s=delay_quantile(obs.delays, 0.5),
            p95_s=delay_quantile(obs.delays, 0.95),
            counted=sum(delay_counts(obs.delays)),
            defaulted_share=defaulted_share(counters.model_dump()),
            awaiting_default=obs.awaiting_default,
        ),
    )
