"""The store's operations, one module each: its Lua script, with its KEYS and ARGV named once
(``script.py``), and its typed call, which reads the script's answer as a ``Status``. The
``Store`` (``redis_store.py``) runs them, each as a method of its own. Every change to a model
happens inside one of these scripts, atomically.

Per model (all keys share the hash tag ``{name}``, so a script may touch them all, and each is
a property of ``ModelKeys``): ``meta`` (hash: config, epoch, counters, confusion cells),
``snap`` (string: packed weights at version ``snapv``), ``log`` (list: update entries for
versions ``snapv+1 .. version``), one ``pending`` string per prediction awaiting its label,
``series``, ``ring``, ``recent`` and ``curve`` (what the metrics read), ``pend`` (pending bytes),
``deadlines`` (the pending predictions a default label awaits, by deadline: ``defaults.py``),
``delays`` (labels counted by their delay from prediction),
and the keys of its writer (``learn.py``). The names of every field are ``protocol.Meta``'s,
``protocol.Field``'s and the counters'; the scripts get them, and Status, as Lua locals
(``protocol.LUA``).

The learning curve, ``curve``, holds the mistakes made up to every ``every``-th labelled
example: field ``<k>`` = mistakes among the first ``k`` labelled examples, for ``k`` a multiple
of ``every``. It keeps at most ``CURVE_POINTS`` points: when one more would not fit, ``every``
doubles and the points that are not multiples of it go. It is written by the scripts that count
mistakes, in the same step, so each point is exactly the count the ``mistakes`` counter had
after that example (``parts.RECORD``).

A pending prediction is ``learner/codec.py``'s record: ``"P" .. epoch .. served .. bitmap ..
payload``, where ``bitmap`` holds one ``0``/``1`` per class: whether learning that class updates
the weights; the scripts read it at the offsets ``protocol.LUA`` declares. Once answered it
becomes ``"A" .. epoch .. "|" .. t .. "|" .. mistake .. "|" .. updated .. "|" .. version``, then
``DEFAULTED`` when its label was the model's default (written by ``labelling.LABEL``, read by
``feedback.py``). A log entry is ``codec.entry_head`` then the
record.

``meta`` also keeps ``snaplen``, the length of ``snap`` (0: no snapshot, all zeros), and the log
always holds ``version - snapv`` entries: the scripts that sync a worker check both
(``parts.SYNC``), so a model whose keys were evicted or deleted by hand is refused, never
served from zeros.
"""

import importlib
import pkgutil
from types import ModuleType

from service.store.script import Script

# Every module of this package (the operations, and the Lua they share), and every script they
# declare: what the store registers. The operations themselves are listed once, as the
# ``Store``'s methods (``redis_store.py``).
MODULES: tuple[ModuleType, ...] = tuple(
    importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)
)
SCRIPTS: tuple[Script, ...] = tuple(
    {s.name: s for m in MODULES for s in vars(m).values() if isinstance(s, Script)}.values()
)
# Those sent behind a blocking wait, loaded on each new connection (store/connect.py).
WAITED: tuple[Script, ...] = tuple(s for s in SCRIPTS if s.waited)
