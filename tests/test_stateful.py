"""A stateful, model-based test: random sequences of what users do, against the real service
(two worker processes, a real redis-server), compared after every step with a pure reference.

Hypothesis' ``RuleBasedStateMachine`` creates, deletes and makes anew models of other
configurations; predicts (one and batched) and sends feedback (one and batched, right, wrong,
repeated, conflicting, of an unknown label, for predictions that a delete, a reset, an import,
a rollback or an undo made unknown); learns (one, a batch, a packed batch); exports, imports
(an export as it is, with or without its checkpoints, into its own or another name, and one
tampered at and past every limit), resets; rolls back to a version and to a checkpoint, undoes
one key's updates or a time range's, lists checkpoints and kept updates; and runs two
operations at once; lets the wait of models with a default label run out (each prediction
left unlabelled gets the default once, in deadline order, and a label after it is a duplicate or
409 told "labelled_by": "default"; the predictions awaiting their default and the delays counted
are compared too). Two trainer keys, ``alice`` and ``bob``, send the labels: each update
records its source. The reference is the learner core itself (``service/learner``), with no
store behind it, and the history the service keeps (README "Model history"): the versions
``restorable_from .. version`` (the weights at the first and the updates after, replayed
exactly), and each checkpoint's weights. After every step the service's weights equal the
reference's bit for bit, and its counters, each key's counts, versions, checkpoints and list
of models equal the reference's; every answer is a 2xx or the documented 4xx with its code,
never a 500, never a Redis left busy.

CI runs a bounded number of examples; for a soak, more (the seed makes a run repeatable):

    .venv/bin/pytest tests/test_stateful.py --hypothesis-seed=1 \\
        -o "addopts=" -p no:cacheprovider  # with STATEFUL_EXAMPLES=500 STATEFUL_STEPS=60

A failure it finds shrinks to a short sequence; keep it as a plain regression test
(``tests/test_careless_use.py`` holds the first ones).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from service.admin.retention import KEEP_LAST
from service.api.routes.history_routes import MAX_UPDATES_LISTED
from service.contract import store_protocol as protocol
from service.contract.names import ISSUED_BYTES, issued_ms, new_token
from service.contract.store_protocol import Reason
from service.learner import ModelConfig, Perceptron, Weights
from service.learner.challenger import ChallengerState, challenger_config, start_state
from service.learner.codec import PENDING, RELEARNED, RESTARTED, pack_weights
from service.learner.config import ConfigError
from service.learner.drift_detectors import Status, detector_of, feed, status_of
from service.learner.features import Example, encode
from service.learner.passive_aggressive import learner
from service.learner.perceptron import predict_index
from service.store.keys import keys_of

from .servers import ServiceProcess

pytestmark = pytest.mark.servers  # two worker processes and a redis-server

EXAMPLES = int(os.environ.get("STATEFUL_EXAMPLES", "100"))
STEPS = int(os.environ.get("STATEFUL_STEPS", "25"))

NAMES = ("a", "b")
# A default label's wait: short, so that defaults come within a sequence. Every check of the
# service first settles the defaults due within HORIZON_S (it waits until the service has
# applied them, and the reference applies them, in deadline order); a request made while an
# unsettled default was due (a step that outlasted the horizon, on a busy machine) could race
# the sweep, and discards the sequence (assume) rather than guess which came first.
WAIT_S = 1
HORIZON_S = 0.5
# The configurations a name may be made with: dense and named features, two and three
# classes (one-vs-rest, one-vs-one, multiclass), a bias or none, averaged, a margin, a default
# label (binary; three classes, averaged, whose updates depend on the order of every label);
# passive-aggressive models (PA-I and PA-II) of each kind of classes; logistic regression and
# AROW (its variances beside the weights), binary and one-vs-rest; drift detectors that alert
# and that retrain (averaged or not).
CONFIGS: list[dict[str, Any]] = [
    {
        "n_features": 2,
        "drift": {  # (the first, which most sequences make: one that retrains)
            "detector": "ddm",
            "on_drift": "retrain",
            "warm_start": 2,
            "warning_threshold": 0.3,
            "drift_threshold": 1.5,
        },
    },
    {"n_features": 2, "feedback_ttl_s": WAIT_S, "default_label": 1},
    {
        "n_features": 2,
        "classes": ["x", "y", "z"],
        "multiclass": "ovr",
        "averaged": True,
        "feedback_ttl_s": WAIT_S,
        "default_label": "z",
        "drift": {"detector": "eddm", "warm_start": 2, "alpha": 0.99, "beta": 0.95},
    },
    {"n_features": 2, "classes": ["x", "y", "z"], "multiclass": "ovr", "averaged": True},
    {"n_features": 2, "classes": [0, 1, 2], "multiclass": "ovo", "fit_bias": False},
    {"classes": ["no", "yes"], "hash_bits": 3, "margin": 0.5},
    {"n_features": 2, "classes": ["x", "y", "z"], "learning_rate": 0.25},
    {"n_features": 2, "algorithm": "pa1", "C": 0.5},
    {"classes": ["x", "y", "z"], "hash_bits": 3, "multiclass": "ovr", "algorithm": "pa2"},
    {"n_features": 2, "classes": [0, 1, 2], "algorithm": "pa1", "C": 1e-3},
    {"n_features": 2, "algorithm": "logistic", "learning_rate": 0.5},
    {
        "n_features": 2,
        "averaged": True,
        "drift": {
            "detector": "ddm",
            "on_drift": "retrain",
            "warm_start": 2,
            "warning_threshold": 0.3,
            "drift_threshold": 1.5,
        },
    },
    {"classes": ["x", "y", "z"], "hash_bits": 3, "multiclass": "ovr", "algorithm": "arow"},
]
# The PA models' updates the service made and the reference checked, over every sequence: the
# test requires some (a PA model made and learned on both workers).
PA_UPDATES: list[int] = [0]
# A drift detector's state (None: fresh) and its events (the examples seen, the kind).
Drift = tuple[list[float] | None, list[tuple[int, str, int | None]]]
DRIFT_EVENTS: Counter[str] = Counter()  # the drift detectors' events, by kind
PROMOTIONS: list[int] = [0, 0]  # promotions made, and labels of a prediction made before one
COUNTERS = [c.name for c in protocol.COUNTERS]
# Every answer a step may get, by status: the documented codes, and never a 500
ALLOWED = {200, 201, 204, 404, 409, 410, 422}

# Two trainers' keys, whose names each update records, and an admin's.
KEYS = {"alice": "a" * 24, "bob": "b" * 24, "root": "r" * 24}
TRAINERS = ("alice", "bob")
ADMIN = "root"
RESET, IMPORT = Reason.BEFORE_RESET, Reason.BEFORE_IMPORT

# Challengers (two ids a model, so never more than it may have), each setting given or the
# model's own; "from": "served" too, refused where the layouts differ.
CHALLENGER_IDS = ("c1", "c2")
CHALLENGERS: list[dict[str, Any]] = [
    {"algorithm": "perceptron", "averaged": True},
    {"algorithm": "pa1", "C": 0.1},
    {"algorithm": "perceptron", "multiclass": "ovo", "learning_rate": 0.5, "margin": 0.25},
    {"algorithm": "pa2", "multiclass": "ovr"},
    {"algorithm": "logistic", "multiclass": "ovr"},
    {"algorithm": "arow", "multiclass": "ovr", "r": 0.5},
    {"averaged": True},  # (the model's rule: refused where it is PA's)
    {"C": 0.25},  # (the model's rule: refused where it is the perceptron's)
]

values = st.integers(-3, 3).map(float) | st.sampled_from([0.5, -1e-3, 1e3])


@dataclass
class Update:
    """A kept update, as the service logs it: replayed in order, it rebuilds the weights."""

    x: Example
    raw: np.ndarray  # the scores it was made with: the same update whatever came before
    t: int
    k: int  # the labelled example it came from (the averaged sums' age)
    source: str
    ms: int | None = None  # when, once the service listed it
    # as its prediction decided it (PENDING), or learned again at a retrain (RESTARTED the
    # first of the background learner's examples, RELEARNED the others): codec.apply_entry
    kind: bytes = PENDING

    def apply(self, config: ModelConfig, w: Weights) -> None:
        """The update applied to ``w``, as the service's replicas apply its entry."""
        if self.kind == RESTARTED:
            fresh = Weights.zeros(config)
            w.w[:], w.b[:] = fresh.w, fresh.b
            for name, a in fresh.state.items():
                w.state[name][...] = a
        raw = self.raw if self.kind == PENDING else config.learner.raw_scores(config, w, self.x)
        config.learner.apply_logged(config, w, self.x, raw=raw, t=self.t, k=self.k)


@dataclass
class Kept:
    """A checkpoint: the weights it restores, at its version."""

    version: int
    weights: Weights
    reason: str
    seen: int
    ms: float = math.inf  # when, once listed (one just made is the newest)
    config: ModelConfig | None = None  # the model's then (an export carries those of its own)


@dataclass
class Ref:
    """The reference of one model: the learner core, the service's counters, and the history
    the service keeps (README "Model history"): the versions ``start .. version`` (the
    weights at ``start`` and the updates after, replayed exactly) and the checkpoints."""

    config: ModelConfig
    learner: Perceptron  # or a PassiveAggressive (its subclass): the rule the model names
    generation: int
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    sources: dict[str, list[int]] = field(default_factory=dict)  # labelled, mistakes, updates
    start: int = 0  # restorable_from
    start_weights: Weights | None = None
    kept: list[Update] = field(default_factory=list)  # versions start + 1 .. version
    base: int | None = None  # the checkpoint the kept updates start from (none yet)
    checkpoints: dict[int, Kept] = field(default_factory=dict)
    last_id: int = 0  # the id of the last checkpoint made
    delays: int = 0  # labels whose delay the service counted (feedback applied)
    challengers: dict[str, ChallengerState] = field(default_factory=dict)
    labels: int = 0  # the challengers' count of the model's labels (their positions)
    marks: bytearray = field(default_factory=bytearray)  # the served outcomes, '0'/'1'
    offset: int = 0  # the examples counted that the learner's own count leaves out
    # the drift detector's state (None: fresh) and its events (the examples seen, the kind)
    drift_state: list[float] | None = None
    # (.., a retrain's: the version just before it, else None)
    drift_events: list[tuple[int, str, int | None]] = field(default_factory=list)
    # a retraining's background learner: the examples it learned (example, class, source)
    background: list[tuple[Example, int, str]] = field(default_factory=list)
    # the generations before its promotions since it was made, reset, imported or rolled back:
    # their predictions are still its own (a sequence is shorter than their life)
    previous: set[int] = field(default_factory=set)

    def ours(self, generation: int) -> bool:
        """Whether a prediction of that generation is this model's to label."""
        return generation == self.generation or generation in self.previous

    @classmethod
    def made(cls, params: dict[str, Any], generation: int) -> Ref:
        config = ModelConfig.from_dict(params)
        ref = cls(config, learner(config), generation)
        ref.start_weights = ref.weights.copy()
        return ref

    @property
    def weights(self) -> Weights:
        return self.learner.weights

    @property
    def version(self) -> int:
        return self.weights.version

    def features(self, raw: list[float]) -> Any:
        if self.config.dense:
            return raw
        return {f"f{i}": v for i, v in enumerate(raw)}

    def learn(self, features: Any, t: int, source: str) -> tuple[bool, bool]:
        cfg, w = self.config, self.weights
        x = encode(cfg, features)
        served = predict_index(cfg, cfg.learner.served_scores(cfg, w, x))
        return self.labelled(x, cfg.learner.raw_scores(cfg, w, x).copy(), served, t, source)

    def labelled(
        self, x: Example, raw: np.ndarray, served: int, t: int, source: str,
        decided: bool | None = None,
    ) -> tuple[bool, bool]:  # fmt: skip
        """A labelled example, served ``served`` with scores ``raw``: counted, learned, kept;
        one labelled by default (DEFAULT_SOURCE) is counted apart, under no key's name.
        ``decided``: whether the learner that served it would update (it logs an update or
        not; the learner that serves now makes it, from those scores)."""
        cfg, w = self.config, self.weights
        plan = cfg.learner.update_plan(cfg, raw, t, x, w)
        mistake, updated = served != t, bool(plan) if decided is None else decided
        self.counters["seen"] += 1
        act = self.feed_drift(mistake)
        swap: list[Update] = []
        if act == "warning":
            self.background.append((x, t, source))
        elif act == "swap":  # (the background learner serves from here, this its last example)
            self.background.append((x, t, source))
            swap = [Update(bx, raw, bt, k, bs, kind=RELEARNED)
                    for k, (bx, bt, bs) in enumerate(self.background, 1)]  # fmt: skip
            swap[0].kind, self.background, updated = RESTARTED, [], True
            self.offset = self.counters["seen"] - len(swap)
        PA_UPDATES[0] += updated and cfg.algorithm in ("pa1", "pa2")
        w.seen += 1
        self.counters["mistakes"] += mistake
        self.counters["updates"] += len(swap) or updated
        if source == protocol.DEFAULT_SOURCE:
            self.counters["defaulted"] += 1
            self.counters["defaulted_mistakes"] += mistake
        else:
            mine = self.sources.setdefault(source, [0, 0, 0])
            for i, happened in enumerate((True, mistake, updated)):
                mine[i] += happened
        for u in swap:
            u.apply(cfg, w)
            self.kept.append(u)
        if swap:
            w.seen = len(swap)
        elif updated:
            cfg.learner.apply_logged(cfg, w, x, raw=raw, t=t, k=w.seen)
            self.kept.append(Update(x, raw, t, w.seen, source))
        self.marks = (self.marks + (b"1" if mistake else b"0"))[-protocol.RING_SIZE :]
        self.labels += 1
        for challenger in self.challengers.values():  # every label, in the model's order
            challenger.learn(x, t, source == protocol.DEFAULT_SOURCE, served)
        return mistake, updated

    # -- history -------------------------------------------------------------------------

    def replay(self, n: int) -> Weights:
        """The weights at version ``start + n``: the oldest kept ones, then n kept updates."""
        assert self.start_weights is not None
        w = self.start_weights.copy()
        for u in self.kept[:n]:
            u.apply(self.config, w)
        w.seen = self.own_seen
        return w

    def checkpoint(
        self, reason: str, weights: Weights, version: int, seen: int | None = None
    ) -> int:
        """A checkpoint of these weights at ``version``, when the model had ``seen`` labelled
        examples (None: the model as it is now)."""
        self.last_id += 1
        kept = weights.copy()
        kept.version = version
        seen = self.own_seen if seen is None else seen
        self.checkpoints[self.last_id] = Kept(version, kept, reason, seen, config=self.config)
        return self.last_id

    def become(self, weights: Weights) -> None:
        """The model is these weights now (its ``updates`` counter is its version)."""
        weights.seen = self.own_seen
        self.learner.weights = weights
        self.counters["updates"] = weights.version

    def restart(self, weights: Weights) -> None:
        """The model is these weights now, its kept updates start again from them."""
        self.become(weights)
        self.start, self.start_weights = weights.version, weights.copy()
        self.kept, self.base = [], None

    def keep_from_start(self) -> None:
        """A rollback to a version or an undo: the kept updates start from a checkpoint now,
        of the oldest kept weights, made when none does yet."""
        if self.base is None:
            assert self.start_weights is not None
            # (the examples the model had then: just before the first kept update's, counted
            # by an averaged learner, whose updates count them; else the model's count now)
            seen = self.kept[0].k - 1 if self.kept and self.config.counts_seen else None
            if self.kept and self.kept[0].kind == RESTARTED:  # (its k is the new learner's)
                seen = None
            self.base = self.checkpoint(Reason.START, self.start_weights, self.start, seen)

    def feed_drift(self, mistake: bool) -> str | None:
        """The model's drift detector fed one more mistake (the model's count of it already
        counted); its events counted and kept. What a retraining does then: "warning" (the
        background learner learns the example), "swap" (it serves from here), or None."""
        if self.config.drift is None:
            return None
        detector, on_drift = detector_of(self.config.drift)
        state = detector.start() if self.drift_state is None else self.drift_state
        self.drift_state, events = feed(detector, state, [int(mistake)])
        warning, drift = detector.flags(self.drift_state)
        act = None
        if on_drift == "retrain":
            act = "warning" if warning else "swap" if drift else None
        for _, kind in events:
            DRIFT_EVENTS[kind] += 1
            retrained = kind == "drift" and act == "swap"
            before = self.weights.version if retrained else None
            self.drift_events.append((self.counters["seen"], kind, before))
            self.counters["drift_warnings" if kind == "warning" else "drifts"] += 1
            self.counters["retrains"] += retrained
            DRIFT_EVENTS["retrained"] += retrained
        self.drift_events = self.drift_events[-protocol.DRIFT_EVENTS_KEPT :]
        return act

    def prune(self) -> None:
        """What the service lets go after an operation that adds to the history: all but the
        newest KEEP_LAST checkpoints and the one the kept updates start from (the hourly and
        daily ones are among the newest: the test runs for less than an hour)."""
        newest = sorted(self.checkpoints, key=lambda i: (self.checkpoints[i].ms, i))[-KEEP_LAST:]
        keep = {*newest, *([self.base] if self.base is not None else [])}
        self.checkpoints = {i: c for i, c in self.checkpoints.items() if i in keep}

    def recount(self, seen: int) -> None:
        """An averaged learner's count restored: apart from the counters, which stay."""
        self.offset = self.counters["seen"] - seen

    @property
    def own_seen(self) -> int:
        """The served learner's count of labelled examples (its mean divides by it)."""
        return self.counters["seen"] - self.offset

    def rollback_to_version(self, v: int) -> int:
        before = self.checkpoint(Reason.BEFORE_ROLLBACK, self.weights, self.version)
        self.drift_state, self.background = None, []  # (the learner it watched is gone)
        self.keep_from_start()
        if self.config.averaged and v != self.version:
            # the mean divides by the count of the state restored: right after its update,
            # else just before the next one (a retrain's first: the oldest kept weights')
            n = v - self.start
            if n > 0:
                self.recount(self.kept[n - 1].k)
            elif self.kept[0].kind == RESTARTED:
                assert self.base is not None
                self.recount(self.checkpoints[self.base].seen)
            else:
                self.recount(self.kept[0].k - 1)
        self.become(self.replay(v - self.start))
        del self.kept[v - self.start :]
        self.prune()
        return before

    def rollback_to_checkpoint(self, id: int) -> int:
        c = self.checkpoints[id]
        before = self.checkpoint(Reason.BEFORE_ROLLBACK, self.weights, self.version)
        self.drift_state, self.background = None, []
        restored = c.weights.copy()
        restored.version = c.version
        if c.config is not None and c.config != self.config:  # (one before a promotion)
            self.config, self.learner = c.config, learner(c.config)
        if self.config.averaged:  # (the count its mean divides by, restored with its sums)
            self.recount(c.seen)
        self.restart(restored)
        self.prune()
        return before

    def undo(self, source: str | None, start_ms: float, stop_ms: float) -> tuple[int, int | None]:
        """Leave out the kept updates of ``source`` (None: any) made from ``start_ms`` to
        before ``stop_ms``: (how many, the checkpoint of the model as it was)."""

        def left_out(u: Update) -> bool:
            assert u.ms is not None  # (listed first)
            if u.kind != PENDING:  # (a retrain's: its learner stays whole)
                return False
            return (source is None or u.source == source) and start_ms <= u.ms < stop_ms

        staying = [u for u in self.kept if not left_out(u)]
        removed = len(self.kept) - len(staying)
        if not removed:
            return 0, None
        before = self.checkpoint(Reason.BEFORE_UNDO, self.weights, self.version)
        self.keep_from_start()
        self.kept = staying
        self.become(self.replay(len(staying)))
        self.prune()
        return removed, before

    def replaced(
        self,
        weights: Weights,
        counters: dict[str, int],
        sources: dict[str, list[int]],
        generation: int,
        reason: str,
        carried: list[Kept],
        drift: Drift = (None, []),
    ) -> None:
        """A reset or an import: the model as it was kept first as a checkpoint, then the
        file's checkpoints under the next ids; counters and kept updates start anew."""
        self.checkpoint(reason, self.weights, self.version)
        self.made_from(weights, counters, sources, generation, carried, drift)

    def made_from(
        self,
        weights: Weights,
        counters: dict[str, int],
        sources: dict[str, list[int]],
        generation: int,
        carried: list[Kept],
        drift: Drift = (None, []),
    ) -> None:
        """Its drift detector's state and events are the file's (``drift``), or fresh."""
        for c in carried:
            self.last_id += 1
            self.checkpoints[self.last_id] = Kept(
                c.version, c.weights.copy(), c.reason, c.seen, c.ms, self.config
            )
        self.counters, self.generation, self.previous = dict(counters), generation, set()
        self.offset = self.counters["seen"] - weights.seen
        self.sources = {s: list(c) for s, c in sources.items()}
        self.delays = 0  # (a reset or an import drops the delays counted)
        self.drift_state, self.drift_events = drift[0], list(drift[1])
        self.background = []  # (an import's: its source's, given after)
        # (and the ring of outcomes: a file carries none, none is known)
        self.marks = bytearray()
        self.restart(weights.copy())
        self.prune()


@dataclass
class Pending:
    name: str
    generation: int
    x: Example
    raw: np.ndarray  # the scores the prediction was served with: its update is theirs
    served: int
    decided: list[bool]  # per class: whether the learner that served it would update
    answer: tuple[int, dict[str, Any]] | None = None  # (class index, the answer) once labelled
    deadline_ms: int | None = None  # when its wait runs out, for a model with a default label
    key: str = ""  # its pending key: the sweep's order among equal deadlines
    by_default: bool = False  # labelled by its model's default
    purged: bool = False  # its model was deleted since: its record is gone


class Service(RuleBasedStateMachine):
    predictions = Bundle("predictions")

    def __init__(self, http: httpx.Client) -> None:
        super().__init__()
        self.http = http
        self.models: dict[str, Ref] = {}
        self.pending: dict[str, Pending] = {}
        self.generations = itertools.count(1)
        for name in [m["name"] for m in self.call("GET", "/models").json()["models"]]:
            self.call("DELETE", f"/models/{name}")

    # -- talking to the service ------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        self.on_time()  # (a default due, not settled, may race this request)
        r = self.http.request(method, path, json=body, **kw)
        self.on_time()
        assert r.status_code in ALLOWED, (method, path, body, r.status_code, r.text)
        if r.status_code >= 400:
            assert r.json()["code"], r.text
        return r

    def expect(self, r: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
        assert r.status_code == status, (status, code, r.status_code, r.text)
        body: dict[str, Any] = r.json() if status != 204 else {}
        if code is not None:
            assert body["code"] == code, body
        return body

    # -- default labels ------------------------------------------------------------------------

    def defaults_may_come(self) -> bool:
        """Whether a prediction was made with a deadline for its default (whether it got its
        default by now or not, which hangs on time)."""
        return any(p.deadline_ms is not None for p in self.pending.values())

    def awaiting(self, name: str | None = None) -> list[Pending]:
        """The predictions (of ``name``, else of every model) whose default is still to come,
        in the order the sweep takes them: by deadline, then by pending key."""
        waiting = [
            p
            for p in self.pending.values()
            if p.deadline_ms is not None
            and p.answer is None
            and (name is None or p.name == name)
            and p.name in self.models
            and self.models[p.name].ours(p.generation)
        ]
        return sorted(waiting, key=lambda p: (p.deadline_ms or 0, p.key))

    def overdue(self) -> bool:
        """Whether a default is due that the reference has not applied yet."""
        now_ms = time.time() * 1000
        return any((p.deadline_ms or 0) <= now_ms + 20 for p in self.awaiting())

    def on_time(self) -> None:
        """Go on only while no default is due that the reference has not applied: else the
        sequence is discarded (assume; from another thread, ``joined`` does it)."""
        if self.overdue():
            if threading.current_thread() is threading.main_thread():
                assume(False)
            raise Raced

    def settle_defaults(self) -> None:
        """Wait out every default due within HORIZON_S; once the service has applied them
        (its count of defaulted labels says so), the reference applies them, in its order."""
        while True:
            horizon_ms = (time.time() + HORIZON_S) * 1000
            due = [p for p in self.awaiting() if (p.deadline_ms or 0) <= horizon_ms]
            last = max((p.deadline_ms or 0 for p in due), default=0) / 1000
            if not due:
                return
            time.sleep(max(0.0, last - time.time()) + 0.05)
            for name in sorted({p.name for p in due}):
                ref, mine = self.models[name], [p for p in due if p.name == name]
                expected = ref.counters["defaulted"] + len(mine)
                deadline = time.monotonic() + 15
                while self.http.get(f"/models/{name}").json()["counters"]["defaulted"] < expected:
                    assert time.monotonic() < deadline, (name, "the defaults never came")
                    time.sleep(0.05)
                for p in mine:  # (each due a while ago: the sweep took them, in this order)
                    self.default_applied(ref, p)

    # (This rule, late_label and label_from_before are enabled by preconditions that do not
    # hang on time, and check in their bodies whether they apply: which predictions await a
    # default, or got one, hangs on the time the steps took, so the same steps may find it
    # otherwise, and hypothesis refuses a precondition that flips.)
    @precondition(lambda self: self.defaults_may_come())
    @rule(pick=st.integers(0, 7))
    def time_passes(self, pick: int) -> None:
        """Time passes until one of the predictions awaiting their default is due (a sequence
        lasts less than a wait otherwise): it, and those due before or soon after it, get
        their default (the next check settles them); the others still wait."""
        waiting = self.awaiting()
        if not waiting:
            return
        due = (waiting[pick % len(waiting)].deadline_ms or 0) / 1000
        time.sleep(max(0.0, due - time.time()) + 0.01)

    @precondition(
        lambda self: any(r.config.default_label is not None for r in self.models.values())
    )
    @rule(
        target=predictions,
        pick=st.integers(0, 1),
        xs=st.lists(st.lists(values, min_size=2, max_size=2), min_size=1, max_size=4),
        labelled=st.integers(0, 4),
        choice=st.integers(0, 3),
        who=st.sampled_from(TRAINERS),
    )
    def some_labels_never_come(
        self, pick: int, xs: list[list[float]], labelled: int, choice: int, who: str
    ) -> MultipleResults[str]:
        """Predictions of a model with a default label, some labelled at once, the others
        left to their wait: each of those gets the default, once, in deadline order (the
        service's counters, weights and kept updates checked against the reference's)."""
        names = sorted(n for n, r in self.models.items() if r.config.default_label is not None)
        name = names[pick % len(names)]
        pids = list(self.predict_batch(name, xs).values)
        if labelled:
            self.feedback_batch(pids[:labelled], choice, who)
        last = max(self.pending[pid].deadline_ms or 0 for pid in pids) / 1000
        time.sleep(max(0.0, last - time.time()) + 0.01)
        self.settle_defaults()
        return multiple(*pids)

    @precondition(lambda self: self.defaults_may_come())
    @rule(
        pick=st.integers(0, 40),
        choice=st.integers(0, 3),
        same=st.booleans(),
        batched=st.booleans(),
        who=st.sampled_from(TRAINERS),
    )
    def late_label(self, pick: int, choice: int, same: bool, batched: bool, who: str) -> None:
        """A label for a prediction its default labelled: a duplicate when it is the default
        (``same``), else 409, each told "labelled_by": "default" (404 once its model moved
        on)."""
        late = [pid for pid, p in self.pending.items() if p.by_default]
        if not late:
            return
        pid = late[pick % len(late)]
        ref = self.models.get(pid.split(":")[0])
        if same and ref is not None and ref.config.default_index is not None:
            choice = ref.config.default_index
        if batched:
            self.feedback_batch([pid], choice, who)
        else:
            self.feedback(pid, choice, who)

    def default_applied(self, ref: Ref, p: Pending) -> None:
        t = ref.config.default_index
        assert t is not None
        mistake, updated = ref.labelled(
            p.x, p.raw, p.served, t, protocol.DEFAULT_SOURCE, p.decided[t]
        )
        answer = {"mistake": mistake, "updated": updated, "version": ref.version}
        p.answer, p.by_default = (t, {**answer, "duplicate": False}), True

    # -- models --------------------------------------------------------------------------------

    @initialize(configs=st.tuples(*(st.sampled_from(range(len(CONFIGS))) for _ in NAMES)))
    def both_made(self, configs: tuple[int, ...]) -> None:
        """Every sequence starts with both models made (a delete, then, makes one go)."""
        for name, config in zip(NAMES, configs, strict=True):
            self.create(name, config)

    @rule(name=st.sampled_from(NAMES), config=st.sampled_from(range(len(CONFIGS))))
    def create(self, name: str, config: int) -> None:
        params = CONFIGS[config]
        r = self.call("PUT", f"/models/{name}", params)
        ref = self.models.get(name)
        if ref is None:
            self.expect(r, 201)
            self.models[name] = Ref.made(params, next(self.generations))
        elif ref.config == ModelConfig.from_dict(params):
            self.expect(r, 200)
        else:
            self.expect(r, 409, "model_exists")

    @rule(name=st.sampled_from(NAMES))
    def delete(self, name: str) -> None:
        r = self.call("DELETE", f"/models/{name}")
        if self.models.pop(name, None) is None:
            self.expect(r, 404, "model_not_found")
        else:
            self.expect(r, 204)
            for p in self.pending.values():
                p.purged = p.purged or p.name == name

    @rule(name=st.sampled_from(NAMES))
    def reset(self, name: str) -> None:
        """Zero weights and counters; the model as it was kept first as a checkpoint."""
        r = self.call("POST", f"/models/{name}/reset")
        ref = self.models.get(name)
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return
        if ref.challengers:
            self.expect(r, 409, "model_has_challengers")
            return
        self.expect(r, 200)
        zeros = Weights.zeros(ref.config)
        ref.replaced(zeros, dict.fromkeys(COUNTERS, 0), {}, next(self.generations), RESET, [])

    @rule(source=st.sampled_from(NAMES), into=st.sampled_from(NAMES), carry=st.booleans())
    def export_then_import(self, source: str, into: str, carry: bool) -> None:
        """An export imported as it is, into its own name or another: an exact copy, and the
        target's pending predictions lapse; over a model of another configuration, 409. With
        its checkpoints, they become the target's too, under the next ids."""
        r = self.call("GET", f"/models/{source}/export", params={"checkpoints": carry})
        ref = self.models.get(source)
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return
        doc = self.expect(r, 200)
        own = [i for i in sorted(ref.checkpoints) if ref.checkpoints[i].config == ref.config]
        assert len(doc.get("checkpoints") or []) == (len(own) if carry else 0)
        imported = self.call("POST", f"/models/{into}/import", doc)
        there = self.models.get(into)
        if there is not None and there.config != ref.config:
            self.expect(imported, 409, "model_exists")  # delete it first
            return
        if there is not None and there.challengers:
            self.expect(imported, 409, "model_has_challengers")
            return
        self.expect(imported, 200)
        carried = [ref.checkpoints[i] for i in own] if carry else []
        what = (ref.weights, ref.counters, ref.sources, next(self.generations))
        drift = (ref.drift_state, ref.drift_events)  # (the detector's, carried)
        background = list(ref.background)
        if there is None:
            there = self.models[into] = Ref(ref.config, learner(ref.config), 0)
            there.made_from(*what, carried, drift)
        else:
            there.replaced(*what, IMPORT, carried, drift)
        there.background = background

    @rule(
        name=st.sampled_from(NAMES),
        edit=st.sampled_from(
            [
                ("version", protocol.MAX_COUNT + 1),
                ("seen", protocol.MAX_COUNT + 1),
                ("seen", 2**53 - 1),
                ("weights", 1e251),
                ("weights", float("nan")),
                ("counters", -1),
                ("counters", protocol.MAX_COUNT + 1),
                ("mistakes", None),
            ]
        ),
    )
    def tampered_import(self, name: str, edit: tuple[str, float | None]) -> None:
        """An export edited past a limit is refused whole: nothing changes."""
        r = self.call("GET", f"/models/{name}/export")
        if name not in self.models:
            self.expect(r, 404, "model_not_found")
            return
        doc = self.expect(r, 200)
        what, value = edit
        if what in ("version", "seen"):
            doc[what] = value
        elif what == "weights":
            data = np.full(len(base64.b64decode(doc["weights"])) // 8, value).tobytes()
            doc["weights"] = base64.b64encode(data).decode()
            doc["sha256"] = hashlib.sha256(data).hexdigest()
        elif what == "counters":
            doc["counters"] = {**doc["counters"], "predictions": value}
        else:  # more mistakes than labelled examples
            doc["counters"] = {**doc["counters"], "mistakes": doc["seen"] + 1}
        self.expect(self.call("POST", f"/models/{name}/import", doc), 422, "invalid_import")

    # -- challengers -----------------------------------------------------------------------

    @rule(
        name=st.sampled_from(NAMES),
        id=st.sampled_from(CHALLENGER_IDS),
        pick=st.sampled_from(range(len(CHALLENGERS))),
        served=st.booleans(),
    )
    def add_challenger(self, name: str, id: str, pick: int, served: bool) -> None:
        """A challenger from zeros or from the served weights as they are: it learns every
        label from here on, counted by progressive validation."""
        body = {**CHALLENGERS[pick], **({"from": "served"} if served else {})}
        r = self.call("PUT", f"/models/{name}/challengers/{id}", body)
        ref = self.models.get(name)
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return
        try:  # (a body refused is refused first, whatever the id)
            config = challenger_config(ref.config, CHALLENGERS[pick])
        except ConfigError:
            self.expect(r, 422, "invalid_config")
            return
        if served and not ref.config.binary and config.multiclass != ref.config.multiclass:
            self.expect(r, 422, "invalid_challenger")
            return
        if id in ref.challengers:
            self.expect(r, 409, "challenger_exists")
            return
        got = self.expect(r, 201)
        state = start_state(config, ref.weights if served else None)
        if not ref.challengers:  # (the labels are counted from the model's own count then)
            ref.labels = ref.counters["seen"]
        state.position = ref.labels
        ref.challengers[id] = state
        assert (got["since"], got["seen"]) == (state.position, 0), got

    @rule(name=st.sampled_from(NAMES), id=st.sampled_from(CHALLENGER_IDS))
    def delete_challenger(self, name: str, id: str) -> None:
        r = self.call("DELETE", f"/models/{name}/challengers/{id}")
        ref = self.models.get(name)
        if ref is None:
            self.expect(r, 404, "model_not_found")
        elif ref.challengers.pop(id, None) is None:
            self.expect(r, 404, "challenger_not_found")
        else:
            self.expect(r, 204)

    @rule(
        name=st.sampled_from(NAMES),
        id=st.sampled_from(CHALLENGER_IDS),
        demote=st.sampled_from(("", *CHALLENGER_IDS)),
    )
    def promote(self, name: str, id: str, demote: str) -> None:
        self.promoted(name, id, demote)

    @rule(
        name=st.sampled_from(NAMES),
        pick=st.integers(0, 15),
        demote=st.sampled_from(("", "c1", "c2", "was")),
        x=st.none() | st.lists(values, min_size=2, max_size=2),
        choice=st.integers(0, 3),
    )
    def promote_one(
        self, name: str, pick: int, demote: str, x: list[float] | None, choice: int
    ) -> None:
        """One of the model's challengers is promoted (or refused): one added first when it
        has none; with ``x``, around a prediction made just before and labelled just after."""
        ref = self.models.get(name)
        if ref is None:
            return
        if not ref.challengers:
            self.add_challenger(name, CHALLENGER_IDS[pick % 2], pick % len(CHALLENGERS), False)
        there = sorted(ref.challengers)
        if not there:
            return
        pid = None if x is None else self.predict(name, x)
        self.promoted(name, there[pick % len(there)], demote)
        if pid is not None:
            self.feedback(pid, choice, TRAINERS[0])

    def from_before(self, answered: bool = False) -> list[str]:
        """The predictions made before their model's last promotion, not labelled yet (with
        ``answered``, labelled or not)."""
        return [
            pid
            for pid, p in self.pending.items()
            if (answered or p.answer is None) and p.name in self.models
            and p.generation in self.models[p.name].previous
        ]  # fmt: skip

    @precondition(lambda self: bool(self.from_before(answered=True)))
    @rule(pick=st.integers(0, 15), choice=st.integers(0, 3), who=st.sampled_from(TRAINERS))
    def label_from_before(self, pick: int, choice: int, who: str) -> None:
        """A label for a prediction the learner that served before made: the promoted learner
        learns it from the scores it was served with, as that learner decided (it checks in
        its body whether one is left, as ``time_passes``)."""
        before = self.from_before()
        if not before:
            return
        self.feedback(before[pick % len(before)], choice, who)

    def promoted(self, name: str, id: str, demote: str) -> None:
        """A challenger serves, its weights and counts exactly as they are; the learner that
        served becomes a challenger; the predictions made before stay labelable."""
        body = {"challenger": id, **({"demote_as": demote} if demote else {})}
        r = self.call("POST", f"/models/{name}/promote", body)
        ref = self.models.get(name)
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return
        state = ref.challengers.get(id)
        if state is None:
            self.expect(r, 404, "challenger_not_found")
            return
        if ref.config.n_classes > 2 and state.config.multiclass != ref.config.multiclass:
            self.expect(r, 409, "promotion_layout")
            return
        demoted = demote or f"served-{ref.last_id + 1}"
        for k in itertools.count(2):  # (a name of its own: the first one free)
            if demote or demoted == id or demoted not in ref.challengers:
                break
            demoted = f"served-{ref.last_id + 1}-{k}"
        if demoted != id and demoted in ref.challengers:
            self.expect(r, 409, "challenger_exists")
            return
        got = self.expect(r, 200)
        PROMOTIONS[0] += 1
        before = ref.checkpoint(Reason.BEFORE_PROMOTION, ref.weights, ref.version)
        assert (got["promoted"], got["demoted"], got["checkpoint"]) == (id, demoted, before)
        c = ref.counters
        was = ChallengerState(
            ref.config, ref.weights.copy(), ref.labels, c["mistakes"], bytes(ref.marks),
            c["defaulted"], c["defaulted_mistakes"], since=c["seen"],
            served_mistakes=c["mistakes"],
            drift_state=ref.drift_state, drift_warnings=c["drift_warnings"], drifts=c["drifts"],
            drift_events=[(at, cast(Status, kind)) for at, kind, _ in ref.drift_events],
            offset=ref.offset,
        )  # fmt: skip
        # (each detector moves with its learner; the model's drift counters only grow; a
        # retraining's background learner starts afresh)
        ref.drift_state = state.drift_state
        ref.drift_events = [(at, kind, None) for at, kind in state.drift_events]
        ref.background = []
        del ref.challengers[id]
        ref.challengers[demoted] = was
        for s in ref.challengers.values():
            s.position = ref.labels
        weights = state.weights.copy()
        ref.config, ref.learner = state.config, learner(state.config)
        c.update(seen=state.seen, mistakes=state.mistakes, defaulted=state.defaulted,
                 defaulted_mistakes=state.defaulted_mistakes)  # fmt: skip
        ref.offset = state.offset
        ref.marks = bytearray(state.window)
        ref.restart(weights)
        ref.previous.add(ref.generation)
        ref.generation = next(self.generations)
        ref.prune()

    def drift_holds(self, name: str, ref: Ref) -> None:
        """The model's drift detector: each warning and drift at the example the reference's
        found it, and the state it is in now."""
        got = self.expect(self.call("GET", f"/models/{name}/drift"), 200)
        if ref.config.drift is None:
            assert got == {"drift": None, "learners": [], "events": []}
            return
        events = [("served", at, kind, before) for at, kind, before in ref.drift_events]
        detector, _ = detector_of(ref.config.drift)
        state = detector.start() if ref.drift_state is None else ref.drift_state
        learners: list[dict[str, Any]] = [
            {"learner": "served", "state": status_of(detector, state), "seen": ref.counters["seen"]}
        ]
        for id, c in sorted(ref.challengers.items()):  # (each its own, on its own mistakes)
            learners.append({"learner": id, "state": c.drift_status(), "seen": c.seen})
            events += [(id, at, kind, None) for at, kind in c.drift_events]
            DRIFT_EVENTS.update(kind for _, kind in c.drift_events)
        listed = [(e["learner"], e["at_seen"], e["kind"], e["version"]) for e in got["events"]]
        assert listed == events, name
        assert got["learners"] == learners, name

    def served_weights_hold(self, name: str, ref: Ref) -> None:
        """What an averaged model predicts from, its mean weights and biases, bit for bit (a
        rollback restores its count of labelled examples with its sums)."""
        if not ref.config.averaged:
            return
        got = self.expect(self.call("GET", f"/models/{name}/weights"), 200)
        w, b = ref.weights.averaged()
        rows = got["averaged"] if got["averaged"] is not None else got["rows"]
        for i, row in enumerate(rows):
            nz = np.flatnonzero(w[i])
            want = (
                w[i].tolist()
                if ref.config.dense
                else dict(zip(map(str, nz.tolist()), w[i][nz].tolist(), strict=True))
            )
            assert (row["weights"], row["bias"]) == (want, float(b[i])), (name, i, row)

    def challengers_hold(self, name: str, ref: Ref) -> None:
        """Each challenger's figures and weights, bit for bit, beside the served counters."""
        got = self.expect(self.call("GET", f"/models/{name}/challengers?weights=true"), 200)
        assert got["served"]["seen"] == ref.counters["seen"], got
        assert got["labels"] == (ref.labels if ref.challengers else ref.counters["seen"]), got
        assert [c["id"] for c in got["challengers"]] == sorted(ref.challengers)
        for c in got["challengers"]:
            want = ref.challengers[c["id"]]
            assert (c["seen"], c["mistakes"], c["updates"], c["served_mistakes"]) == (
                want.seen, want.mistakes, want.updates, want.served_mistakes,
            ), (name, c)  # fmt: skip
            assert c["mistake_rate"] == want.rates(), (name, c)
            assert c["weights"] == {"w": want.weights.w.tolist(), "b": want.weights.b.tolist()}
            assert c["config"] == want.config.to_dict(), (name, c)
            same_layout = ref.config.binary or want.config.multiclass == ref.config.multiclass
            assert c["promotable"] is same_layout, (name, c)
            # (the same challenger: its figures are the list's, checked above, but for a
            # default label that may come due between the two reads)
            one = self.expect(self.call("GET", f"/models/{name}/challengers/{c['id']}"), 200)
            assert "weights" not in one and one["since"] == c["since"], (one, c)
            assert (one["id"], one["config"], one["promotable"]) == (
                c["id"],
                c["config"],
                c["promotable"],
            )
        for id in set(CHALLENGER_IDS) - set(ref.challengers):
            self.expect(
                self.call("GET", f"/models/{name}/challengers/{id}"), 404, "challenger_not_found"
            )

    # -- history -------------------------------------------------------------------------

    def rolled_back_to_version(self, name: str, pick: int) -> None:
        """A version from restorable_from to the model's own, or one just outside: restored
        exactly (the versions after it are no longer kept), or 409."""
        ref = self.models.get(name)
        if ref is None:
            r = self.call("POST", f"/models/{name}/rollback", {"version": pick})
            self.expect(r, 404, "model_not_found")
            return
        versions = range(max(0, ref.start - 1), ref.version + 2)
        v = versions[pick % len(versions)]
        r = self.call("POST", f"/models/{name}/rollback", {"version": v})
        if not ref.start <= v <= ref.version:
            self.expect(r, 409, "version_not_kept")
            return
        if ref.challengers:
            self.expect(r, 409, "model_has_challengers")
            return
        got = self.expect(r, 200)
        before = ref.rollback_to_version(v)
        ref.generation, ref.previous = next(self.generations), set()
        assert (got["version"], got["restored_checkpoint"]) == (v, None), got
        assert got["undo_checkpoint"] == got["before"] == before, (got, before)

    @rule(name=st.sampled_from(NAMES), pick=st.integers(0, 40))
    def rollback_to_version(self, name: str, pick: int) -> None:
        self.rolled_back_to_version(name, pick)

    @rule(name=st.sampled_from(NAMES), pick=st.integers(0, 12))
    def rollback_to_checkpoint(self, name: str, pick: int) -> None:
        """One of the checkpoints listed (or one not kept, 404): its weights exactly, its
        version, and the kept updates start again from it."""
        ref = self.models.get(name)
        listed = self.checkpoints_listed(name)
        unknown = (ref.last_id if ref else 0) + 1  # (pick 0: one not made yet)
        id = listed[pick % len(listed)] if pick and listed else unknown
        r = self.call("POST", f"/models/{name}/rollback", {"checkpoint": id})
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return
        if id not in ref.checkpoints:
            self.expect(r, 404, "checkpoint_not_found")
            return
        if ref.challengers:
            self.expect(r, 409, "model_has_challengers")
            return
        got = self.expect(r, 200)
        version = ref.checkpoints[id].version
        before = ref.rollback_to_checkpoint(id)
        ref.generation, ref.previous = next(self.generations), set()
        assert (got["version"], got["restored_checkpoint"]) == (version, id), got
        assert got["undo_checkpoint"] == got["before"] == before, (got, before)

    def checkpoints_listed(self, name: str) -> list[int]:
        """GET /models/{name}/checkpoints, checked against the reference: the ids kept."""
        r = self.call("GET", f"/models/{name}/checkpoints")
        ref = self.models.get(name)
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return []
        got = self.expect(r, 200)
        assert (got["version"], got["restorable_from"]) == (ref.version, ref.start), got
        listed = {c["id"]: (c["version"], c["reason"], c["seen"]) for c in got["checkpoints"]}
        expected = {i: (c.version, c.reason, c.seen) for i, c in ref.checkpoints.items()}
        assert listed == expected, (name, listed, expected)
        for c in got["checkpoints"]:
            ref.checkpoints[c["id"]].ms = round(1000 * c["time"])
        return sorted(listed)

    def updates_listed(self, name: str, first: int | None, limit: int) -> None:
        """GET /models/{name}/updates, checked against the reference: which versions, whose,
        of which label; the reference learns when each was made."""
        query = {"limit": limit, **({} if first is None else {"from_version": first})}
        r = self.call("GET", f"/models/{name}/updates", params=query)
        ref = self.models.get(name)
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return
        got = self.expect(r, 200)
        assert (got["version"], got["restorable_from"]) == (ref.version, ref.start), got
        lo = max(ref.start + 1, ref.version - limit + 1 if first is None else first)
        listed = got["updates"]
        assert [u["version"] for u in listed] == list(
            range(lo, min(ref.version, lo + limit - 1) + 1)
        )
        for u in listed:
            mine = ref.kept[u["version"] - ref.start - 1]
            assert (u["source"], u["label"]) == (mine.source, ref.config.classes[mine.t]), u
            ms = round(1000 * u["time"])
            assert mine.ms in (None, ms), (u, mine.ms)
            mine.ms = ms
        assert got["sources"] == dict(Counter(u["source"] for u in listed)), got

    @rule(
        name=st.sampled_from(NAMES),
        first=st.none() | st.integers(1, 40),
        limit=st.sampled_from([1, 3, MAX_UPDATES_LISTED]),
    )
    def list_updates(self, name: str, first: int | None, limit: int) -> None:
        self.updates_listed(name, first, limit)

    @rule(
        name=st.sampled_from(NAMES),
        source=st.sampled_from([None, *TRAINERS, "nobody"]),
        bounds=st.sampled_from(["none", "from", "to", "both"]),
        at=st.tuples(st.integers(0, 40), st.integers(0, 40)),
    )
    def undo(self, name: str, source: str | None, bounds: str, at: tuple[int, int]) -> None:
        """Leave out one key's kept updates, or a time range's, or both: the model becomes its
        oldest kept weights with every other kept update replayed, exactly; the updates that
        stay are kept, renumbered."""
        self.updates_listed(name, None, MAX_UPDATES_LISTED)  # (when each was made)
        ref = self.models.get(name)
        # Times between those of the kept updates (a half millisecond before each, or after
        # the last), or any time at all when there are none.
        made = sorted({u.ms for u in ref.kept if u.ms is not None}) if ref else []
        cuts = [m - 0.5 for m in made] + [made[-1] + 0.5] if made else [1000.0]
        if source is None and bounds == "none":
            bounds = "from"
        if bounds == "both" and len(cuts) < 2:
            bounds = "to"
        start, stop = -math.inf, math.inf
        body: dict[str, Any] = {} if source is None else {"source": source}
        if bounds == "from":
            start = cuts[at[0] % len(cuts)]
        elif bounds == "to":
            stop = cuts[at[1] % len(cuts)]
        elif bounds == "both":
            pairs = list(itertools.combinations(cuts, 2))
            start, stop = pairs[(at[0] * 41 + at[1]) % len(pairs)]
        if start > -math.inf:
            body["from_time"] = start / 1000
        if stop < math.inf:
            body["to_time"] = stop / 1000
        r = self.call("POST", f"/models/{name}/undo", body)
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return
        if ref.challengers and any(
            (source is None or u.source == source) and start <= (u.ms or 0) < stop for u in ref.kept
        ):
            self.expect(r, 409, "model_has_challengers")
            return
        got = self.expect(r, 200)
        removed, before = ref.undo(source, start, stop)
        if removed:
            ref.generation, ref.previous = next(self.generations), set()
        expected = {"version": ref.version, "removed": removed, "undo_checkpoint": before}
        assert {k: got[k] for k in expected} == expected, (body, got, expected)
        assert got["before"] == before

    # -- predict and feedback ------------------------------------------------------------------

    def predicted(self, ref: Ref, name: str, features: Any, answer: dict[str, Any]) -> str:
        cfg, w = ref.config, ref.weights
        encoded = encode(cfg, features)
        served = predict_index(cfg, cfg.learner.served_scores(cfg, w, encoded))
        assert answer["label"] == cfg.classes[served], (answer, served)
        assert answer["version"] == ref.version
        ref.counters["predictions"] += 1
        pid: str = answer["prediction_id"]
        raw = cfg.learner.raw_scores(cfg, w, encoded).copy()
        decided = cfg.learner.updates_by_label(cfg, w, raw, encoded)
        p = self.pending[pid] = Pending(name, ref.generation, encoded, raw, served, decided)
        if cfg.default_label is not None:
            token = pid.split(":", 1)[1]
            p.deadline_ms = (issued_ms(token) or 0) + 1000 * cfg.feedback_ttl_s
            p.key = keys_of(name).pending(token)
        return pid

    @rule(
        target=predictions, name=st.sampled_from(NAMES), x=st.lists(values, min_size=2, max_size=2)
    )
    def predict(self, name: str, x: list[float]) -> str:
        ref = self.models.get(name)
        features = ref.features(x) if ref else x
        r = self.call("POST", "/predict", {"model": name, "features": features})
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return f"{name}:{'0' * 22}"  # an id of no prediction
        return self.predicted(ref, name, features, self.expect(r, 200))

    @rule(
        target=predictions,
        name=st.sampled_from(NAMES),
        xs=st.lists(st.lists(values, min_size=2, max_size=2), min_size=1, max_size=3),
    )
    def predict_batch(self, name: str, xs: list[list[float]]) -> MultipleResults[str]:
        ref = self.models.get(name)
        features = [ref.features(x) if ref else x for x in xs]
        r = self.call("POST", "/predict/batch", {"model": name, "features": features})
        if ref is None:
            self.expect(r, 404, "model_not_found")
            return multiple()
        got = self.expect(r, 200)
        assert got["version"] == ref.version
        return multiple(
            *(
                self.predicted(ref, name, f, answer)
                for f, answer in zip(features, got["predictions"], strict=True)
            )
        )

    def expected_feedback(
        self, pid: str, label: Any, who: str
    ) -> tuple[int, str | None, dict[str, Any]]:
        """What the service must answer to a label for ``pid``, and the reference's change."""
        p = self.pending.get(pid)
        name = pid.split(":")[0]
        ref = self.models.get(name)
        if ref is None:
            return 404, "prediction_not_found", {}
        if p is None or not ref.ours(p.generation):
            # A record a delete purged: its id tells its time, past the wait of the model of
            # that name now, 410 (counted as expired); else unknown, 404.
            issued = issued_ms(pid.split(":", 1)[1])
            if p is not None and p.purged and issued is not None:
                late_ms = time.time() * 1000 - issued - 1000 * ref.config.feedback_ttl_s
                assume(abs(late_ms) > 250)  # (at the edge, the service's clock decides)
                if late_ms > 0:
                    ref.counters["expired"] += 1
                    return 410, "prediction_expired", {}
            ref.counters["unknown_feedback"] += 1
            return 404, "prediction_not_found", {}
        t = ref.config.class_index(label)
        if t is None:
            return 422, "unknown_label", {}
        if p.answer is not None:  # a second label: told when the first came by default
            given, first = p.answer
            by = {"labelled_by": "default"} if p.by_default else {}
            if given != t:
                ref.counters["conflicts"] += 1
                return 409, "feedback_conflict", by
            ref.counters["duplicates"] += 1
            return 200, None, {**first, "duplicate": True, **by}
        PROMOTIONS[1] += p.generation in ref.previous
        mistake, updated = ref.labelled(p.x, p.raw, p.served, t, who, p.decided[t])
        ref.counters["feedback"] += 1
        ref.delays += 1
        answer = {"mistake": mistake, "updated": updated, "version": ref.version}
        answer["duplicate"] = False
        p.answer = (t, answer)
        return 200, None, answer

    def a_label(self, pid: str, choice: int) -> Any:
        """A label for the prediction: one of its model's classes, or none of them."""
        ref = self.models.get(pid.split(":")[0])
        classes = list(ref.config.classes) if ref else [-1, 1]
        return [*classes, "not-a-class"][choice % (len(classes) + 1)]

    @rule(pid=predictions, choice=st.integers(0, 3), who=st.sampled_from(TRAINERS))
    def feedback(self, pid: str, choice: int, who: str) -> None:
        label = self.a_label(pid, choice)
        body = {"prediction_id": pid, "label": label}
        r = self.call("POST", "/feedback", body, headers=as_key(who))
        status, code, answer = self.expected_feedback(pid, label, who)
        got = self.expect(r, status, code)
        if status == 200:
            assert got == answer, (got, answer)
        elif status == 409:
            assert got.get("labelled_by") == answer.get("labelled_by"), (got, answer)

    @rule(
        name=st.sampled_from(NAMES),
        when=st.sampled_from(["long past", "past its wait", "within its wait", "future", "last"]),
        batched=st.booleans(),
    )
    def feedback_for_an_id_never_issued(self, name: str, when: str, batched: bool) -> None:
        """An id that tells a time but whose record never was: 410 once that time and the
        model's wait are past (counted as expired), else 404 (unknown); times at both ends of
        what a token holds."""
        ref = self.models.get(name)
        now_ms = int(time.time() * 1000)
        ttl_ms = 1000 * (ref.config.feedback_ttl_s if ref else 86_400)
        issued = {
            "long past": 0,
            "past its wait": now_ms - ttl_ms - 60_000,
            "within its wait": now_ms - 60_000,
            "future": now_ms + 86_400_000,
            "last": 2 ** (8 * ISSUED_BYTES) - 1,
        }[when]
        pid = f"{name}:{new_token(issued)}"
        label = ref.config.classes[0] if ref else 1
        late = ref is not None and issued + ttl_ms < now_ms - 5_000
        if ref is None:
            status, code = 404, "prediction_not_found"
        elif late:
            ref.counters["expired"] += 1
            status, code = 410, "prediction_expired"
        else:
            ref.counters["unknown_feedback"] += 1
            status, code = 404, "prediction_not_found"
        item = {"prediction_id": pid, "label": label}
        if batched:
            r = self.call("POST", "/feedback/batch", {"feedback": [item]}, headers=as_key("alice"))
            (result,) = self.expect(r, 200)["results"]
            assert result["error"]["code"] == code, (item, result)
        else:
            self.expect(self.call("POST", "/feedback", item, headers=as_key("alice")), status, code)

    @rule(
        pids=st.lists(predictions, min_size=1, max_size=4),
        choice=st.integers(0, 3),
        who=st.sampled_from(TRAINERS),
    )
    def feedback_batch(self, pids: list[str], choice: int, who: str) -> None:
        items = [
            {"prediction_id": p, "label": self.a_label(p, choice + i)} for i, p in enumerate(pids)
        ]
        r = self.call("POST", "/feedback/batch", {"feedback": items}, headers=as_key(who))
        results = self.expect(r, 200)["results"]
        for item, result in zip(items, results, strict=True):
            status, code, answer = self.expected_feedback(item["prediction_id"], item["label"], who)
            by = answer.get("labelled_by")
            if status == 200:
                assert result["error"] is None and {k: result[k] for k in answer} == answer
                assert result.get("labelled_by") == by, (item, result)
            else:
                assert result["error"]["code"] == code, (item, result)
                assert result["error"].get("labelled_by") == by, (item, result)

    # -- learn -------------------------------------------------------------------------------

    def learned(
        self, name: str, xs: list[list[float]], choices: list[int], packed: bool, who: str
    ) -> None:
        """/learn/batch; one example alone by /learn when not ``packed``."""
        ref = self.models.get(name)
        if ref is None:
            gone = {"model": name, "features": xs, "labels": [1] * len(xs)}
            self.expect(self.call("POST", "/learn/batch", gone), 404, "model_not_found")
            return
        classes = ref.config.classes
        labels = [classes[c % len(classes)] for c in choices]
        single = len(xs) == 1 and not packed
        body: dict[str, Any] = {"model": name}
        if single:
            body |= {"features": ref.features(xs[0]), "label": labels[0]}
        elif packed and ref.config.dense:
            body["packed_features"] = base64.b64encode(np.array(xs, "<f8").tobytes()).decode()
        else:
            body["features"] = [ref.features(x) for x in xs]
        body |= {} if single else {"labels": labels}
        path = "/learn" if single else "/learn/batch"
        got = self.expect(self.call("POST", path, body, headers=as_key(who)), 200)
        outcomes = [
            ref.learn(ref.features(x), c % len(classes), who)
            for x, c in zip(xs, choices, strict=True)
        ]
        ref.counters["learned"] += len(xs)
        if single:  # (/learn's answer, as a batch of one's)
            got = {**got, "mistakes": [got["mistake"]], "updated": [got["updated"]]}
        assert got["mistakes"] == [m for m, _ in outcomes]
        assert got["updated"] == [u for _, u in outcomes]
        assert got["version"] == ref.version

    @rule(
        name=st.sampled_from(NAMES),
        xs=st.lists(st.lists(values, min_size=2, max_size=2), min_size=1, max_size=6),
        choices=st.lists(st.integers(0, 2), min_size=6, max_size=6),
        packed=st.booleans(),
        who=st.sampled_from(TRAINERS),
    )
    def learn(
        self, name: str, xs: list[list[float]], choices: list[int], packed: bool, who: str
    ) -> None:
        self.learned(name, xs, choices[: len(xs)], packed, who)

    @rule(
        name=st.sampled_from(NAMES),
        x=st.lists(values, min_size=2, max_size=2),
        choice=st.integers(0, 2),
        who=st.sampled_from(TRAINERS),
    )
    def a_concept_that_turns(self, name: str, x: list[float], choice: int, who: str) -> None:
        """One example learned as one class twelve times, then as another twelve times, in
        one batch: its learners' mistakes rise at the turn, which their detectors see."""
        self.learned(name, [x] * 24, [choice] * 12 + [choice + 1] * 12, False, who)

    @rule(
        x=st.lists(values, min_size=2, max_size=2),
        y=st.lists(values, min_size=2, max_size=2),
        choice=st.integers(0, 2),
    )
    def learn_on_both_at_once(self, x: list[float], y: list[float], choice: int) -> None:
        """Two operations at once, on two workers: each model's own learn (one key each),
        independent."""
        with ThreadPoolExecutor(2) as pool:
            jobs = [
                pool.submit(self.learned, n, [v], [choice], False, who)
                for n, v, who in zip(NAMES, (x, y), TRAINERS, strict=True)
            ]
            joined(jobs)

    @rule(
        x=st.lists(values, min_size=2, max_size=2),
        choice=st.integers(0, 2),
        pick=st.integers(0, 40),
        undo=st.booleans(),
    )
    def history_while_the_other_learns(
        self, x: list[float], choice: int, pick: int, undo: bool
    ) -> None:
        """A rollback (or an undo of a key's updates) of one model while the other learns, at
        once, on two workers."""
        with ThreadPoolExecutor(2) as pool:
            if undo:
                first = pool.submit(self.undo, NAMES[0], TRAINERS[pick % 2], "none", (0, 0))
            else:
                first = pool.submit(self.rolled_back_to_version, NAMES[0], pick)
            other = pool.submit(self.learned, NAMES[1], [x], [choice], False, TRAINERS[1])
            joined([first, other])

    # -- after every step ------------------------------------------------------------------

    @invariant()
    def the_service_holds_what_the_reference_holds(self) -> None:
        self.settle_defaults()
        listed = sorted(m["name"] for m in self.call("GET", "/models").json()["models"])
        assert listed == sorted(self.models)
        for name, ref in self.models.items():
            doc = self.expect(self.call("GET", f"/models/{name}/export"), 200)
            assert base64.b64decode(doc["weights"]) == pack_weights(ref.weights), name
            assert (doc["version"], doc["seen"]) == (ref.version, ref.own_seen)
            counters = self.expect(self.call("GET", f"/models/{name}"), 200)["counters"]
            assert counters == ref.counters, (name, counters, ref.counters)
            metrics = self.expect(self.call("GET", f"/models/{name}/metrics"), 200)
            sources = {
                s["source"]: [s["labelled"], s["mistakes"], s["updates"]]
                for s in metrics["sources"]
            }
            assert sources == ref.sources, (name, sources, ref.sources)
            labels = metrics["labels"]
            waiting = len(self.awaiting(name))
            assert (labels["awaiting_default"], labels["counted"]) == (waiting, ref.delays), (
                name,
                labels,
                waiting,
                ref.delays,
            )
            self.checkpoints_listed(name)
            self.drift_holds(name, ref)
            self.served_weights_hold(name, ref)
            self.challengers_hold(name, ref)


class Raced(Exception):
    """A request made in a thread while a default was due that the reference had not applied."""


def joined(jobs: list[Future[None]]) -> None:
    """Each job's end; the sequence discarded when one raced a default (``Service.on_time``)."""
    raced = False
    for job in jobs:
        try:
            job.result()
        except Raced:
            raced = True
    assume(not raced)


def as_key(who: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[who]}"}


@pytest.fixture(scope="module")
def service_url(redis_server: Any) -> Iterator[str]:
    entries = ",".join(f"{who}=train:{key}" for who, key in KEYS.items() if who != ADMIN)
    service = ServiceProcess(
        redis_server.url,
        workers=2,
        PERCEPTRON_DEFAULT_MODEL="false",
        PERCEPTRON_AUTH="true",
        PERCEPTRON_API_KEYS=f"{entries},{ADMIN}=admin:{KEYS[ADMIN]}",
    ).start()
    try:
        yield service.url
    finally:
        service.stop()


def test_random_sequences_of_what_users_do_match_the_reference(service_url: str) -> None:
    with httpx.Client(base_url=service_url, timeout=30, headers=as_key(ADMIN)) as http:

        class OnTheService(Service):
            def __init__(self) -> None:
                super().__init__(http)

        run_state_machine_as_test(
            OnTheService,
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    assert PA_UPDATES[0] > 0, "no passive-aggressive model learned in any sequence"
    assert DRIFT_EVENTS.total() > 0, "no drift detector warned or detected in any sequence"
    assert DRIFT_EVENTS["retrained"] > 0, "no model retrained at a drift in any sequence"
    assert PROMOTIONS[0] > 0, ("no challenger was promoted in any sequence", PROMOTIONS)
    assert PROMOTIONS[1] > 0, "no prediction made before a promotion was labelled after it"
