"""The learn commit: examples learned in order on this worker's replica of a model, and
committed to the store in one group commit, which answers the handed-over requests it learns.

Each worker committing its own (PERCEPTRON_ONE_WRITER=false, or an embedded store) or a
model's writer (``writer.py``, which calls this with its lease): the same code, one decision.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from itertools import accumulate, islice
from typing import overload

from service.contract.learn_wire import Labelled, pack_answer
from service.contract.sources import one_source_counts, source_counts
from service.contract.store_values import (
    Background,
    Bucket,
    Challenged,
    Held,
    LearnBatch,
    Lease,
    Made,
    RequestsGone,
    SyncData,
)
from service.engine.batcher import Batcher, Span, batcher_of
from service.engine.replica import Replica
from service.engine.replicas import Replicas
from service.engine.retraining_sequence import FIRST_WINDOW, run_retraining
from service.engine.sequence import LearnedSequence, learning_ms, run_sequence
from service.engine.standings import label_entries
from service.errors import ModelBusy, learn_outcome_unknown
from service.learner import Example, Label, ModelConfig
from service.learner.codec import provenance
from service.learner.features import Rows
from service.learner.perceptron import Weights, seen_depended
from service.settings import Settings
from service.store import Store, StoreError, reply_lost

# What learning one example did: (the label predicted before learning it, whether that was a
# mistake, whether the weights changed, the model's version after it); a commit keeps its
# examples' as columns (LearnedRows), since a batch makes thousands.
Learned = tuple[Label, bool, bool, int]
# In a group commit's results, what stands for the examples of a handed-off request that the
# commit left out (another writer learned it, or its requester withdrew it): never read.
NOT_LEARNED: Learned = ("", False, False, -1)
PROMOTE_POLL_MS = 5  # a commit that a promotion holds back tries again this often (it takes ms)
QUEUE = "learn"  # the replica's group-commit queue of learns
LEARN_IN_THREAD_MS = 20  # a commit's learning expected to take longer runs off the event loop


def time_bucket(settings: Settings, now: float) -> Bucket:
    """The time bucket of the metrics' series that ``now`` falls in, and how many are kept."""
    return Bucket(
        int(now // settings.series_bucket_s), settings.series_keep_s // settings.series_bucket_s
    )


class LearnCommits:
    """This worker's learn commits, for every model it learns."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        replicas: Replicas,
        clock: Callable[[], float],
        lease: Lease | None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.replicas = replicas
        self.clock = clock
        # This worker's lease when its learn commits are a model writer's (writer.py): they
        # commit only while it holds the model's lease, and hold the model against feedback
        # when they find it moved (store/ops/learn.py). None: each worker commits its own.
        self.lease = lease

    def queue(
        self, rep: Replica, examples: Labelled, handed: Sequence[Span] = ()
    ) -> asyncio.Future[Sequence[Learned]]:
        """Learn on this worker's replica, in the group commit of the model's learns, queued
        at once; ``handed``: where each request handed over by another worker lies in
        ``examples`` (its token, start, stop; ``writer.py``)."""
        queue = batcher_of(rep.queues, QUEUE, self.settings.max_batch, join=Labelled.join)
        learned = queue.put(examples, handed)
        if queue.needs_committer():
            queue.add_committer(asyncio.create_task(self._commit_learns(rep, queue)))
        return learned

    async def _commit_learns(self, rep: Replica, queue: Batcher[Labelled, Learned]) -> None:
        """The replica's group commits of learns, while any are queued."""
        with queue.committing():
            while batch := queue.next_batch():
                with batch:
                    batch.results = await self._learn(rep, batch.items, batch.spans)

    def learning(self, name: str) -> bool:
        """Whether this worker has learns of the model in flight."""
        queue = self._queue_of(name)
        return queue is not None and not queue.idle

    def waiting(self, name: str) -> tuple[int, int]:
        """Learns of the model queued behind the commit in flight, and their examples."""
        queue = self._queue_of(name)
        return (0, 0) if queue is None else queue.waiting

    def _queue_of(self, name: str) -> Batcher[Labelled, Learned] | None:
        rep = self.replicas.peek(name)
        return rep.queues.get(QUEUE) if rep is not None else None

    async def _learn(
        self, rep: Replica, examples: Labelled, handed: list[Span]
    ) -> Sequence[Learned]:
        """Learn a group commit's examples; the commit answers each handed-off request in it,
        unless it no longer waits (then it is left out: its results are never read)."""
        self.replicas.check_current(rep)
        keep = [True] * len(examples)
        kept, spans = examples, handed
        while True:
            res: Sequence[Learned] | RequestsGone = (
                await self._commit(rep, kept, spans) if any(keep) else []
            )
            if isinstance(res, RequestsGone):
                for tag, a, b in handed:
                    if tag in res.tokens:
                        keep[a:b] = [False] * (b - a)
                at = list(accumulate(keep, initial=0))  # where each example lands among those kept
                spans = [(tag, at[a], at[b]) for tag, a, b in handed if keep[a]]
                kept = examples.keep(keep)
                continue
            if all(keep):
                return res
            results = iter(res)
            return [next(results) if k else NOT_LEARNED for k in keep]

    async def _commit(
        self, rep: Replica, examples: Labelled, spans: list[Span]
    ) -> LearnedRows | RequestsGone:
        cfg = rep.config
        xs, ts = examples.xs, examples.ts
        heads, provs, sources = _provenances(examples, int(1000 * self.clock()))
        r2 = float(xs.sq.max()) if isinstance(xs, Rows) else max(x.sq_norm for x in xs)
        attempts = 0
        while attempts < self.settings.learn_attempts:
            base = rep.weights
            made, background = await self._made(rep, base, r2)
            got = None if made is None else await _learned(rep, base, (xs, ts, provs), background)
            if made is None or not got:  # (not loaded yet, or moved meanwhile: catch up)
                self.replicas.apply_sync(rep, await self.store.sync(rep.name, base.version))
                attempts += 1
                continue
            seq, steps = got
            answers = self._answered(
                rep, seq, base=base, learned=(xs, ts, provs), sources=sources, heads=heads,
                spans=spans, steps=steps,
            )  # fmt: skip
            try:
                res = await self.store.commit_learn(
                    rep.name, epoch=rep.epoch, made=made, batch=seq.batch, answers=answers,
                    when=time_bucket(self.settings, self.clock()), writer=self.lease,
                    detector=cfg.drift_spec,
                )  # fmt: skip
            except StoreError as e:
                if reply_lost(e):  # sent, and its reply lost: it may have run
                    raise learn_outcome_unknown(rep.name, e) from e
                raise  # it did not run: not sent, or refused (a 503 that says to retry)
            if isinstance(res, RequestsGone):
                return res
            if isinstance(res, Held):  # a promotion holds the model: nothing written
                await asyncio.sleep(min(res.ms, PROMOTE_POLL_MS) / 1000)
                continue
            if isinstance(res, Challenged):  # nothing written: not an attempt on the model
                self._challenged(rep, seq.batch)
                continue
            attempts += 1
            if isinstance(res, SyncData):
                self.replicas.apply_sync(rep, res)
                continue
            mine = rep.weights is base and base.version == made.version
            if mine and seq.last:  # (an empty plan moves nothing)
                cfg.learner.apply(cfg, seq.work, xs[-1], seq.last, res.seen)
            rep.committed(seq.work if mine else None, res.version, res.seen)
            if seq.batch.states is not None:
                self.replicas.standings.folded(rep.name, seq.batch.states, res)
            elif res.label_log >= 0:
                self.replicas.standings.learned(rep.epoch, res, (rep.name, (xs, ts, seq.served)))
            self.replicas.compact_after(rep.name, res.log_length, res.label_log)
            rep.challenged = res.label_log >= 0
            return LearnedRows.after(
                cfg.classes, seq.served, ts, seq.updated, version=made.version, steps=steps
            )
        raise ModelBusy(
            f"Model {rep.name!r} changed under every one of {self.settings.learn_attempts} "
            "attempts to learn; retry shortly."
        )

    async def _made(
        self, rep: Replica, base: Weights, r2: float
    ) -> tuple[Made | None, Background | None]:
        """What the commit must find of the model (its version; its count where the examples
        depend on it), and the background learner of a model that retrains, read with the
        version and count it goes with: that commit checks the count, which every label moves.
        None when those are not the copy's (it must catch up first): a detector simulated from
        another count than the copy's would drift elsewhere than the store's."""
        cfg = rep.config
        if base.version < 0:  # (nothing loaded: learning on it would be thrown away)
            return None, None
        if not cfg.retrains:
            seen = seen_depended(cfg, base)
            return Made(base.version, "" if seen is None else seen, r2), None
        background = await self.store.read_background(rep.name)
        if (background.version, background.seen) != (base.version, base.seen):
            return None, background
        return Made(base.version, base.seen, r2), background

    def _challenged(self, rep: Replica, sent: LearnBatch) -> None:
        """The store refused a commit for the model's challengers: the next sends their
        labels."""
        if sent.states is not None:  # (the challengers moved since the states were made)
            self.replicas.standings.missed(rep.name)
        elif rep.challenged:  # (sent with its labels: the store would refuse it again)
            raise ModelBusy(f"Model {rep.name!r}'s challengers refused a commit.")
        rep.challenged = True

    def _answered(
        self,
        rep: Replica,
        seq: LearnedSequence,
        *,
        base: Weights,
        learned: tuple[Sequence[Example], list[int], list[bytes]],
        sources: list[str],
        heads: dict[str, bytes],
        spans: list[Span],
        steps: list[int] | None,
    ) -> list[tuple[str, bytes]]:
        """The answer of each handed-off request in the commit of ``seq`` (learned on
        ``base``), which this completes as the commit sends it: its counters and, for the
        model's challengers, when it has some, their states after these examples, or every
        example's entry."""
        xs, ts, provs = learned
        cfg = rep.config
        b = seq.batch
        only = next(iter(heads)) if len(heads) == 1 else None  # the usual case: one key
        b.cells.update(
            source_counts(sources, seq.served, ts, seq.updated)
            if only is None
            else one_source_counts(only, b.n, b.mistakes, len(b.entries) + len(b.swaps or ()))
        )
        if rep.challenged:
            labelled = (rep.name, (xs, ts, seq.served))
            states = self.replicas.standings.ahead(rep.epoch, labelled)
            seq.batch = replace(
                b,
                labels=b.labels
                if states or b.labels
                else label_entries(
                    cfg=cfg, epoch=rep.epoch, xs=xs, ts=ts, served=seq.served, provs=provs
                ),
                states=states,
            )
        added = seq.updated if steps is None else steps
        before = list(accumulate(added, initial=base.version))  # version before each
        return [
            (tag, pack_answer(before[a], seq.served[a:b], seq.updated[a:b], steps and steps[a:b]))
            for tag, a, b in spans
        ]


def _provenances(
    examples: Labelled, now_ms: int
) -> tuple[dict[str, bytes], list[bytes], list[str]]:
    """Each API key's provenance (``codec.provenance``), each example's, and each example's
    key where they are not all one's (else none)."""
    heads = {src: provenance(src, now_ms) for src in set(examples.sources)}
    one = next(iter(heads.values())) if len(heads) == 1 else None
    provs = [one] * len(examples.ts) if one is not None else [heads[s] for s in examples.sources]
    return heads, provs, examples.sources if len(heads) > 1 else []


async def _learned(
    rep: Replica,
    base: Weights,
    learned: tuple[Sequence[Example], list[int], list[bytes]],
    background: Background | None,
) -> tuple[LearnedSequence, list[int] | None] | None:
    """The examples learned on ``base`` (``background``: the background learner of a model
    that retrains, as of ``base``), and the versions each example added where a swap made them
    more than its update (None: one each that updated). Learning that takes long runs off the
    event loop, on a copy of ``base`` made there too: the loop goes on renewing the writer's
    lease meanwhile (``writer.LEASE_MS``), which a commit that held it longer would lose every
    time it tried. None when ``base`` moved before its copy (a sync, in place): catch up."""
    cfg, xs = rep.config, learned[0]
    relearned = sum(map(len, background.items)) if background is not None else 0
    copies = 1 + (len(xs) // FIRST_WINDOW if background is not None else 0)  # (windows)
    if learning_ms(cfg, xs, relearned, copies) <= LEARN_IN_THREAD_MS:
        return _learn_sequence(cfg, base, epoch=rep.epoch, learned=learned, background=background)
    at = (base.version, base.seen)

    def learn() -> tuple[LearnedSequence, list[int] | None] | None:
        with rep.guard:
            if (base.version, base.seen) != at:
                return None
            own = base.copy()
        return _learn_sequence(cfg, own, epoch=rep.epoch, learned=learned, background=background)

    return await asyncio.to_thread(learn)


def _learn_sequence(
    cfg: ModelConfig,
    base: Weights,
    *,
    epoch: str,
    learned: tuple[Sequence[Example], list[int], list[bytes]],
    background: Background | None,
) -> tuple[LearnedSequence, list[int] | None]:
    xs, ts, provs = learned
    if background is None:
        return run_sequence(cfg=cfg, epoch=epoch, base=base, xs=xs, ts=ts, provs=provs), None
    retrained = run_retraining(cfg, epoch, base, background, xs=xs, ts=ts, provs=provs)
    return retrained.seq, retrained.steps if retrained.seq.batch.swaps else None


class LearnedRows(Sequence[Learned]):
    """Each example's ``Learned``, from the classes served (indices into ``classes``), the
    true ones, whether each updated, and the version after each."""

    __slots__ = ("classes", "served", "ts", "updated", "versions")

    def __init__(
        self,
        classes: Sequence[Label],
        served: list[int],
        ts: list[int],
        updated: list[bool],
        versions: list[int],
    ) -> None:
        self.classes, self.served, self.ts = classes, served, ts
        self.updated, self.versions = updated, versions

    @classmethod
    def after(
        cls,
        classes: Sequence[Label],
        served: list[int],
        ts: list[int],
        updated: list[bool],
        *,
        version: int,
        steps: list[int] | None = None,
    ) -> LearnedRows:
        """The rows of examples learned in order from the model's ``version`` (``steps``: the
        versions each added, where not one each that updated)."""
        added = updated if steps is None else steps
        versions = list(islice(accumulate(added, initial=version), 1, None))
        return cls(classes, served, ts, updated, versions)

    def __len__(self) -> int:
        return len(self.served)

    @overload
    def __getitem__(self, i: int) -> Learned: ...
    @overload
    def __getitem__(self, i: slice) -> LearnedRows: ...
    def __getitem__(self, i: int | slice) -> Learned | LearnedRows:
        if isinstance(i, slice):
            return LearnedRows(
                self.classes, self.served[i], self.ts[i], self.updated[i], self.versions[i]
            )
        s = self.served[i]
        return (self.classes[s], s != self.ts[i], self.updated[i], self.versions[i])

    def __iter__(self) -> Iterator[Learned]:
        return zip(
            map(self.classes.__getitem__, self.served),
            map(operator.ne, self.served, self.ts),
            self.updated,
            self.versions,
            strict=True,
        )


def columns(results: Sequence[Learned]) -> tuple[list[Label], list[bool], list[bool], list[int]]:
    """The labels, mistakes, updates and versions of ``results``, each a list."""
    if isinstance(results, LearnedRows):
        return (
            list(map(results.classes.__getitem__, results.served)),
            list(map(operator.ne, results.served, results.ts)),
            results.updated,
            results.versions,
        )
    labels, mistakes, updated, versions = zip(*results, strict=True)
    return list(labels), list(mistakes), list(updated), list(versions)
