"""A model's challengers administered: added (from zeros or a copy of the served weights),
removed, and shown beside the served learner (``engine/standings.py`` replays them)."""

from __future__ import annotations

from itertools import count
from typing import Any

from service.contract.names import CHALLENGER_ID_RULE, SERVED, check_name, valid_challenger_id
from service.contract.store_protocol import RING_SIZE, Meta
from service.engine.replicas import Replicas
from service.engine.standings import Standing, fold, tail_of
from service.errors import InvalidInput, ModelBusy, ModelNotFound
from service.learner import ModelConfig
from service.learner.challenger import (
    SETTINGS,
    ChallengerState,
    challenger_config,
    promotion_refusal,
    start_state,
)
from service.learner.config import ConfigError
from service.metrics.figures import known_marks
from service.settings import Settings
from service.store import Store
from service.store.ops.challenger_states import Tail, challenger_not_found

FROM = ("zeros", "served")
ATTEMPTS = 3  # copies of the served weights tried, should the model move under each


def start_tail(id: str, state: ChallengerState, copied: bool) -> Tail:
    """A new challenger's state as the store writes it (from zeros: no weights to write)."""
    tail = tail_of(id, state)
    return tail if copied else Tail(id, tail.head, b"")


def check_id(id: str) -> str:
    """``id``, or a 400 ``invalid_challenger_id`` that says what an id may hold."""
    if not valid_challenger_id(id):
        raise InvalidInput(f"{CHALLENGER_ID_RULE}. Got {id[:80]!r}.", code="invalid_challenger_id")
    return id


def parse_body(model: ModelConfig, body: Any) -> tuple[ModelConfig, bool]:
    """The challenger's configuration and whether it starts from the served weights."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise InvalidInput("A challenger's body is a JSON object.", code="invalid_challenger")
    unknown = sorted(set(body) - {*SETTINGS, "from"})
    if unknown:
        raise InvalidInput(
            f"A challenger takes {', '.join(SETTINGS)} and 'from' (its classes and features "
            f"are the model's); got {unknown}.",
            code="invalid_challenger",
        )
    start = body.get("from", "zeros")
    if start not in FROM:
        raise InvalidInput(
            f"'from' is 'zeros' (the default) or 'served'. Got {start!r}.",
            code="invalid_challenger",
        )
    try:
        config = challenger_config(model, {k: v for k, v in body.items() if k != "from"})
    except (ConfigError, TypeError) as e:
        why = str(e)
        if isinstance(e, ConfigError) and e.parameter == "multiclass" and "multiclass" not in body:
            why += " (the model's 'multiclass', which the challenger takes unless it gives one)"
        raise InvalidInput(why, code="invalid_config") from e
    # (a copy is made only into the same rows; two classes have one row in every layout)
    if start == "served" and not model.binary and config.multiclass != model.multiclass:
        raise InvalidInput(
            f"'from': 'served' copies the served weights, whose rows are those of "
            f"'multiclass': {model.multiclass!r}; this challenger is {config.multiclass!r}.",
            code="invalid_challenger",
        )
    return config, start == "served"


class Challengers:
    """The challengers of every model, for the routes."""

    def __init__(self, store: Store, settings: Settings, replicas: Replicas) -> None:
        self.store = store
        self.settings = settings
        self.replicas = replicas
        self.standings = replicas.standings

    async def add(self, name: str, id: str, body: Any) -> dict[str, Any]:
        """Add challenger ``id``; what ``show`` answers for it."""
        check_id(id)
        for _ in range(ATTEMPTS):
            rep = await self.replicas.current(check_name(name))
            config, copied = parse_body(rep.config, body)
            state = start_state(config, rep.weights if copied else None)
            version = rep.weights.version if copied else None
            position = await self.store.add_challenger(
                name,
                epoch=rep.epoch,
                id=id,
                config=config.to_json(),
                tail=start_tail(id, state, copied),
                version=version,
                most=self.settings.max_challengers,
            )
            if position is not None:
                state.position = position
                return figures(id, state, rep.config)
        raise ModelBusy(f"Model {name!r} moved under every copy of its weights; retry shortly.")

    async def remove(self, name: str, id: str) -> None:
        await self.store.remove_challenger(check_name(name), check_id(id))

    async def standing(self, name: str) -> Standing:
        now = await self.standings.current(check_name(name))
        if now is None:
            raise ModelNotFound(name)
        if now.logged >= self.settings.compact_every and await fold(self.store, name, now):
            now = await self.standings.current(name)  # (as it stands after the await)
            if now is None:
                raise ModelNotFound(name)
        return now

    async def show(self, name: str) -> dict[str, Any]:
        """The served learner and each challenger, side by side (their weights:
        ``api/model_answers.challengers_body``)."""
        now = await self.standing(name)
        return shown_challengers(name, now)

    async def standing_with(self, name: str, id: str) -> Standing:
        """``standing``, with challenger ``id`` among the states (else 404)."""
        check_id(id)
        now = await self.standing(name)
        if id not in now.states:
            raise challenger_not_found(name, id)
        return now

    async def show_one(self, name: str, id: str) -> dict[str, Any]:
        """Challenger ``id`` as ``show`` lists it."""
        now = await self.standing_with(name, id)
        return figures(id, now.states[id], served_config(now))


def shown_challengers(name: str, now: Standing) -> dict[str, Any]:
    """The served learner and each challenger, side by side."""
    model = served_config(now)
    return {
        "model": name,
        # (while it has challengers, every label the model counts is in their log)
        "labels": now.position if now.states else int(now.data.served[Meta.SEEN]),
        "served": served_figures(now),
        "challengers": [figures(id, s, model) for id, s in now.states.items()],
    }


def served_config(now: Standing) -> ModelConfig:
    return ModelConfig.from_json(now.data.config)


def figures(id: str, state: ChallengerState, model: ModelConfig) -> dict[str, Any]:
    """A challenger's figures, and whether it can serve the model of configuration ``model``
    (``promotable``; ``not_promotable``: why not)."""
    shown: dict[str, Any] = {"promotable": True}
    why = promotion_refusal(model, state.config)
    if why is not None:
        shown = {"promotable": False, "not_promotable": f"{why[0].upper()}{why[1:]}."}
    return shown | {
        "id": id,
        "config": state.config.to_dict(),
        "since": state.position - state.seen,
        "seen": state.seen,
        "mistakes": state.mistakes,
        "served_mistakes": state.served_mistakes,
        "updates": state.updates,
        "drift_warnings": state.drift_warnings,
        "drifts": state.drifts,
        "mistake_rate": state.rates(),
        "curve": {
            "every": state.every,
            "points": [
                {"examples": k, "mistakes": m, "rate": m / k}
                for k, m in zip(count(state.since + state.every, state.every), state.curve)
            ],
        },
    }


def served_marks(now: Standing) -> bytes:
    """The served learner's last outcomes, oldest first (at most RING_SIZE; those the ring
    knows)."""
    return known_marks(now.data.ring, int(now.data.served[Meta.SEEN]), RING_SIZE, RING_SIZE)


def served_figures(now: Standing) -> dict[str, Any]:
    """The served learner's counters: every label it was given, its mistakes at prediction."""
    served = now.data.served
    seen, mistakes = int(served[Meta.SEEN]), int(served["mistakes"])
    marks = served_marks(now)

    def rate(m: bytes) -> float | None:
        return m.count(b"1") / len(m) if m else None

    return {
        "id": SERVED,
        "config": served_config(now).to_dict(),
        "seen": seen,
        "mistakes": mistakes,
        "updates": int(served[Meta.VERSION]),
        "mistake_rate": {
            "all": mistakes / seen if seen else None,
            "last_100": rate(marks[-100:]),
            "last_1000": rate(marks),
        },
    }
