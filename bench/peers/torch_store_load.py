"""Rendezvous-load peer: torch.distributed's TCPStore (the store torchrun and c10d rendezvous use),
driven like bench/rendezvous drives hvd-rendezvous: K client processes on keep-alive connections,
each doing PUT (set) then GET (get) of its own keys for SECONDS; one TCPStore server in this process.

Usage: /usr/bin/python3 torch_store_load.py K SECONDS [VALUE_BYTES]
Prints one JSON line: requests/s over all clients, p50 and p99 latency of single requests (ms).
The clients are Python processes: each request also pays the interpreter's call overhead, measured
separately as client_overhead_us (the same calls against an in-process HashStore).
"""
import datetime
import json
import multiprocessing as mp
import sys
import time

import torch.distributed as dist


def client(port, idx, seconds, value, start, out):
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
    lat, n, i = [], 0, 0
    start.wait()
    end = time.perf_counter() + seconds
    while True:
        key = f"c{idx}/k{i % 1000}"
        t0 = time.perf_counter()
        store.set(key, value)
        t1 = time.perf_counter()
        store.get(key)
        t2 = time.perf_counter()
        lat += [t1 - t0, t2 - t1]
        n += 2
        i += 1
        if t2 >= end:
            break
    out.put((n, t2 - (end - seconds), lat[:: max(1, len(lat) // 20000)]))


def overhead_us(value, reps=20000):
    store = dist.HashStore()
    t0 = time.perf_counter()
    for i in range(reps):
        store.set(f"k{i % 1000}", value)
        store.get(f"k{i % 1000}")
    return (time.perf_counter() - t0) / (2 * reps) * 1e6


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: torch_store_load.py K SECONDS [VALUE_BYTES]")
    k, seconds = int(sys.argv[1]), float(sys.argv[2])
    value = b"x" * (int(sys.argv[3]) if len(sys.argv) > 3 else 64)
    server = dist.TCPStore("127.0.0.1", 0, k + 1, True, timeout=datetime.timedelta(seconds=30),
                           wait_for_workers=False)
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=client, args=(server.port, i, seconds, value, start, out)) for i in range(k)]
    for p in procs:
        p.start()
    time.sleep(0.5)  # every client connected before the clock starts
    start.set()
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    total = sum(r[0] for r in results)
    elapsed = max(r[1] for r in results)
    lat = sorted(x for r in results for x in r[2])
    print(json.dumps({"bench": "load", "subject": "torch_tcpstore", "clients": k, "value_bytes": len(value),
                      "rps": total / elapsed, "p50_ms": lat[len(lat) // 2] * 1e3,
                      "p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
                      "client_overhead_us": overhead_us(value)}), flush=True)


if __name__ == "__main__":
    main()
