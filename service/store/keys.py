"""Redis key names. Every key of one model shares the hash tag ``{name}``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from service.contract.names import TOKEN_RE, valid_name

PREFIX = "pcp"
REGISTRY = f"{PREFIX}:models"
# Set once the 'default' model was made in this store: a deleted default stays deleted.
DEFAULT_MADE = f"{PREFIX}:default-made"


@dataclass(frozen=True, slots=True)
class ModelKeys:
    """The keys of one model. Names are checked where they enter the service
    (``contract/names.py``); this check again, like the tokens', is the store's own guard: no
    key is ever built from a name that could reach into another model's keys."""

    name: str

    def __post_init__(self) -> None:
        if not valid_name(self.name):
            raise ValueError(f"Invalid model name {self.name!r}.")

    @property
    def meta(self) -> str:
        return f"{PREFIX}:{{{self.name}}}:meta"

    @property
    def snap(self) -> str:
        return f"{PREFIX}:{{{self.name}}}:snap"

    @property
    def log(self) -> str:
        return f"{PREFIX}:{{{self.name}}}:log"

    @property
    def series(self) -> str:
        return f"{PREFIX}:{{{self.name}}}:ts"

    @property
    def ring(self) -> str:
        return f"{PREFIX}:{{{self.name}}}:ring"

    @property
    def recent(self) -> str:
        return f"{PREFIX}:{{{self.name}}}:recent"

    @property
    def curve(self) -> str:
        """The learning curve: mistakes up to every few labelled examples (ops/parts.RECORD)."""
        return f"{PREFIX}:{{{self.name}}}:curve"

    @property
    def pend(self) -> str:
        """Bytes of pending predictions by creation time (ops/parts.PENDING)."""
        return f"{PREFIX}:{{{self.name}}}:pend"

    @property
    def deadlines(self) -> str:
        """Pending predictions a default label awaits: their keys, scored by their deadline
        (unix ms); the sweep labels those past it (ops/defaults.py)."""
        return f"{PREFIX}:{{{self.name}}}:dl"

    @property
    def delays(self) -> str:
        """Labels counted by their delay from prediction (protocol.DELAY_BUCKETS_S)."""
        return f"{PREFIX}:{{{self.name}}}:delay"

    @property
    def past(self) -> str:
        """The retained log: update entries older than the snapshot (ops/history.py)."""
        return f"{PREFIX}:{{{self.name}}}:past"

    @property
    def checkpoints(self) -> str:
        """Checkpoints' weights as they were kept before each had a key of its own
        (``checkpoint_weights``): id -> packed bytes, read and let go still."""
        return f"{PREFIX}:{{{self.name}}}:ck"

    def checkpoint_weights(self, id: int) -> str:
        """One checkpoint's packed weights (``ops/blobs.py``; ``checkpoints`` holds those of
        checkpoints made before each had a key of its own)."""
        return f"{self.checkpoints}:{int(id)}"

    def stage(self, token: str) -> str:
        """Weights written in chunks for a script to rename into place (``ops/blobs.py``)."""
        if TOKEN_RE.fullmatch(token) is None:
            raise ValueError("Invalid stage token.")
        return f"{PREFIX}:{{{self.name}}}:stage:{token}"

    @property
    def checkpoint_info(self) -> str:
        """What each checkpoint records: id -> ``protocol.CheckpointInfo``'s text."""
        return f"{PREFIX}:{{{self.name}}}:ckinfo"

    @property
    def checkpoint_tails(self) -> str:
        """The log entries a checkpoint adds to its weights: id -> entries, each after its
        length and a colon."""
        return f"{PREFIX}:{{{self.name}}}:cktail"

    @property
    def writer(self) -> str:
        """The lease of the worker that learns for the model now (ops/handover.py)."""
        return f"{PREFIX}:{{{self.name}}}:writer"

    @property
    def learns(self) -> str:
        """Tokens of the learn requests waiting for the model's writer, oldest first."""
        return f"{PREFIX}:{{{self.name}}}:learns"

    @property
    def hold(self) -> str:
        """Set while the writer's next commit must find the model unmoved: feedback waits."""
        return f"{PREFIX}:{{{self.name}}}:hold"

    @property
    def wake(self) -> str:
        """Where the writer's commit that lets go of ``hold`` wakes the feedback waiting on it."""
        return f"{PREFIX}:{{{self.name}}}:wake"

    @property
    def taken(self) -> str:
        """Tokens of the requests the writer took and has not answered yet."""
        return f"{PREFIX}:{{{self.name}}}:taken"

    @property
    def reqs(self) -> str:
        """Every waiting or taken learn request: token -> request bytes
        (``contract/learn_wire.py``)."""
        return f"{PREFIX}:{{{self.name}}}:reqs"

    def answer(self, token: str) -> str:
        """Where the writer pushes the answer to one handed-off request."""
        if TOKEN_RE.fullmatch(token) is None:
            raise ValueError("Invalid request token.")
        return f"{PREFIX}:{{{self.name}}}:a:{token}"

    @property
    def chal(self) -> str:
        """The challengers (``ops/challenger_states.py``): id -> configuration JSON."""
        return f"{PREFIX}:{{{self.name}}}:chal"

    @property
    def cstate(self) -> str:
        """id -> the challenger's packed state."""
        return f"{PREFIX}:{{{self.name}}}:cstate"

    @property
    def clog(self) -> str:
        """The labels' log: every labelled example since the challengers' states."""
        return f"{PREFIX}:{{{self.name}}}:clog"

    @property
    def cweights(self) -> str:
        """id -> the key of the challenger's packed weights (``challenger_weights``); one
        that has none there holds them in its state (all zeros, or kept before)."""
        return f"{PREFIX}:{{{self.name}}}:cweights"

    def challenger_weights(self, token: str) -> str:
        """One challenger's packed weights, in chunks (``ops/blobs.py``), written once: a
        new state's weights take a new key."""
        if TOKEN_RE.fullmatch(token) is None:
            raise ValueError("Invalid weights token.")
        return f"{PREFIX}:{{{self.name}}}:cw:{token}"

    @property
    def blog(self) -> str:
        """The background learner of a model that retrains at a drift: the examples it learned,
        each a log entry without its ordinal (ops/drift.py's RETRAIN)."""
        return f"{PREFIX}:{{{self.name}}}:blog"

    @property
    def challengers(self) -> tuple[str, str, str]:
        return (self.chal, self.cstate, self.clog)

    @property
    def all(self) -> tuple[str, ...]:
        """Every key of the model but its pending predictions (those expire on their own)."""
        return (
            self.meta,
            self.snap,
            self.log,
            self.series,
            self.ring,
            self.recent,
            self.curve,
            self.pend,
            self.deadlines,
            self.delays,
            self.blog,
        )

    @property
    def history(self) -> tuple[str, ...]:
        """The model's checkpoints and retained log."""
        return (self.past, self.checkpoints, self.checkpoint_info, self.checkpoint_tails)

    @property
    def handover(self) -> tuple[str, ...]:
        """The keys of the learn requests handed to the model's writer, and its lease."""
        return (self.writer, self.learns, self.hold, self.wake, self.taken, self.reqs)

    @property
    def pending_match(self) -> str:
        """A SCAN pattern for every pending prediction of the model (names hold no glob
        character: ``contract/names.py``)."""
        return f"{PREFIX}:{{{self.name}}}:p:*"

    def pending(self, token: str) -> str:
        if TOKEN_RE.fullmatch(token) is None:
            raise ValueError("Invalid prediction token.")
        return f"{PREFIX}:{{{self.name}}}:p:{token}"


@lru_cache(maxsize=4096)
def keys_of(name: str) -> ModelKeys:
    """The keys of the model ``name``, made (and its name checked) once per name."""
    return ModelKeys(name)
