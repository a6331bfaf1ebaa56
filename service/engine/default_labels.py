"""The sweep of this worker: predictions whose wait ran out with no label, learned with their
model's default label (``store/ops/defaults.py``, one atomic script per call, so that any
number of workers sweep together and each prediction is labelled once)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

from service.contract.store_protocol import DEFAULTS_PER_SWEEP, pending_life_s
from service.engine.learn_commits import time_bucket
from service.engine.replicas import Replicas
from service.errors import ServiceError
from service.learner import ModelConfig
from service.settings import Settings
from service.store import Store, StoreError

log = logging.getLogger("perceptron")

SWEEP_S = 0.5  # how often the models with a default label are swept
REFRESH_S = 5.0  # how often the models are listed again (others' models, made or changed)
MOST_ROUNDS = 64  # sweeps of one model in a row, at most, before the next model's turn


@dataclass(frozen=True, slots=True)
class Defaulting:
    """What a sweep of one model needs: its epoch, its default class, its records' life, its
    drift detector."""

    epoch: str
    default: int
    life_s: int
    detector: str = ""


def defaulting(epoch: str, config: ModelConfig) -> Defaulting | None:
    default = config.default_index
    if default is None:
        return None
    return Defaulting(
        epoch, default, pending_life_s(config.feedback_ttl_s, True), config.drift_spec
    )


class DefaultLabels:
    """The models this worker sweeps: those with a default label, found by listing the store
    every REFRESH_S, and at once those this worker predicts with."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        replicas: Replicas,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.settings = settings
        self.replicas = replicas
        self.clock = clock
        self.models: dict[str, Defaulting] = {}
        self._listed_at = -REFRESH_S
        self._read: dict[str, tuple[str, Defaulting | None]] = {}  # by model: at which epoch
        self._noted = asyncio.Event()  # a model with a default label newly noted, or stop()
        self._stopped = False

    def note(self, name: str, epoch: str, config: ModelConfig) -> None:
        """A model this worker just predicted with: swept from now on, if it has a default."""
        known = defaulting(epoch, config)
        if known is not None and self.models.get(name) != known:
            self.models[name] = known
            self._noted.set()

    async def refresh(self) -> None:
        """The models with a default label, listed anew: each model's epoch and configuration
        in one round trip, a configuration read again only when its epoch moved."""
        names = await self.store.model_names()
        found: dict[str, Defaulting] = {}
        read: dict[str, tuple[str, Defaulting | None]] = {}
        for name, got in zip(names, await self.store.configs(names), strict=True):
            if got is None:
                continue
            epoch, config = got
            known = self._read.get(name)
            if known is None or known[0] != epoch:
                try:
                    known = (epoch, defaulting(epoch, ModelConfig.from_json(config)))
                except (ValueError, TypeError):
                    continue  # an unreadable model: Models.list_models logs it
            read[name] = known
            if known[1] is not None:
                found[name] = known[1]
        self._read, self.models = read, found

    async def sweep(self, name: str, known: Defaulting) -> int:
        """Sweep one model until none is due (or MOST_ROUNDS); how many it labelled."""
        labelled = 0
        for _ in range(MOST_ROUNDS):
            now = self.clock()
            swept = await self.store.apply_defaults(
                name,
                epoch=known.epoch,
                default=known.default,
                life_s=known.life_s,
                when=time_bucket(self.settings, now),
                now_ms=int(1000 * now),
                most=DEFAULTS_PER_SWEEP,
                detector=known.detector,
            )
            labelled += swept.labelled
            if swept.log_length >= 0 or swept.label_log >= 0:
                self.replicas.compact_after(name, swept.log_length, swept.label_log)
            if not swept.more:
                break
        return labelled

    async def sweep_all(self) -> int:
        """One round: the models listed again when due, then each swept."""
        if self.clock() - self._listed_at >= REFRESH_S:
            self._listed_at = self.clock()
            await self.refresh()
        labelled = 0
        for name, known in list(self.models.items()):
            try:
                labelled += await self.sweep(name, known)
            except ServiceError:  # deleted, or made anew: listed again at the next round
                self.models.pop(name, None)
                self._listed_at = -REFRESH_S
            except Exception as e:  # StaleModel, the store away: the next round tries again
                if not isinstance(e, StoreError):
                    self._listed_at = -REFRESH_S
                log.debug("sweeping model %r failed: %s", name, e)
        return labelled

    async def run(self) -> None:
        """Sweep every SWEEP_S while some model has a default label; else only list the
        models every REFRESH_S, or sweep at once when this worker predicts with one."""
        while not self._stopped:
            try:
                await self.sweep_all()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the store away: look again later
                log.debug("the default-label sweep failed: %s", e)
            self._noted.clear()
            if self._stopped:
                break
            with suppress(TimeoutError):
                async with asyncio.timeout(SWEEP_S if self.models else REFRESH_S):
                    await self._noted.wait()

    def stop(self) -> None:
        """End ``run`` once its sweep in flight ends (a cancellation could be lost in a store
        call that swallows it, and leave it waiting)."""
        self._stopped = True
        self._noted.set()
