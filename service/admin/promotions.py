"""A challenger promoted: it serves from the next request on, on every worker, its weights
exactly as they are; the learner that served stays as a challenger. The model is held while the
challengers are replayed (``store/ops/promote.py``), so no label comes between what is read and
the swap, and every label that waits meanwhile is learned by the promoted learner."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from service.admin.challengers import check_id, served_marks
from service.admin.retention import make_room, prune_quietly
from service.contract.names import check_name
from service.contract.store_protocol import (
    PROMOTE_HOLD_MS,
    RING_SIZE,
    RING_UNKNOWN,
    Meta,
    pending_life_s,
)
from service.contract.store_values import drift_events
from service.engine.replicas import Replicas
from service.engine.standings import Standing, standing, tail_of
from service.engine.tasks import cancel_all
from service.errors import Conflict, InvalidInput, ModelBusy, ModelNotFound
from service.learner import ModelConfig, Weights
from service.learner.challenger import ChallengerState, promotion_refusal
from service.learner.codec import new_epoch, pack_weights
from service.learner.drift_detectors import Status, read_state, state_text
from service.settings import Settings
from service.store import Store
from service.store.ops.challenger_states import Tail
from service.store.ops.promote import Promotion

SWAP_ATTEMPTS = 3  # the model is held: a swap refused means the hold lapsed under a slow read
POLL_S = 0.005  # how often a promotion asks again for a model its writer holds


@dataclass(frozen=True, slots=True)
class Promoted:
    promoted: str  # the id of the challenger that serves now
    demoted: str  # the id the learner that served has among the challengers now
    checkpoint: int  # the checkpoint of the model as it was just before
    config: dict[str, Any]  # the served learner's configuration now


def parse_body(body: Any) -> tuple[str, str]:
    """The challenger to promote, and the id the learner that served takes ('': its default)."""
    if not isinstance(body, dict) or set(body) - {"challenger", "demote_as"}:
        raise InvalidInput(
            'A promotion\'s body is {"challenger": "<id>"}, and "demote_as": the id the learner '
            "that served takes among the challengers (default: served-<the checkpoint made>).",
            code="invalid_promotion",
        )
    id, demoted = body.get("challenger"), body.get("demote_as")
    if not isinstance(id, str) or not isinstance(demoted, str | None):
        raise InvalidInput("'challenger' and 'demote_as' are strings.", code="invalid_promotion")
    return check_id(id), "" if demoted is None else check_id(demoted)


def promotable(model: ModelConfig, challenger: ModelConfig, id: str) -> None:
    """Refuse a challenger whose layout is not the model's (``promotion_refusal``)."""
    why = promotion_refusal(model, challenger)
    if why is not None:
        raise Conflict(f"Challenger {id!r} cannot serve: {why}.", code="promotion_layout")


def ring_of(window: bytes, seen: int) -> bytes:
    """The model's ring of outcomes holding ``window`` as its last, after ``seen`` examples
    (as every ring: one mark for each of the last ``RING_SIZE`` examples, no more)."""
    ring = bytearray(RING_UNKNOWN * min(seen, RING_SIZE))
    for i, mark in enumerate(window):
        ring[(seen - len(window) + i) % RING_SIZE] = mark
    return bytes(ring)


class Promotions:
    """Promotions of every model's challengers, for the route."""

    def __init__(
        self, store: Store, settings: Settings, replicas: Replicas, clock: Callable[[], float]
    ) -> None:
        self.store = store
        self.settings = settings
        self.replicas = replicas
        self.clock = clock

    async def promote(self, name: str, body: Any) -> Promoted:
        """Promote the challenger ``body`` names; a checkpoint of the model is made first."""
        id, demote_as = parse_body(body)
        check_name(name)
        self.replicas.guard()
        now_ms = int(1000 * self.clock())
        for _ in range(SWAP_ATTEMPTS):
            await self._hold(name, id)
            keeping = asyncio.create_task(self._keep_held(name))
            try:
                done = await self._swap(name, id, demote_as, now_ms)
            except BaseException:
                await cancel_all([keeping])
                await self.store.release_promotion(name)
                raise
            await cancel_all([keeping])
            if done is not None:
                self.replicas.drop(name)
                await prune_quietly(self.store, name, self.settings, now_ms)
                return done
            await self.store.release_promotion(name)
        raise ModelBusy(f"Model {name!r} kept changing during the promotion; retry shortly.")

    async def _hold(self, name: str, id: str) -> None:
        """Hold the model, waiting out its writer's hold (one commit) or another promotion's."""
        deadline = asyncio.get_running_loop().time() + PROMOTE_HOLD_MS / 1000
        while (held := await self.store.hold_promotion(name, id)) is not None:
            if asyncio.get_running_loop().time() > deadline:
                raise ModelBusy(f"Model {name!r} stayed held ({held.ms} ms); retry shortly.")
            await asyncio.sleep(POLL_S)

    async def _keep_held(self, name: str) -> None:
        """Renew the promotion's hold every third of its life while the promotion works: a
        large model's challengers take longer to read and write than one hold lasts on a busy
        machine. A worker that dies holds the model PROMOTE_HOLD_MS at most."""
        while await self.store.renew_promotion(name):
            await asyncio.sleep(PROMOTE_HOLD_MS / 3000)

    async def _swap(self, name: str, id: str, demote_as: str, now_ms: int) -> Promoted | None:
        now = await standing(self.store, name)
        if now is None:
            raise ModelNotFound(name)
        rep = await self.replicas.current(name)
        served = now.data.served
        version, seen = int(served[Meta.VERSION]), int(served[Meta.SEEN])
        if rep.epoch != now.data.epoch or rep.weights.version != version:
            return None  # (moved between the two reads: the hold lapsed)
        model = rep.config
        state = now.states.get(id)
        if state is None:
            return None  # (removed meanwhile: the swap says so)
        promotable(model, state.config, id)
        meta = await self.store.read_meta(name)  # (its detector: held, as the rest)
        if meta is None:
            return None
        demoted = _demoted(rep.config, rep.weights, now, meta)
        snap, log_bytes = await self.store.read_sizes(name)
        await make_room(self.store, name, self.settings, now_ms=now_ms, adding=snap + log_bytes)
        if not await self.store.renew_promotion(name):
            return None  # (the hold lapsed while the challengers were replayed)
        promotion = Promotion(
            epoch=now.data.epoch,
            new_epoch=new_epoch(),
            version=version,
            seen=seen,
            gen=now.data.gen,
            position=now.position,
            id=id,
            config=state.config.to_json(),
            weights=pack_weights(state.weights),
            new_version=state.updates,
            new_seen=state.seen,
            new_offset=state.offset,
            mistakes=state.mistakes,
            defaulted=state.defaulted,
            defaulted_mistakes=state.defaulted_mistakes,
            ring=ring_of(state.window, state.seen),
            demoted=demote_as,
            demoted_config=now.data.config,
            demoted_tail=tail_of(demote_as, demoted),
            states=_others(now, id),
            now_ms=now_ms,
            keep_ms=1000 * pending_life_s(model.feedback_ttl_s, model.default_label is not None),
            drift_state=state_text(state.drift_state) if state.drift_state else "",
            drift_events="".join(f"{at} {kind} 0\n" for at, kind in state.drift_events),
        )
        done = await self.store.promote(name, promotion)
        if done is None:
            return None
        checkpoint, demoted_id = done
        return Promoted(id, demoted_id, checkpoint, state.config.to_dict())


def _demoted(
    model: ModelConfig, weights: Weights, now: Standing, meta: dict[str, str]
) -> ChallengerState:
    """The learner that served, as a challenger: its weights, its counts, and its drift
    detector (its state, counts and events, as the model's hash ``meta`` holds them; the
    promoted learner's becomes the served one's, each event's time unknown: 0)."""
    served = now.data.served
    demoted = ChallengerState(
        config=model,
        weights=weights,
        position=now.position,
        mistakes=int(served["mistakes"]),
        window=served_marks(now),
        defaulted=int(served["defaulted"]),
        defaulted_mistakes=int(served["defaulted_mistakes"]),
        since=int(served[Meta.SEEN]),
        served_mistakes=int(served["mistakes"]),
        offset=int(served[Meta.SEEN]) - weights.seen,  # (its learner's own count apart)
    )
    detector = model.drift_detector
    if detector is not None:
        text = meta.get(Meta.DRIFT_STATE, "")
        demoted.drift_state = read_state(detector, text) if text else None
        demoted.drift_warnings = int(meta.get("drift_warnings", 0))
        demoted.drifts = int(meta.get("drifts", 0))
        events = drift_events(meta.get(Meta.DRIFT_EVENTS, ""))
        demoted.drift_events = [(e.at, cast(Status, e.kind)) for e in events]
    return demoted


def _others(now: Standing, id: str) -> list[Tail]:
    return [tail_of(cid, s) for cid, s in now.states.items() if cid != id]
