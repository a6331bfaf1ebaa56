"""What one worker process serves with: its store, the models' lifecycle and history, its
replicas, and learning. The app makes one at start-up (``app.state.worker``) and closes it at
shutdown."""

from __future__ import annotations

import time
from collections.abc import Callable

from service.engine.serving import Learning
from service.models.admin import Models
from service.models.history_ops import History
from service.settings import Settings
from service.store import Store


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

    def start(self) -> None:
        """Start watching the store (``Models.watch``)."""
        self.models.start()

    async def close(self) -> None:
        """Stop learning (writers hand their leases back), the watch, and the compactions."""
        await self.learning.close()
        await self.models.close()
        await self.replicas.close()
