"""A model's challengers as a worker sees them: every one's state replayed from what the store
holds (``store/ops/challenger_states.py``), the same bits on every worker, and folded forward once
the labels' log is long; and the entries a learn commit logs for them.

The store keeps, per challenger, a packed state at some position of the model's stream of
labels, and the entries of every label since (``clog``), appended by the same scripts that
learn them for the served model. A challenger's figures are its state replayed through the
entries from its position on (``learner/challenger.py``): a worker reads them all in one
transaction, so it sees every label committed before the read and none after, and two workers
that read the same entries compute the same weights and counts.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from service.contract.store_protocol import DEFAULT_SOURCE, RECORD_CALL_BYTES
from service.contract.store_values import ChallengerStates, LearnResult
from service.learner import Example, ModelConfig
from service.learner.challenger import ChallengerState, pack_head, pack_state, unpack_state
from service.learner.codec import entry_head, pack_payload, pack_record, pack_weights, read_logged
from service.learner.kernel import Packed
from service.store import Store
from service.store.ops.challenger_states import ChallengerData, Tail

log = logging.getLogger("perceptron")


def label_entries(
    cfg: ModelConfig,
    epoch: str,
    xs: Sequence[Example],
    *,
    ts: Sequence[int],
    served: Sequence[int],
    provs: Sequence[bytes],
) -> list[bytes]:
    """Every example's entry for the challengers, as a log entry (``codec.unpack_entry`` reads
    it): its true class and the example; the raw scores, which a challenger never reads,
    zeros."""
    zeros = np.zeros(cfg.n_scores).tobytes()
    no_updates = [False] * cfg.n_classes
    records = [pack_record(epoch, s, no_updates, zeros) for s in range(cfg.n_classes)]
    heads = [entry_head(0, t) for t in range(cfg.n_classes)]
    if cfg.dense:  # (pack_payload's: the raw scores, then the values)
        return [
            heads[t] + prov + records[s] + x.values.tobytes()
            for x, t, s, prov in zip(xs, ts, served, provs, strict=True)
        ]
    return [
        heads[t] + prov + records[s] + pack_payload(np.zeros(0), x)
        for x, t, s, prov in zip(xs, ts, served, provs, strict=True)
    ]


# A commit's labels for the challengers: the model's name, and the examples, their true
# classes and the classes served, in order
CommitLabels = tuple[str, tuple[Sequence[Example], list[int], list[int]]]


@dataclass(frozen=True)
class Labels:
    """A commit's labels, as the challengers of ``epoch`` and ``gen`` learn them from label
    number ``first`` on."""

    epoch: str
    gen: str
    first: int
    learned: tuple[Packed, list[int], list[int]]


@dataclass
class Standing:
    """The model's challengers replayed up to the end of the labels' log that was read."""

    data: ChallengerData
    states: dict[str, ChallengerState]  # by id, in id order
    position: int  # labels of the model's stream the log reached

    @property
    def logged(self) -> int:
        """The labels in the log, from its start (``data.base``) to ``position``."""
        return self.position - self.data.base


def _learn(
    model: ModelConfig, starts: Sequence[tuple[ChallengerState, int]], entries: list[bytes]
) -> None:
    """Each state learns ``entries`` from its index in them on, in order."""
    if not starts:
        return
    logged = read_logged(model, entries, DEFAULT_SOURCE)
    for state, at in starts:
        xs = logged.packed.since(at)
        state.learn_all(xs, logged.ts[at:], logged.by_default[at:], logged.served[at:])


def replay(data: ChallengerData) -> Standing:
    """Each challenger's state, replayed from its packed one through the entries since."""
    model = ModelConfig.from_json(data.config)
    end = data.base + len(data.entries)
    states = {
        id: unpack_state(ModelConfig.from_json(data.configs[id]), data.states[id])
        for id in sorted(data.configs)
    }
    _learn(model, [(s, s.position - data.base) for s in states.values()], data.entries)
    for id, state in states.items():
        if state.position != end:
            raise ValueError(f"challenger {id!r} stands at label {state.position}, not {end}")
    return Standing(data, states, end)


async def standing(store: Store, name: str) -> Standing | None:
    """The model's challengers as they stand now (None: no such model)."""
    data = await store.read_challengers(name)
    return None if data is None else replay(data)


def _bytes(now: Standing) -> int:
    return sum(a.nbytes for s in now.states.values() for a in s.weights.arrays())


class Standings:
    """Each model's challengers as this worker last replayed them, brought forward by the
    labels logged since: what showing them costs is what changed since, whatever the size of
    their weights. A read that finds them added, removed, promoted or folded past what was
    kept reads them whole again. The models used last are kept, KEPT_BYTES of weights at most
    but for the one used last, whatever its size."""

    KEPT_BYTES = 512 << 20
    WAITING = 16  # commits' labels kept until the challengers stand right before them

    def __init__(self, store: Store) -> None:
        self.store = store
        self._kept: OrderedDict[str, Standing] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiting: dict[str, deque[Labels]] = {}
        self._ends: dict[str, int] = {}  # where each model's labels' log ended, last known
        self._ahead: dict[str, tuple[ChallengerStates, dict[str, ChallengerState]]] = {}

    async def current(self, name: str) -> Standing | None:
        """The model's challengers as they stand now (None: no such model). Shared: the
        states move forward in place, at the next call or a commit's ``learned``, between two
        awaits of its caller."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            kept = self._kept.get(name)
            now = None if kept is None else await self._forward(name, kept)
            if now is None:
                self._kept.pop(name, None)
                now = await standing(self.store, name)
                if now is not None:
                    self._ended(name, now.position)
            if now is not None and now.states:
                # (their packed states and the log read are replayed: let them go)
                now.data = replace(now.data, states={}, entries=[])
                self._kept.pop(name, None)
                self._kept[name] = now
                held = sum(map(_bytes, self._kept.values()))
                while held > self.KEPT_BYTES and len(self._kept) > 1:
                    gone, old = self._kept.popitem(last=False)
                    held -= _bytes(old)
                    self._waiting.pop(gone, None)
            return now

    def learned(self, epoch: str, at: LearnResult, learned: CommitLabels) -> None:
        """Bring the kept challengers forward by a commit's own labels (``learned``: the
        examples, true and served classes of the log's last entries when the commit answered
        ``at``) without reading them back: at once when they stand right before those, else
        once a read brings them there (the labels between are read)."""
        name, (xs, ts, served) = learned
        first = at.label_base + at.label_log - len(xs)
        self._ends[name] = first + len(xs)
        lock = self._locks.get(name)
        if name not in self._kept and not (lock is not None and lock.locked()):
            return  # (nothing kept, nor being read: the next use reads them)
        waiting = self._waiting.setdefault(name, deque(maxlen=self.WAITING))
        waiting.append(Labels(epoch, at.label_gen, first, (Packed.of(xs), ts, served)))
        self._catch_up(name)

    def ahead(self, epoch: str, learned: CommitLabels) -> ChallengerStates | None:
        """Every kept challenger's state after a commit's examples (``learned``), for the
        commit to write in place of their labels (``folded`` keeps them once it did): when they
        stand where the labels' log ended at the last commit, and their weights are smaller
        than the labels, and than the 1 MiB a script carries at most. None otherwise: the
        commit logs the labels."""
        name, (xs, ts, served) = learned
        kept = self._kept.get(name)
        self._ahead.pop(name, None)
        if kept is None or kept.data.epoch != epoch or self._ends.get(name) != kept.position:
            return None
        packed = Packed.of(xs)
        size = packed.values.nbytes + packed.index.nbytes // 2  # (int32 indices, as logged)
        if not _bytes(kept) < min(size, RECORD_CALL_BYTES):  # (a script's 1 MiB at most)
            return None
        after = {}
        for id, state in kept.states.items():
            after[id] = replace(state, weights=state.weights.copy(), curve=list(state.curve))
            after[id].learn_all(packed, ts, [False] * len(xs), served)
        states = ChallengerStates(
            kept.data.gen, kept.position, [(id, pack_state(a)) for id, a in after.items()]
        )
        self._ahead[name] = (states, after)
        return states

    def folded(self, name: str, states: ChallengerStates, at: LearnResult) -> None:
        """A commit wrote ``states`` (``ahead``'s), answering ``at``: they are the kept
        challengers' now."""
        kept, (made, after) = self._kept.get(name), self._ahead.pop(name, (None, {}))
        if kept is None or made is not states or kept.position != states.at:
            self._kept.pop(name, None)  # (read again at the next use)
            return
        kept.states = after
        kept.position = at.label_base
        kept.data = replace(kept.data, base=at.label_base)
        self._ends[name] = at.label_base

    def _ended(self, name: str, end: int) -> None:
        """A read found the labels' log ending at label ``end``."""
        self._ends[name] = max(self._ends.get(name, 0), end)

    def missed(self, name: str) -> None:
        """A commit refused ``ahead``'s states: the next logs its labels."""
        self._ahead.pop(name, None)
        self._ends.pop(name, None)

    def _catch_up(self, name: str) -> None:
        """The kept challengers brought forward by the commits' labels waiting from their
        position on; those they are past let go."""
        kept, waiting = self._kept.get(name), self._waiting.get(name)
        while kept is not None and waiting:
            labels = waiting[0]
            xs, ts, served = labels.learned
            if (kept.data.epoch, kept.data.gen) != (labels.epoch, labels.gen):
                waiting.popleft()  # (of challengers before these)
            elif labels.first + len(xs) <= kept.position:
                waiting.popleft()  # (read already)
            elif labels.first != kept.position:
                return  # (labels between them not known here)
            else:
                waiting.popleft()
                for state in kept.states.values():
                    state.learn_all(xs, ts, [False] * len(xs), served)
                kept.position += len(xs)

    async def fold(self, name: str) -> bool:
        """``fold`` at the challengers' current standing, as kept here."""
        return await fold(self.store, name, await self.current(name))

    async def _forward(self, name: str, kept: Standing) -> Standing | None:
        """``kept`` brought forward by the labels logged since; None when it cannot be. (A
        commit's ``learned`` may bring it forward during the read: the entries it has are
        skipped.)"""
        offset = kept.logged
        for _ in range(2):
            news = await self.store.read_challengers_since(name, offset)
            if news is None or (news.epoch, news.gen) != (kept.data.epoch, kept.data.gen):
                return None  # (gone, or challengers added, removed or promoted)
            at = news.base + offset  # (the label number of the first entry read)
            if news.base <= kept.position and at <= kept.position:
                break
            if not news.base <= kept.position:
                return None  # (folded past what is kept: the log before is gone)
            offset = kept.position - news.base  # (folded meanwhile: read again from there)
        else:
            return None
        model = ModelConfig.from_json(news.config)
        entries = news.entries[kept.position - at :]
        _learn(model, [(s, 0) for s in kept.states.values()], entries)
        kept.position += len(entries)
        self._ended(name, at + len(news.entries))
        kept.data = replace(news, configs=kept.data.configs, entries=[])
        return kept


async def fold(store: Store, name: str, now: Standing | None = None) -> bool:
    """Fold the labels' log into the challengers' states, at the position read (``now``: as
    read already)."""
    now = now or await standing(store, name)
    if now is None or not now.states or now.position == now.data.base:
        return False
    tails = [tail_of(id, s) for id, s in now.states.items()]
    gen, base, position = now.data.gen, now.data.base, now.position
    done = await store.fold_challengers(name, gen=gen, base=base, position=position, states=tails)
    if done and now.data.gen == gen:  # (the log now starts there)
        now.data = replace(now.data, base=position)
    return done


def tail_of(id: str, state: ChallengerState) -> Tail:
    """A state as the store writes it: its head, and its weights apart."""
    return Tail(id, pack_head(state), pack_weights(state.weights))


async def fold_quietly(standings: Standings, name: str) -> None:
    """``Standings.fold``, whose failure only leaves the log longer until the next."""
    try:
        await standings.fold(name)
    except Exception as e:  # an optimisation: never let it hurt a request
        log.warning("folding model %r's challengers failed (%s); it will be tried again", name, e)
