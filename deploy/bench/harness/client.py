"""HTTP calls to the service (and the floor) outside of wrk: set-up, checks, prediction ids;
``call`` and ``send`` for a service started without keys (``servers.serve``)."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from harness.common import API_KEY, BATCH


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def request(
    port: int, method: str, path: str, body: bytes | None = None, timeout: float = 60.0
) -> tuple[int, bytes]:
    """One request to 127.0.0.1:``port`` with the benchmark's API key: (status, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def put_model(port: int, name: str, spec: dict[str, Any]) -> None:
    status, body = request(port, "PUT", f"/models/{name}", dumps(spec))
    if status not in (200, 201):
        raise SystemExit(f"PUT /models/{name}: {status} {body[:300]!r}")


def check_accepted(port: int, path: str, body: bytes, what: str) -> None:
    """Fail unless ``body`` is answered 200: every body is checked before wrk fires it."""
    status, out = request(port, "POST", path, body)
    if status != 200:
        raise SystemExit(f"{what}: {status} {out[:300]!r}")


def predict_batches(
    port: int, model: str, rows: Sequence[Any], n: int, clients: int = 4
) -> list[dict[str, Any]]:
    """``n`` predictions through /predict/batch (bodies of 1000, ``clients`` at once)."""
    bodies = []
    for start in range(0, n, BATCH):
        feats = [rows[(start + i) % len(rows)] for i in range(min(BATCH, n - start))]
        bodies.append(dumps({"model": model, "features": feats}))

    def post(body: bytes) -> list[dict[str, Any]]:
        status, data = request(port, "POST", "/predict/batch", body, timeout=120)
        if status != 200:
            raise SystemExit(f"/predict/batch: {status} {data[:300]!r}")
        preds: list[dict[str, Any]] = orjson.loads(data)["predictions"]
        return preds

    with ThreadPoolExecutor(clients) as pool:
        return [p for chunk in pool.map(post, bodies) for p in chunk]


def call(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One request without a key to 127.0.0.1:``port``, ``body`` as JSON: (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"content-type": "application/json"})
    r = conn.getresponse()
    out = r.status, r.read()
    conn.close()
    return out


def send(port: int, batches: list[bytes], until: float) -> tuple[int, int, dict[int, int]]:
    """POST the batches to /learn/batch in turn, back to back on one keep-alive connection,
    until ``until``: (answers 200, updates they acknowledged, other statuses by count)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"content-type": "application/json"}
    sent = ok = updates = 0
    statuses: dict[int, int] = {}
    while time.time() < until:
        conn.request("POST", "/learn/batch", body=batches[sent % len(batches)], headers=headers)
        r = conn.getresponse()
        data = r.read()
        sent += 1
        if r.status == 200:
            ok += 1
            updates += sum(json.loads(data)["updated"])
        else:
            statuses[r.status] = statuses.get(r.status, 0) + 1
    conn.close()
    return ok, updates, statuses
