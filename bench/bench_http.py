"""Loopback round trip of the shared HTTP layer (not run by pytest).

Measures, on 127.0.0.1: a small authenticated POST answered 202 by a Falcon app under waitress
(the Raft message path minus the Raft core), over a pooled keep-alive connection and over a fresh
connection per request (the worker's permit-request mode), plus a 1 MiB body.

    .venv/bin/python bench/bench_http.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import falcon

from appliance.http import HttpClient, HttpServer, create_app, read_body

TOKEN = "bench-cluster-token"


class Sink:
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        read_body(req)
        resp.status = falcon.HTTP_202
        resp.data = b""


def measure(label: str, call, count: int) -> None:  # type: ignore[no-untyped-def]
    for _ in range(min(50, count)):
        call()
    samples = []
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - started
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[int(len(samples) * 0.99) - 1]
    print(f"| {label} | {count} | {p50:.3f} | {p99:.3f} | {count / elapsed:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--memory-body-bytes-max", type=int, default=512 * 1024)
    args = parser.parse_args()
    app = create_app(
        routes={"/sink": Sink()},
        credentials={"cluster": TOKEN},
        accepted_roles={"cluster"},
        body_bytes_max=16 * 1024 * 1024,
        surface="bench",
    )
    server = HttpServer(
        app,
        host="127.0.0.1",
        port=0,
        name="bench",
        body_bytes_max=16 * 1024 * 1024,
        memory_body_bytes_max=args.memory_body_bytes_max,
    )
    with server, HttpClient() as http:
        url = f"http://127.0.0.1:{server.port}/sink"
        small = b"x" * 100
        big = b"x" * (1024 * 1024)
        print("| case | requests | p50 ms | p99 ms | req/s (sequential) |")
        print("|---|---|---|---|---|")
        measure(
            "100 B POST, pooled keep-alive",
            lambda: http.post(url, small, bearer=TOKEN),
            args.requests,
        )
        measure(
            "100 B POST, fresh connection",
            lambda: http.post(url, small, bearer=TOKEN, fresh_connection=True),
            args.requests,
        )
        measure(
            "1 MiB POST, pooled keep-alive",
            lambda: http.post(url, big, bearer=TOKEN),
            max(50, args.requests // 20),
        )
        print(f"\nnew TCP connections opened: {http.connections_opened}")


if __name__ == "__main__":
    main()
