"""Turning the results of learning and of the models' lifecycle into response bodies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
from fastapi import Response

from ..learner import ModelConfig
from ..learner.perceptron import class_votes, ovo_pairs
from ..learning import Predicted
from ..replica import Replica
from .schemas import (
    Counters,
    ModelInfo,
    ModelSpec,
    PredictBatchResponse,
    PredictResponse,
    WeightRow,
    WeightsResponse,
)


def counters_of(meta: dict[str, str]) -> Counters:
    counters = Counters(**{k: int(meta[k]) for k in Counters.model_fields if k in meta})
    counters.updates = int(meta.get("version", 0))
    return counters


def model_info(name: str, config: ModelConfig, meta: dict[str, str]) -> ModelInfo:
    return ModelInfo(
        name=name,
        config=ModelSpec(**config.to_dict()),
        version=int(meta.get("version", 0)),
        created=int(meta.get("created", 0)),
        counters=counters_of(meta),
    )


def json_response(body: dict[str, Any], status_code: int = 200) -> Response:
    """A JSON answer serialised by orjson, skipping the framework's generic encoder."""
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json")


def score_fields(config: ModelConfig, scores: np.ndarray) -> dict[str, object]:
    """``score`` for a binary model; ``scores`` by class otherwise (ovo: votes)."""
    if config.binary:
        return {"score": float(scores[0])}
    if config.multiclass == "ovo":
        scores = class_votes(config.n_classes, scores)
    return {"scores": {str(c): float(s) for c, s in zip(config.classes, scores, strict=True)}}


def row_targets(config: ModelConfig) -> list[str]:
    classes = [str(c) for c in config.classes]
    if config.binary:
        return [classes[1]]
    if config.multiclass == "ovo":
        i, j = ovo_pairs(config.n_classes)
        return [f"{classes[a]}|{classes[b]}" for a, b in zip(i, j, strict=True)]
    return classes


def _rows(config: ModelConfig, w: np.ndarray, b: np.ndarray) -> list[WeightRow]:
    rows = []
    for target, wr, br in zip(row_targets(config), w, b, strict=True):
        if config.dense:
            weights: list[float] | dict[str, float] = wr.tolist()
        else:
            nz = np.flatnonzero(wr)
            weights = {str(i): float(wr[i]) for i in nz}
        rows.append(WeightRow(target=target, weights=weights, bias=float(br)))
    return rows


def weights_view(rep: Replica) -> WeightsResponse:
    cfg, w = rep.config, rep.weights
    averaged = None
    if cfg.averaged:
        aw, ab = w.averaged()
        averaged = _rows(cfg, aw, ab)
    return WeightsResponse(
        model=rep.name,
        version=w.version,
        seen=w.seen,
        rows=_rows(cfg, w.w, w.b),
        averaged=averaged,
    )


def predict_batch_response(config: ModelConfig, preds: Sequence[Predicted]) -> PredictBatchResponse:
    """The body of /predict/batch: each prediction, and the version they were made with."""
    return PredictBatchResponse(
        predictions=[
            PredictResponse(
                prediction_id=p.prediction_id,
                label=p.label,
                version=p.version,
                **score_fields(config, p.scores),
            )
            for p in preds
        ],
        version=preds[0].version,
    )
