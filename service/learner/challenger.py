"""A challenger: a learner that learns every labelled example of a model beside the served one,
counted by progressive validation (its prediction on each example made with its weights as
they were just before it learns that example). Pure numpy, no I/O.

Its state is its configuration's weights, the labelled examples it has seen, its mistakes and
updates, the outcomes of its last ``WINDOW`` examples (``b"1"`` a mistake, ``b"0"`` not), and
its own drift detector (the model's configuration's ``drift``) fed its mistakes, packed by
``pack_state`` behind a header that says where in the model's stream of labels it stands
(``position``: the labels it has been given, counted from the model's first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from service.learner import registry
from service.learner.codec import pack_weights, unpack_weights
from service.learner.config import ModelConfig
from service.learner.drift_detectors import (
    EVENTS_KEPT,
    Status,
    read_state,
    state_text,
    status_of,
)
from service.learner.features import Example
from service.learner.kernel import Packed, drift_feed, learn_sequence
from service.learner.perceptron import Weights, predict_index

CURVE_POINTS = 100  # points kept in a learning curve (the model's too): half of it to all of it
WINDOW = 1000  # outcomes kept: the mistake rate over the last 100 and 1000 examples
# What a challenger may set: its learner, that learner's settings, and its strategy.
SETTINGS = ("algorithm", *registry.SETTINGS, "multiclass")


@dataclass
class ChallengerState:
    """One challenger as it stands after ``position`` labels of the model's stream."""

    config: ModelConfig
    weights: Weights
    position: int
    mistakes: int = 0
    window: bytes = b""  # the last outcomes, oldest first, at most WINDOW
    defaulted: int = 0  # examples whose label was the model's default label
    defaulted_mistakes: int = 0  # mistakes among them
    # Its learning curve: curve[i] = mistakes among its first since + every * (i + 1) examples,
    # at most CURVE_POINTS of them (``every`` doubles, as the model's own curve's does); ``since``:
    # the examples it had seen when its curve began (a learner that served, demoted).
    every: int = 1
    curve: list[int] = field(default_factory=list)
    since: int = 0
    # The served learner's mistakes on the examples this one has seen (each as it was served),
    # so that the two are compared over the same examples; None in a state packed before this
    # was counted.
    served_mistakes: int | None = 0
    # Its drift detector, when the model has one: its state (None: fresh), the warnings and
    # drifts it raised, and its last EVENTS_KEPT events (the examples it had seen, the kind).
    drift_state: list[float] | None = None
    drift_warnings: int = 0
    drifts: int = 0
    drift_events: list[tuple[int, Status]] = field(default_factory=list)

    # The labels counted that its learner's own count (which an averaged one's mean divides
    # by) leaves out: a learner demoted after its count was restored apart from the model's
    # (an averaged one's rollback, a retrain: Meta.SEEN_OFFSET)
    offset: int = 0

    @property
    def seen(self) -> int:
        """The labels it was counted (its own count, and those it leaves out)."""
        return self.weights.seen + self.offset

    @property
    def updates(self) -> int:
        """The labelled examples that changed its weights: their version."""
        return self.weights.version

    def learn(
        self, x: Example, t: int, by_default: bool = False, served: int | None = None
    ) -> None:
        """Predict ``x`` with the weights as they are, count the outcome, then learn class
        index ``t`` (the ``seen``-th example for the average), as a sequential learner does;
        ``by_default``: ``t`` is the model's default label; ``served``: the class index the
        model served for ``x``, counted against ``t`` in ``served_mistakes``."""
        cfg, w = self.config, self.weights
        scores = cfg.learner.served_scores(cfg, w, x)
        wrong = predict_index(cfg, scores) != t
        raw = cfg.learner.raw_scores(cfg, w, x) if cfg.counts_seen else scores
        plan = cfg.learner.update_plan(cfg, raw, t, x, w)
        w.seen += 1
        if plan:
            cfg.learner.apply(cfg, w, x, plan, w.seen)
        self.position += 1
        self.watch(np.array([wrong]), self.seen - 1)
        self.mistakes += int(wrong)
        if self.served_mistakes is not None and served is not None:
            self.served_mistakes += int(served != t)
        self.window = (self.window + (b"1" if wrong else b"0"))[-WINDOW:]
        if by_default:
            self.defaulted += 1
            self.defaulted_mistakes += int(wrong)
        if (self.seen - self.since) % self.every == 0:
            self.curve.append(self.mistakes)
            if len(self.curve) > CURVE_POINTS:
                self.every *= 2
                self.curve = self.curve[1::2]

    def learn_all(
        self,
        xs: list[Example] | Packed,
        ts: list[int],
        by_default: list[bool],
        served: list[int],
    ) -> None:
        """``learn`` each example in turn: through the compiled kernel where the learner has
        one (the same bits; ``learner/kernel.py``), else one at a time."""
        rule = self.config.learner.kernel(self.config) if len(xs) > 1 else None
        fit_bias = self.config.fit_bias
        got = None if rule is None else learn_sequence(rule, fit_bias, self.weights, xs=xs, ts=ts)
        if got is None:
            one_by_one = xs.examples() if isinstance(xs, Packed) else xs
            for x, t, d, s in zip(one_by_one, ts, by_default, served, strict=True):
                self.learn(x, t, d, s)
            return
        n, seen = len(xs), self.seen
        t_all = np.asarray(ts, dtype=np.int64)
        wrong = got.predicted != t_all
        self.watch(wrong, seen)
        self.weights.seen += n
        self.position += n
        counts = np.cumsum(wrong) + self.mistakes
        self.mistakes = int(counts[-1])
        if self.served_mistakes is not None:
            self.served_mistakes += int((np.asarray(served, dtype=np.int64) != t_all).sum())
        self.window = (self.window + np.where(wrong, 49, 48).astype(np.uint8).tobytes())[-WINDOW:]
        defaulted = np.asarray(by_default, dtype=np.bool_)
        self.defaulted += int(defaulted.sum())
        self.defaulted_mistakes += int((defaulted & wrong).sum())
        at = seen + self.every - (seen - self.since) % self.every  # the next point's count
        while at <= seen + n:
            self.curve.append(int(counts[at - seen - 1]))
            if len(self.curve) > CURVE_POINTS:
                self.every *= 2
                self.curve = self.curve[1::2]
            at += self.every - (at - self.since) % self.every

    def watch(self, wrong: np.ndarray, seen: int) -> None:
        """Its drift detector fed ``wrong`` (its outcomes, in order, after ``seen`` examples),
        its events counted and kept; nothing when the model has no detector."""
        detector = self.config.drift_detector
        if detector is None:
            return
        state = detector.start() if self.drift_state is None else self.drift_state
        self.drift_state, events = drift_feed(detector, state, wrong)
        for i, kind in events:
            self.drift_events.append((seen + i, kind))
            if kind == "warning":
                self.drift_warnings += 1
            else:
                self.drifts += 1
        del self.drift_events[:-EVENTS_KEPT]

    def drift_status(self) -> Status | None:
        """Its detector's state now (None: the model has no detector)."""
        detector = self.config.drift_detector
        if detector is None:
            return None
        return status_of(detector, self.drift_state or detector.start())

    def rates(self) -> dict[str, float | None]:
        """Mistake rates over every example seen and over the last 100 and 1000 (None: none
        seen yet)."""

        def rate(marks: bytes) -> float | None:
            return marks.count(b"1") / len(marks) if marks else None

        return {
            "all": self.mistakes / self.seen if self.seen else None,
            "last_100": rate(self.window[-100:]),
            "last_1000": rate(self.window[-WINDOW:]),
        }


def challenger_config(model: ModelConfig, settings: dict[str, object]) -> ModelConfig:
    """The configuration of a challenger of ``model`` with a learner's ``settings`` (those of
    ``SETTINGS`` it names): the model's classes and features, and each setting it leaves out
    the model's own (``multiclass`` always; a rule's settings where the challenger's rule uses
    them, else their defaults). Raises ConfigError for settings a configuration refuses.

    >>> served = ModelConfig(classes=("a", "b", "c"), multiclass="ovo", learning_rate=0.5)
    >>> c = challenger_config(served, {"averaged": True})
    >>> c.multiclass, c.learning_rate, c.averaged
    ('ovo', 0.5, True)
    >>> c = challenger_config(served, {"algorithm": "pa1"})
    >>> c.multiclass, c.learning_rate, c.C
    ('ovo', 1.0, 1.0)
    """
    data = model.to_dict() | {"algorithm": model.algorithm}
    algorithm = settings.get("algorithm", model.algorithm)
    learner = registry.LEARNERS.get(algorithm) if isinstance(algorithm, str) else None
    kept = {s.name for s in learner.settings} if learner is not None else set()
    for key in registry.SETTINGS:
        if key not in kept:
            data.pop(key, None)
    data.update(settings)
    return ModelConfig.from_dict(data)


def promotion_refusal(model: ModelConfig, challenger: ModelConfig) -> str | None:
    """Why a challenger of ``model`` could never be promoted (None: it can be). A prediction
    made before a promotion is labelled after it by the promoted learner, from the scores it
    was served with: their layout must be the promoted learner's."""
    if model.n_classes > 2 and challenger.multiclass != model.multiclass:
        return (
            f"it is multiclass {challenger.multiclass!r} and the model {model.multiclass!r}: "
            "predictions still waiting for their labels keep scores of the model's layout, so "
            "only a challenger with the same 'multiclass' is promoted"
        )
    return None


def start_state(config: ModelConfig, served: Weights | None) -> ChallengerState:
    """A new challenger: zero weights, or a copy of the served weights and biases, and of each
    state array the served learner keeps too (AROW's variances; its average, if it keeps one,
    starts from its own first example). Its position is set by the store."""
    weights = Weights.zeros(config)
    if served is not None:
        if served.w.shape != weights.w.shape:
            raise ValueError("the served weights have another shape")
        weights.w[:] = served.w
        weights.b[:] = served.b
        for a in config.learner.state(config):
            there = served.state.get(a.name)
            if a.copied and there is not None and there.shape == weights.state[a.name].shape:
                weights.state[a.name][...] = there
    return ChallengerState(config, weights, 0)


def pack_state(state: ChallengerState) -> bytes:
    """The state's counters after its position (the store writes the position in front:
    ``b"<position> "``), its window, then its packed weights."""
    return pack_head(state) + pack_weights(state.weights)


def pack_head(state: ChallengerState) -> bytes:
    """``pack_state`` but the weights: what the store keeps beside them (which it keeps in
    chunks, and joins behind this when read)."""
    counts = (
        state.weights.seen,
        state.mistakes,
        state.updates,
        state.defaulted,
        state.defaulted_mistakes,
    )
    curve = b",".join(b"%d" % m for m in state.curve)
    shape = (state.every, state.since, len(curve), len(state.window))
    served = -1 if state.served_mistakes is None else state.served_mistakes
    drift = _pack_drift(state)
    head = b"%d %d %d %d %d %d %d %d %d %d %d %d\n" % (
        *counts,
        *shape,
        served,
        len(drift),
        state.offset,
    )
    return head + curve + state.window + drift


def _pack_drift(state: ChallengerState) -> bytes:
    """Its drift detector: ``<state>|<warnings> <drifts>|<seen><w|d>,...`` (empty: fresh,
    with no event yet; a fresh one with events, as a learner's after a rollback, keeps them)."""
    detector = state.config.drift_detector
    counted = state.drift_events or state.drift_warnings or state.drifts
    if detector is None or (state.drift_state is None and not counted):
        return b""
    numbers = detector.start() if state.drift_state is None else state.drift_state
    events = ",".join(f"{at}{kind[0]}" for at, kind in state.drift_events)
    text = f"{state_text(numbers)}|{state.drift_warnings} {state.drifts}|{events}"
    return text.encode()


def _unpack_drift(state: ChallengerState, data: bytes) -> None:
    detector = state.config.drift_detector
    if not data or detector is None:
        return
    numbers, counts, events = data.decode().split("|")
    state.drift_state = read_state(detector, numbers)
    warnings, drifts = counts.split()
    state.drift_warnings, state.drifts = int(warnings), int(drifts)
    kinds: dict[str, Status] = {"w": "warning", "d": "drift"}
    state.drift_events = [(int(e[:-1]), kinds[e[-1]]) for e in events.split(",") if e]


def unpack_state(config: ModelConfig, data: bytes) -> ChallengerState:
    """A state as ``pack_state`` wrote it, behind the position the store put in front."""
    head, rest = data.split(b"\n", 1)
    numbers = [int(v) for v in head.split()]
    if len(numbers) == 10:  # (packed before served_mistakes was counted)
        numbers.append(-1)
    if len(numbers) == 11:  # (packed before a challenger had a drift detector)
        numbers.append(0)
    if len(numbers) == 12:  # (packed before a learner's own count was kept apart)
        numbers.append(0)
    position, seen, mistakes, updates, defaulted, dmistakes, every, since, c, n = numbers[:10]
    served, k, offset = numbers[10:]
    curve = [int(m) for m in rest[:c].split(b",")] if c else []
    weights = unpack_weights(config, rest[c + n + k :], updates, seen)
    window = bytes(rest[c : c + n])
    state = ChallengerState(
        config=config,
        weights=weights,
        position=position,
        mistakes=mistakes,
        window=window,
        defaulted=defaulted,
        defaulted_mistakes=dmistakes,
        every=every,
        curve=curve,
        since=since,
        served_mistakes=None if served < 0 else served,
        offset=offset,
    )
    _unpack_drift(state, bytes(rest[c + n : c + n + k]))
    return state


def equal_states(a: ChallengerState, b: ChallengerState) -> bool:
    """Whether two states are the same, bit for bit (the tests compare workers' so)."""
    return (
        pack_state(a) == pack_state(b)
        and a.position == b.position
        and bool(np.array_equal(a.weights.w, b.weights.w))
    )
