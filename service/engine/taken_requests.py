"""The requests a model's writer took from its queue (``writer.py``), served: those made for its
replica queued for its next commit at once, the others looked at first, and each that is not
learned answered with the error that kept it from being learned (REFUSE,
``store/ops/handover.py``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from service.contract.learn_wire import (
    STALE,
    UNLEARNED_ANSWER,
    Labelled,
    RequestHead,
    pack_error,
    request_head,
    unpack_examples,
)
from service.engine.batcher import GROUP_MOST, Span
from service.engine.learn_commits import LearnCommits
from service.engine.replica import Replica
from service.engine.replicas import Replicas
from service.errors import NotWriter, OutcomeUnknown, ServiceError, StaleModel, Unavailable
from service.store import Store, StoreError

log = logging.getLogger("perceptron")


class TakenRequests:
    """A worker's side, as a model's writer, of the requests it took."""

    def __init__(
        self,
        store: Store,
        replicas: Replicas,
        commits: LearnCommits,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.replicas = replicas
        self.commits = commits
        self.clock = clock

    def serve_all(self, name: str, taken: list[bytes], in_flight: set[asyncio.Future[Any]]) -> int:
        """Learn the handed-off requests taken (each served by a task added to ``in_flight``):
        each commit answers those it learns (ops/learn.py); or answer each with the error that
        kept it from being learned. Those made for this worker's replica of the model and still
        awaited are queued for its next commit at once, in this turn of the event loop, as one
        (their examples end to end, up to a commit's worth); ``_serve`` looks at the others
        first. Returns the number of examples queued at once."""
        rep = self.replicas.peek(name)
        now_ms = self.clock() * 1000
        queued = 0
        # The first group tops up the commit waiting last, so that the two go as one.
        cap = GROUP_MOST - self.commits.waiting(name)[1] % GROUP_MOST
        examples: list[Labelled] = []  # (joined as one once full)
        spans: list[Span] = []
        size = 0
        for data in taken:
            try:
                head = request_head(data)
            except Exception:
                log.error("model %r's queue held something that is not a learn request", name)
                continue
            if rep is None or head.epoch != rep.epoch or head.deadline_ms < now_ms:
                in_flight.add(asyncio.ensure_future(self._serve(name, data, head)))
                continue
            try:
                request = unpack_examples(data, head, rep.config.n_features)
            except Exception as e:
                in_flight.add(asyncio.ensure_future(self._refuse(name, head.token, e)))
                continue
            if spans and size + len(request) > cap:
                self._queue(rep, Labelled.join(examples), spans, in_flight)
                examples, spans, cap, size = [], [], GROUP_MOST, 0
            spans.append((head.token, size, size + len(request)))
            examples.append(request)
            size += len(request)
            queued += len(request)
        if spans and rep is not None:
            self._queue(rep, Labelled.join(examples), spans, in_flight)
        return queued

    def _queue(
        self, rep: Replica, examples: Labelled, spans: list[Span], in_flight: set[Any]
    ) -> None:
        learned = self.commits.queue(rep, examples, spans)  # (queued now, in this turn)
        in_flight.add(asyncio.ensure_future(self._refuse_unless_learned(rep.name, spans, learned)))

    async def _refuse_unless_learned(
        self, name: str, spans: list[Span], learned: asyncio.Future[Any]
    ) -> None:
        """Once the commit of requests queued as one ends: each that it did not learn is
        answered with the error that kept it from being learned."""
        try:
            await learned
        except Exception as error:
            await asyncio.gather(*(self._refuse(name, token, error) for token, _, _ in spans))

    async def _serve(self, name: str, data: bytes, head: RequestHead) -> None:
        """``_serve_all``'s way for a request it cannot queue at once."""
        token = head.token
        try:
            if head.deadline_ms < self.clock() * 1000:
                # its requester no longer waits: it withdraws it and answers 503, not learned
                await self.store.refuse_learn(name, token, UNLEARNED_ANSWER)
                return
            rep = await self.replicas.get(name)
            if head.epoch != rep.epoch:  # one of the two copies is older than the model
                self.replicas.drop(name)
                rep = await self.replicas.get(name)
                if head.epoch != rep.epoch:
                    raise StaleModel(name)
            # Read with the configuration of the model it was made for, only now known: read
            # with another one's (a replica older than the model), its examples were misread,
            # then learned, and every copy of the model failed to apply them.
            request = unpack_examples(data, head, rep.config.n_features)
            await self.commits.queue(rep, request, [(token, 0, len(request))])
        except Exception as e:
            await self._refuse(name, token, e)

    async def _refuse(self, name: str, token: str, error: BaseException) -> None:
        """Answer a taken request with the error that kept it from being learned."""
        if isinstance(error, NotWriter):
            return  # the lease's holder took it back (ops/parts.ACQUIRE), and learns it
        if isinstance(error, StaleModel):
            answer = pack_error(ServiceError("The model was replaced.", code=STALE))
        elif isinstance(error, OutcomeUnknown | StoreError):
            # The store failed the writer. The answer below reaches the requester only if the
            # request still waits (REFUSE finds it taken, so no commit learned it): not learned.
            log.warning("the writer of model %r could not learn a request: %s", name, error)
            answer = pack_error(
                Unavailable(
                    f"The model store failed while model {name!r}'s writer learned the "
                    "examples; they were not learned: send them again.",
                    code="store_unavailable",
                )
            )
        elif isinstance(error, ServiceError):
            answer = pack_error(error)
        else:
            log.error("learning a handed-off request of model %r failed", name, exc_info=error)
            answer = pack_error(ServiceError("The model's writer failed; this is a bug."))
        # Only if it still waits: a commit whose reply was lost may have learned and answered it.
        with suppress(Exception):  # else its requester withdraws it at its deadline
            await self.store.refuse_learn(name, token, answer)
