"""A client of VW's daemon for the benchmark; prints one JSON line.

python vw_client.py stream HOST PORT FILE          # every line of FILE over one connection
python vw_client.py rr HOST PORT FILE SECONDS      # one line, wait for its answer, repeat
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time


def stream(host: str, port: int, data: bytes) -> dict[str, float]:
    n = data.count(b"\n")
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    got = 0

    def read() -> None:
        nonlocal got
        while got < n:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += chunk.count(b"\n")

    reader = threading.Thread(target=read)
    t0 = time.perf_counter()
    reader.start()
    s.sendall(data)
    reader.join(timeout=120)
    elapsed = time.perf_counter() - t0
    s.close()
    return {"examples": got, "seconds": elapsed, "per_s": got / elapsed}


def request_response(host: str, port: int, lines: list[bytes], seconds: float) -> dict[str, float]:
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = s.makefile("rb")
    n, i, lat = 0, 0, []
    t0 = time.perf_counter()
    end = t0 + seconds
    now = t0
    while now < end:
        s.sendall(lines[i])
        f.readline()
        t1 = time.perf_counter()
        lat.append(t1 - now)
        now = t1
        n += 1
        i = (i + 1) % len(lines)
    elapsed = now - t0
    s.close()
    lat.sort()
    return {
        "examples": n,
        "seconds": elapsed,
        "per_s": n / elapsed,
        "p50_us": lat[len(lat) // 2] * 1e6,
        "p99_us": lat[int(len(lat) * 0.99)] * 1e6,
    }


def main() -> int:
    mode, host, port, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with open(path, "rb") as fh:
        data = fh.read()
    if mode == "stream":
        out = stream(host, port, data)
    else:
        out = request_response(host, port, data.splitlines(keepends=True), float(sys.argv[5]))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
