"""A worker's copy of one model, kept exact by replaying the model's update log."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.contract.store_protocol import Meta
from service.contract.store_values import SyncData
from service.errors import ModelStateLost, StaleModel
from service.learner import Example, ModelConfig, Weights
from service.learner.codec import apply_entry, pack_payload, pack_record, unpack_weights
from service.learner.perceptron import predict_index


@dataclass(frozen=True, slots=True)
class Prediction:
    served: int  # class index
    scores: np.ndarray  # the served scores (averaged when the model is)
    record: bytes  # the pending record the store keeps for the feedback
    version: int
    seen: int


class Replica:
    """Config, epoch and weights of one model as this worker last saw them.

    ``weights.version == -1`` means nothing is loaded yet; every store reply that carries
    log entries goes through :meth:`catch_up`, which applies each entry once, in log order.
    """

    def __init__(
        self, name: str, config: ModelConfig, epoch: str, challenged: bool = False
    ) -> None:
        self.name = name
        self.config = config
        self.epoch = epoch
        # Whether the model has challengers, as last seen: its learn commits then carry every
        # example's entry for them (a commit without, when it has some, is refused: learn.py)
        self.challenged = challenged
        self.weights = Weights.zeros(config)
        self.weights.version = -1
        w = self.weights  # every later copy of the weights has the same arrays' sizes
        self.nbytes = sum(a.nbytes for a in w.arrays())
        self.queues: dict[str, Any] = {}  # group-commit queues of this replica, by operation
        # Held while the weights change in place (a sync's entries), and while a learn commit
        # learning off the event loop copies them (learn_commits.py): never both at once.
        self.guard = threading.Lock()

    @classmethod
    def from_meta(cls, name: str, meta: dict[str, str]) -> Replica:
        config, epoch = ModelConfig.from_json(meta[Meta.CONFIG]), meta[Meta.EPOCH]
        return cls(name, config, epoch, int(meta.get(Meta.CHALLENGERS, 0)) > 0)

    def needs_snapshot(self, data: SyncData) -> bool:
        """Whether ``catch_up`` would load the snapshot ``data`` carries."""
        return data.snapshot is not None and data.base > self.weights.version

    def catch_up(self, data: SyncData, unpacked: Weights | None = None) -> None:
        """Apply what the store sent: a snapshot if newer than this copy (``unpacked``: the
        snapshot already unpacked), then new entries."""
        if data.epoch != self.epoch:
            raise StaleModel(self.name)
        w = self.weights
        before = w.version
        if data.snapshot is not None and data.base > w.version:
            w = unpacked or unpack_weights(self.config, data.snapshot, data.base, data.seen)
            self.weights = w
        with self.guard:
            if w.version < data.base:
                w.version = -1  # a gap: the next commit fetches everything again
                return
            for offset, entry in enumerate(data.entries):
                if data.base + offset < w.version:
                    continue
                apply_entry(self.config, w, entry)
            if w.version < data.version:  # the store said more updates than it sent
                w.version = -1
                raise ModelStateLost(self.name, "its update log does not add up to its version")
            w.seen = counted(before, w.seen, data.version, data.seen)

    def committed(self, work: Weights | None, version: int, seen: int) -> None:
        """Take a learn commit's answer: its weights ``work`` (None: the copy moved meanwhile,
        and is kept), at the model's ``version`` and count ``seen`` then."""
        if work is not None:
            self.weights, work.seen = work, seen
        else:
            self.weights.seen = counted(self.weights.version, self.weights.seen, version, seen)

    def predict(self, x: Example) -> Prediction:
        cfg, w = self.config, self.weights
        scores = cfg.learner.served_scores(cfg, w, x)
        served = predict_index(cfg, scores)
        raw = cfg.learner.raw_scores(cfg, w, x) if cfg.counts_seen else scores
        updates = cfg.learner.updates_by_label(cfg, w, raw, x)
        record = pack_record(self.epoch, served, updates, pack_payload(raw, x))
        return Prediction(served, scores, record, w.version, w.seen)


def counted(version: int, seen: int, store_version: int, store_seen: int) -> int:
    """A copy's count of labelled examples (``seen``, at ``version``) after the store said
    ``store_seen`` at ``store_version``. A later version's count is the store's, lower too (a
    learner retrained at a drift starts its count again; versions only grow within an epoch);
    at the same version the count only grows (the later of two answers is the larger); an
    earlier version's answer, overtaken, says nothing new."""
    if store_version > version:
        return store_seen
    if store_version == version:
        return max(seen, store_seen)
    return seen
