"""One writer per model (the default; PERCEPTRON_ONE_WRITER=false turns it off): the worker
holding a model's lease learns every /learn of it.

Every /learn must be computed on the model's latest weights. When workers each compute and
commit their own, a commit often finds the model changed by another worker's, catches up and
computes again: the more workers, the more work thrown away, and requests can fail. Here one
worker at a time, the writer, learns for the model: it holds a lease in Redis, renewed while it
works; the other workers hand the examples they have checked (``store/ops/handover.py``) to the
model's queue in Redis and wait for the answer. The writer takes the queue in order and learns
everything waiting in one group commit (``learn_commits.py``), so its replica is always current:
no catch-up, no retry, whatever the number of workers. A worker that finds no writer becomes it
(in the same script that would queue its request); a writer with nothing left to do gives the
lease up; a writer that dies leaves the lease to lapse, and a waiting worker takes it over, with
the requests the dead writer had taken (``store/ops/parts.py``, ACQUIRE).

A handed-off request is learned once or not at all: the commit that learns it also takes it
off the queue's keys and pushes its answer, and refuses to learn it if it no longer waits
(another writer learned it, or its requester withdrew it at its deadline). Only the lease's
holder commits (the commit checks it, ops/learn.py): a writer that stalled past its lease and
wakes up commits nothing (NotWriter), hands its own examples over like any other worker, and
leaves the requests it had taken to the new holder, which took them back. And a commit is still
guarded by the version it was computed on (``learn_commits.LearnCommits``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from service.contract.learn_wire import (
    NOT_QUEUED_ANSWER,
    STALE,
    UNLEARNED_ANSWER,
    Labelled,
    new_token,
    pack_request,
    unpack_answer,
)
from service.contract.store_values import Lease
from service.engine.batcher import GROUP_MOST, Batcher, batcher_of
from service.engine.learn_commits import LearnCommits, Learned, LearnedRows
from service.engine.replica import Replica
from service.engine.replicas import Replicas
from service.engine.taken_requests import TakenRequests
from service.engine.tasks import cancel_all
from service.errors import (
    NotWriter,
    ServiceError,
    StaleModel,
    Unavailable,
    learn_outcome_unknown,
)
from service.settings import Settings
from service.store import Store, StoreError, reply_lost

log = logging.getLogger("perceptron")

# A writer that stops renewing its lease (it renews it at least every WAIT_S, and at each
# commit) is replaced this long after it last did, by a requester that looks again when the
# lease would lapse: learning stops for less than half a second when a writer dies or stalls.
# A commit's long learning runs off the event loop, which renews the lease meanwhile
# (learn_commits.py); a writer stalled past it loses it, safely: only the lease's holder
# commits (ops/learn.py).
LEASE_MS = 400
WAIT_S = 0.1  # a writer's wait for a request before it looks at its lease again
IDLE_S = 0.2  # a writer with no request for this long gives the lease up
ANSWER_WAIT_S = 0.1  # a requester's wait for its answer before it checks on the writer
LAPSE_MARGIN_S = 0.005  # past the moment a lease would lapse, when a requester looks again
# Requests a writer has taken that wait for a later commit than the one in flight, at most,
# and the commits' worth of examples: four, so that the next is full when the one in flight
# ends, even where a take of the largest requests takes longer than a commit.
MOST_WAITING = 64
COMMITS_AHEAD = 4
# Hand-overs of one worker for one model in flight at once: the writer learns those waiting
# together, and each waits for a busy writer's event loop several times over.
HAND_OVERS_IN_FLIGHT = 4
LEASE_MOVES = 3  # times a hand-over is sent again when the lease moved under its commit


class Writers:
    """This worker's side of the writers of every model: hand-offs, leases, queue drains."""

    def __init__(
        self, store: Store, settings: Settings, clock: Callable[[], float], replicas: Replicas
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.replicas = replicas
        self.me = secrets.token_hex(8)
        # The one decision: one writer per model, or each worker commits its own (an
        # embedded store serves one process: no other worker to hand over to).
        self.one_writer = settings.one_writer and not store.embedded
        self.commits = LearnCommits(
            store, settings, replicas, clock, Lease(self.me, LEASE_MS) if self.one_writer else None
        )
        self._writing: dict[str, asyncio.Task[None]] = {}
        self._leased: set[str] = set()  # models whose lease this worker took (maybe lapsed)
        self.taken = TakenRequests(store, replicas, self.commits, clock)
        self._fed: set[str] = set()  # models written here whose last take brought requests
        self._closing = False

    def writes(self, name: str) -> bool:
        return name in self._writing

    def fed(self) -> bool:
        """Whether this worker writes a model that other workers hand requests to now: the
        last take of one of its models brought some."""
        return bool(self._fed)

    async def learn(self, rep: Replica, examples: Labelled) -> Sequence[Learned]:
        """Learn ``examples`` in order on the model's latest weights, wherever its writer is.

        Requests of this worker for one model that arrive while HAND_OVERS_IN_FLIGHT of its
        hand-overs are in flight share the next one (``batcher.py``).
        """
        if not self.one_writer:
            return await self.commits.queue(rep, examples)
        if rep.name in self._writing:
            try:
                return await self.commits.queue(rep, examples)
            except NotWriter:
                pass  # its lease moved on: hand them over, as any other worker does
        queue = batcher_of(
            rep.queues, "hand-over", self.settings.max_batch, HAND_OVERS_IN_FLIGHT, Labelled.join
        )
        learned: asyncio.Future[Sequence[Learned]] = queue.put(examples)
        if queue.needs_committer():
            queue.add_committer(asyncio.create_task(self._hand_over_queued(rep, queue)))
        return await learned

    async def _hand_over_queued(self, rep: Replica, queue: Batcher[Labelled, Learned]) -> None:
        """This worker's hand-overs of the model's learns, while any are queued."""
        with queue.committing():
            while batch := queue.next_batch():
                with batch:
                    batch.results = await self._hand_over(rep, batch.items)

    async def _hand_over(self, rep: Replica, examples: Labelled) -> Sequence[Learned]:
        # A lease that moves between the hand-over and this worker's commit (it lapsed while
        # the worker was slow) makes the commit NotWriter: the examples are handed over again.
        for _attempt in range(LEASE_MOVES):
            with suppress(NotWriter):
                return await self._hand_over_once(rep, examples)
        raise NotWriter(rep.name)

    async def _hand_over_once(self, rep: Replica, examples: Labelled) -> Sequence[Learned]:
        if rep.name in self._writing:  # this worker became the writer meanwhile
            with suppress(NotWriter):  # (and lost the lease since: hand them over)
                return await self.commits.queue(rep, examples)
        token = new_token()
        deadline = self.clock() + self.settings.learn_wait_s
        request = pack_request(token, int(deadline * 1000), rep.epoch, examples)
        wait_ms = int(self.settings.learn_wait_s * 1000)
        try:
            # Queued, and its answer's first wait, in one round trip.
            mine, first = await self.store.hand_off(
                rep.name,
                me=self.me,
                lease_ms=LEASE_MS,
                token=token,
                request=request,
                wait_ms=wait_ms,
                not_queued=NOT_QUEUED_ANSWER,
                wait_s=min(ANSWER_WAIT_S, self.settings.learn_wait_s),
            )
        except StoreError as e:
            if not reply_lost(e):
                raise  # not queued (not sent, or refused): a 503 that says to retry
            # maybe queued, and then maybe learned by the writer
            mine, answer = False, await self._settle(rep, token, e)
        else:
            answer = b"" if mine else await self._answer(rep, token, deadline, first)
        if mine:
            self._start(rep.name)
            return await self.commits.queue(rep, examples)
        try:
            served, updated, versions = unpack_answer(answer)
        except ServiceError as e:
            if e.code == STALE:
                raise StaleModel(rep.name) from e
            raise
        return LearnedRows(rep.config.classes, served, examples.ts, updated, versions)

    async def _answer(
        self, rep: Replica, token: str, deadline: float, first: bytes | None
    ) -> bytes:
        """The answer to a handed-off request (``first``: what its first wait got); else a
        503 that says it was not learned (learn_timeout, or the store's error once the
        request is withdrawn), or OutcomeUnknown when the store cannot tell."""
        try:
            return await self._wait_answer(rep, token, deadline, first)
        except StoreError as e:
            return await self._settle(rep, token, e)

    async def _settle(self, rep: Replica, token: str, cause: StoreError) -> bytes:
        """After the store failed a handed-off request's requester, its fate, once more: the
        answer if it was learned (or refused); the store's error, which says to retry, if the
        request is now withdrawn, not learned; OutcomeUnknown if the store cannot tell.

        A model replaced meanwhile (a new epoch) tells nothing here: the wait whose reply was
        lost may have taken the answer of a request learned before the change, and such a
        request, made again on the new replica, was learned twice."""
        try:
            answer = await self.store.withdraw_learn(rep.name, token, rep.epoch)
        except (StaleModel, StoreError) as e:
            raise learn_outcome_unknown(rep.name, cause) from e
        if answer is None:
            raise cause  # withdrawn before any writer learned it: never learned now
        if answer == NOT_QUEUED_ANSWER:  # never queued: this worker took the lease instead
            self._start(rep.name)  # (it writes the model, or finds another worker does)
            raise cause
        if answer == UNLEARNED_ANSWER:
            raise self._not_learned(rep.name)
        return answer

    async def _wait_answer(
        self, rep: Replica, token: str, deadline: float, answer: bytes | None
    ) -> bytes:
        name = rep.name
        while True:
            if answer == UNLEARNED_ANSWER:  # refused by a writer whose clock is past the deadline
                raise self._not_learned(name)
            if answer is not None:
                return answer
            if await self.store.epochs([name]) != [rep.epoch]:
                # Deleted or replaced meanwhile: no writer learns the request now (its queue
                # went with the model), so it is given up at once, not at its deadline.
                answer = await self.store.withdraw_learn(name, token, rep.epoch)
                if answer is None:
                    raise StaleModel(name)
                if answer == UNLEARNED_ANSWER:
                    raise self._not_learned(name)
                return answer
            # No answer yet: a writer that died leaves the lease to lapse; then take it over:
            # what the dead writer took goes back to the queue (ops/parts.ACQUIRE). Looked at
            # again when it would lapse, if that comes sooner.
            wait = ANSWER_WAIT_S
            if not self.writes(name) and not self._closing:
                lapses = await self.store.claim_writer(name, self.me, LEASE_MS)
                if lapses == 0:
                    self._start(name)
                wait = min(wait, lapses + LAPSE_MARGIN_S)
            left = deadline - self.clock()
            if left <= 0:
                answer = await self.store.withdraw_learn(name, token, rep.epoch)
                if answer is None or answer == UNLEARNED_ANSWER:
                    raise self._not_learned(name)
                return answer
            answer = await self.store.wait_answer(name, token, max(0.001, min(wait, left)))

    def _not_learned(self, name: str) -> Unavailable:
        return Unavailable(
            f"Model {name!r}'s writer did not learn the examples within "
            f"{self.settings.learn_wait_s:g} s (PERCEPTRON_LEARN_WAIT_S); they were not "
            "learned and will not be: send them again.",
            code="learn_timeout",
        )

    def _start(self, name: str) -> None:
        if name not in self._writing and not self._closing:
            self._leased.add(name)
            self._writing[name] = asyncio.create_task(self._write(name))

    async def _write(self, name: str) -> None:
        """Serve the model's queue while this worker holds its lease."""
        in_flight: set[asyncio.Future[Any]] = set()
        idle_since = self.clock()
        size = 1  # examples a request, in the last take
        try:
            while not self._closing:
                # Taken while the commit before runs, until the next ones are full: the next
                # starts as soon as that one ends. (Each commit renews the lease meanwhile.)
                _prune(in_flight)
                room = self._room(name, size)
                if room < 1:
                    if in_flight:
                        await asyncio.wait(in_flight, timeout=WAIT_S, return_when=FIRST_COMPLETED)
                    else:  # (full of this worker's own requests)
                        await asyncio.sleep(LAPSE_MARGIN_S)
                    room = self._room(name, size)
                # Waits up to WAIT_S for a request, and takes those queued, in one round trip;
                # with no room (a slow commit), renews the lease only: a request taken then
                # would make a commit of its own.
                taken = await self.store.take_learns(
                    name, me=self.me, lease_ms=LEASE_MS, most=room, wait_s=WAIT_S if room else 0
                )
                if taken is None:
                    break  # another worker writes the model now
                self._note_fed(name, taken, waited=room > 0)
                if not taken:
                    idle = not _prune(in_flight) and not self.commits.learning(name)
                    if idle and self.clock() - idle_since > IDLE_S:
                        if await self.store.release_writer(name, self.me):
                            break
                    continue
                idle_since = self.clock()
                size = max(1, self.taken.serve_all(name, taken, in_flight) // len(taken))
        except asyncio.CancelledError:
            raise
        except (StoreError, ServiceError) as e:
            # The store is away or full: requesters take the lease over, or withdraw. A
            # condition of the store, said in one line (requests answer 503 with its code).
            log.warning("the writer of model %r stopped: %s", name, e)
        except Exception:
            log.exception("the writer of model %r stopped", name)
        finally:
            del self._writing[name]
            self._fed.discard(name)
            if in_flight:
                await asyncio.wait(in_flight, timeout=self.settings.learn_wait_s)

    def _note_fed(self, name: str, taken: list[bytes], waited: bool) -> None:
        """After a take: other workers feed the model while its takes bring requests, and no
        longer once one that waited for them brought none."""
        if taken:
            self._fed.add(name)
        elif waited:
            self._fed.discard(name)

    def _room(self, name: str, size: int) -> int:
        """Requests of ``size`` examples the model's next COMMITS_AHEAD commits have room for,
        past those waiting for them."""
        requests, examples = self.commits.waiting(name)
        ahead = COMMITS_AHEAD * GROUP_MOST - examples
        return max(0, min(MOST_WAITING - requests, ahead // size))

    async def close(self) -> None:
        """Stop taking requests, finish those taken, and give every lease up."""
        self._closing = True
        tasks = list(self._writing.values())
        if tasks:
            await asyncio.wait(tasks, timeout=self.settings.learn_wait_s)
        await cancel_all(tasks)
        for name in self._leased:  # waiting requesters need not wait for the leases to lapse
            with suppress(Exception):
                await self.store.release_writer(name, self.me, force=True)


def _prune(in_flight: set[asyncio.Future[Any]]) -> set[asyncio.Future[Any]]:
    """The writer's work still in flight: those done taken out (the set itself)."""
    in_flight.difference_update([f for f in in_flight if f.done()])
    return in_flight
