"""What one worker process serves with: its store, the models' lifecycle and history, its
replicas, and learning. The app makes one at start-up (``app.state.worker``) and closes it at
shutdown."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from service.admin.challengers import Challengers
from service.admin.model_history import History
from service.admin.models import Models
from service.admin.promotions import Promotions
from service.engine.learning import Learning
from service.engine.tasks import cancel_all
from service.settings import Settings
from service.store import Store

SWEEP_TASK = "default-label sweep"  # the sweep's task name (a probe of requests leaves it out)
SWEEP_STOP_S = 5.0  # the longest the default-label sweep's last round is waited for


class Worker:
    def __init__(
        self, store: Store, settings: Settings, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.settings = settings
        self.models = Models(store, settings, clock)
        self.history = History(self.models)
        self.replicas = self.models.replicas
        self.learning = Learning(store, settings, self.replicas, clock)
        self.challengers = Challengers(store, settings, self.replicas)
        self.promotions = Promotions(store, settings, self.replicas, clock)
        self._sweep: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start watching the store (``Models.watch``) and sweeping defaults
        (``DefaultLabels``)."""
        self.models.start()
        self._sweep = asyncio.create_task(self.learning.defaults.run(), name=SWEEP_TASK)

    async def close(self) -> None:
        """Stop the sweep, learning (writers hand their leases back), the watch, and the
        compactions."""
        if self._sweep is not None:
            self.learning.defaults.stop()
            await asyncio.wait({self._sweep}, timeout=SWEEP_STOP_S)
            await cancel_all([self._sweep])  # (done by now, but for a store call that hangs)
        await self.learning.close()
        await self.models.close()
        await self.replicas.close()
