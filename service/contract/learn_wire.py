"""Learn requests handed to a model's writer, their examples (``Labelled``), and its answers:
byte layouts. Pure: no I/O.

A worker that does not write a model sends the examples it has already checked, as the
learner holds them, so the writer only decodes arrays:

request: ``b"L" token(22) deadline_ms(int64) epoch(16) n(uint32) sources_length(uint32)``,
then the names of the keys that sent the examples (UTF-8, each after a newline), ``n``
indices into them (uint16), ``n`` class indices (int32) and ``n`` squared norms (float64, as
the requester computed them), then the examples: for a dense model ``n x dim`` float64 values;
for named features ``n`` non-zero counts (int32), every index (int32), every value (float64).

answer: ``b"R"`` then the version just before the request's first example (int64), then per
example the served class index (int32) and whether it updated (uint8): the versions after
each follow as running sums. Or ``b"E"`` and a JSON object ``{status, code, detail}``. Or
``UNLEARNED_ANSWER``: its writer refused it, past its deadline, without learning it. Or
``NOT_QUEUED_ANSWER``: it was never queued, since its requester holds the lease (pushed twice:
one is taken by the wait sent with the hand-over, the other is found by a requester that lost
the hand-over's reply). An answer is always pushed, so a requester that
finds none knows only that its fate is unknown (the answer was evicted, or expired).
"""

from __future__ import annotations

import json
import secrets
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from service.errors import ServiceError, Unavailable
from service.learner import Example
from service.learner.codec import EPOCH_LENGTH
from service.learner.features import Rows

TOKEN_BYTES = 16
TOKEN_LENGTH = 22  # new_token()'s characters: TOKEN_BYTES in URL-safe base64, unpadded
UNLEARNED_ANSWER = b"N"  # the answer to a request refused without being learned, past its deadline
NOT_QUEUED_ANSWER = b"Q"  # left by a hand-over that queued nothing: its requester took the lease
STALE = "stale_model"  # an error answer's code when the model was replaced since the request
_HEAD = struct.Struct(f"<c{TOKEN_LENGTH}sq{EPOCH_LENGTH}sII")
_START = struct.Struct("<q")
_ONE_ANSWER = struct.Struct("<cqiB")  # an answer of one example: its pair as numpy lays it


@dataclass(frozen=True, slots=True)
class Labelled:
    """Examples of one model with their true class indices and the names of the keys that sent
    them, as three columns: what ``/learn`` queues, a worker hands to the model's writer, and a
    commit learns. A packed batch's examples stay one matrix (``Rows``) all the way."""

    xs: Sequence[Example]  # Rows for a packed batch
    ts: list[int]  # true class indices
    sources: list[str]  # the name of the key that sent each example ("" for none)

    def __len__(self) -> int:
        return len(self.ts)

    @classmethod
    def of(cls, xs: Sequence[Example], ts: list[int], source: str = "") -> Labelled:
        """Examples sent by one key."""
        return cls(xs, ts, [source] * len(ts))

    @classmethod
    def join(cls, parts: Sequence[Labelled]) -> Labelled:
        """The parts end to end, in order (a group commit's requests)."""
        if len(parts) == 1:
            return parts[0]
        return cls(
            Rows.join([p.xs for p in parts]),
            [t for p in parts for t in p.ts],
            [s for p in parts for s in p.sources],
        )

    def keep(self, kept: Sequence[bool]) -> Labelled:
        """The examples where ``kept`` is true, in order."""
        at = np.flatnonzero(np.asarray(kept, dtype=bool))
        xs = self.xs
        return Labelled(
            xs.take(at) if isinstance(xs, Rows) else [xs[i] for i in at.tolist()],
            [self.ts[i] for i in at.tolist()],
            [self.sources[i] for i in at.tolist()],
        )


def new_token() -> str:
    """A handed-over request's token: it names the key its answer is pushed to."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def pack_request(token: str, deadline_ms: int, epoch: str, examples: Labelled) -> bytes:
    xs, n = examples.xs, len(examples)
    ts = np.asarray(examples.ts, dtype="<i4")
    names: dict[str, int] = dict.fromkeys(examples.sources, 0)
    if len(names) == 1:  # (the usual case: one key sent them all)
        at = np.zeros(n, dtype="<u2")
    else:
        names = {name: i for i, name in enumerate(names)}
        at = np.fromiter(map(names.__getitem__, examples.sources), "<u2", n)
    sources = "".join(f"\n{name}" for name in names).encode()
    fields = (b"L", token.encode(), deadline_ms, epoch.encode(), n, len(sources))
    head = _HEAD.pack(*fields) + sources + at.tobytes() + ts.tobytes()
    if isinstance(xs, Rows):  # (a packed batch: its matrix as it is)
        sq, values = xs.sq.astype("<f8", copy=False), xs.matrix.astype("<f8", copy=False)
        return b"".join((head, sq.tobytes(), np.ascontiguousarray(values).data.cast("B")))
    sq = np.fromiter((x.sq_norm for x in xs), dtype="<f8", count=n)
    if xs[0].index is None:
        values = np.concatenate([x.values for x in xs]).astype("<f8", copy=False)
        return b"".join((head, sq.tobytes(), values.tobytes()))
    counts = np.fromiter((len(x.values) for x in xs), dtype="<i4", count=n)
    index = np.concatenate([x.index for x in xs if x.index is not None]).astype("<i4")
    values = np.concatenate([x.values for x in xs]).astype("<f8", copy=False)
    return head + sq.tobytes() + counts.tobytes() + index.tobytes() + values.tobytes()


@dataclass(frozen=True, slots=True)
class RequestHead:
    token: str  # names the key its answer is pushed to
    deadline_ms: int  # unix ms past which the requester no longer waits: not learned then
    epoch: str
    n: int  # examples
    sources_length: int  # bytes of the key names that follow the head


def request_head(data: bytes) -> RequestHead:
    """A request's head, read before its examples: the token answers it even when they cannot
    be read, and the epoch names the configuration that reads them."""
    kind, token, deadline_ms, epoch, n, sources_length = _HEAD.unpack_from(data)
    if kind != b"L":
        raise ValueError("not a learn request")
    return RequestHead(token.decode(), deadline_ms, epoch.decode(), n, sources_length)


def unpack_examples(data: bytes, head: RequestHead, dense_dim: int | None) -> Labelled:
    """The examples of the request whose head is ``head`` (``request_head(data)``), each with
    its true class index and the key that sent it; ``dense_dim`` is the model's n_features
    (None: named features)."""
    n, sources_length = head.n, head.sources_length
    at = _HEAD.size
    names = data[at : at + sources_length].decode().split("\n")[1:]
    at += sources_length
    # (struct, not numpy, for the numbers of each example: most requests hold one)
    srcs = [names[i] for i in struct.unpack_from(f"<{n}H", data, at)]
    at += 2 * n
    ts = list(struct.unpack_from(f"<{n}i", data, at))
    at += 4 * n
    sq = np.frombuffer(data, dtype="<f8", count=n, offset=at)
    at += 8 * n
    if dense_dim is not None:
        values = np.frombuffer(data, dtype="<f8", count=n * dense_dim, offset=at)
        # read-only views of the request
        return Labelled(Rows(values.reshape(n, dense_dim), sq), ts, srcs)
    counts = np.frombuffer(data, dtype="<i4", count=n, offset=at)
    at += 4 * n
    total = int(counts.sum())
    index = np.frombuffer(data, dtype="<i4", count=total, offset=at).astype(np.int64)
    at += 4 * total
    values = np.frombuffer(data, dtype="<f8", count=total, offset=at).astype(np.float64)
    cuts = np.cumsum(counts)[:-1]
    xs = [
        Example(v, i, s)
        for v, i, s in zip(np.split(values, cuts), np.split(index, cuts), sq.tolist(), strict=True)
    ]
    return Labelled(xs, ts, srcs)


def pack_answer(
    start: int, served: list[int], updated: list[bool], steps: list[int] | None = None
) -> bytes:
    """A handed-over request's answer: the model's version before its first example, and each
    example's served class and whether it updated (``steps``: the versions each added, where
    a retraining's swap added more than one)."""
    if steps is not None:
        rows = np.empty(len(served), dtype=[("served", "<i4"), ("updated", "u1"), ("step", "<u4")])
        rows["served"], rows["updated"], rows["step"] = served, updated, steps
        return b"S" + _START.pack(start) + rows.tobytes()
    if len(served) == 1:  # (most requests: struct costs less than numpy for one)
        return _ONE_ANSWER.pack(b"R", start, served[0], updated[0])
    pairs = np.empty(len(served), dtype=[("served", "<i4"), ("updated", "u1")])
    pairs["served"], pairs["updated"] = served, updated
    return b"R" + _START.pack(start) + pairs.tobytes()


def unpack_answer(data: bytes) -> tuple[list[int], list[bool], list[int]]:
    """(served class indices, updated flags, the version after each example); raises the
    writer's error for an error answer."""
    if data[:1] == b"E":
        raise error_of(json.loads(data[1:]))
    (start,) = _START.unpack_from(data, 1)
    if data[:1] == b"S":
        rows = np.frombuffer(
            data, dtype=[("served", "<i4"), ("updated", "u1"), ("step", "<u4")], offset=9
        )
        versions = list(accumulate(rows["step"].tolist(), initial=start))[1:]
        return rows["served"].tolist(), rows["updated"].astype(bool).tolist(), versions
    pairs = np.frombuffer(data, dtype=[("served", "<i4"), ("updated", "u1")], offset=9)
    updated = pairs["updated"].astype(bool).tolist()
    versions = list(accumulate(updated, initial=start))[1:]
    return pairs["served"].tolist(), updated, versions


def pack_error(e: ServiceError) -> bytes:
    """The writer's error for a handed-over request; a 503 that says to retry (Unavailable)
    keeps its Retry-After."""
    body: dict[str, object] = {"status": e.status, "code": e.code, "detail": e.message}
    if isinstance(e, Unavailable):
        body["retry_after_s"] = e.retry_after_s
    return b"E" + json.dumps(body).encode()


def error_of(body: dict[str, object]) -> ServiceError:
    """The error ``pack_error`` packed, answered by the requester as the writer would have."""
    detail, code = str(body["detail"]), str(body["code"])
    if "retry_after_s" in body:
        unavailable = Unavailable(detail, code=code)
        unavailable.retry_after_s = int(str(body["retry_after_s"]))
        return unavailable
    e = ServiceError(detail, code=code)
    e.status = int(str(body["status"]))
    return e
