"""The cyclic garbage collector of a worker process of ``perceptron serve``: set once its app
is built.

With CPython's defaults a collection runs every 700 allocations of container objects, and
every hundredth walks the whole heap, the modules of FastAPI, pydantic, redis-py and numpy
included: hundreds of thousands of objects that live as long as the process and are never
garbage. A worker learning packed batches allocates thousands of tuples and examples per
request, and a profile of one (py-spy --native, docs/performance.md) put a quarter of a model
writer's CPU in the collector. So the heap the app's start-up built is frozen (moved where no
collection looks: ``gc.freeze``), and collections run after 50,000 allocations instead of 700,
each older generation after 20 of the younger instead of 10. Cycles are still collected, later:
a worker's memory under a stream of failing requests stays flat (measured as the same as with
the defaults; docs/performance.md, figure 12). In-process apps (tests) keep their process's
settings.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 20)  # allocations before a young collection; younger runs per older


def settle() -> None:
    """Collect once, freeze what is left (the app's start-up), and raise the thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
