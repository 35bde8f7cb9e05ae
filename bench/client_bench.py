"""pyrmq client throughput from one Python process, against ``pyrmq
standalone`` in another process (loopback TCP, ASYNC_FLUSH unless --flush).

Cases, for each body size:

- ``awaited``: one ``await producer.send(msg)`` at a time (round-trip bound);
- ``pipelined``: ``producer.send_async`` with a window of outstanding sends;
- ``batched``: ``producer.send_batch`` of --batch messages, a window of
  outstanding batches;
- ``consume``: a PushConsumer (FIRST_OFFSET, batch size 32, coroutine
  listener) reading back what the cases above stored;
- ``poll``: a lite PullConsumer reading the same.

Each case runs for --seconds (after a short warm-up) and reports msgs/s,
client CPU seconds per message, and the broker's CPU share over the window.

    python -m bench.client_bench [--sizes 128,1024] [--seconds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from typing import Any

from bench import broker_load as bl
from pyrmq import (
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _Window:
    def __init__(self, srv: bl.Server) -> None:
        self.srv = srv
        self.t0 = time.perf_counter()
        self.c0 = _cpu()
        self.s0 = srv.cpu_s()

    def result(self, case: str, size: int, n: int) -> dict[str, Any]:
        dt = time.perf_counter() - self.t0
        cpu = _cpu() - self.c0
        return {
            "case": case,
            "body": size,
            "messages": n,
            "seconds": round(dt, 3),
            "msgs_per_s": round(n / dt),
            "client_us_per_msg": round(cpu / max(n, 1) * 1e6, 2),
            "client_cpu_share": round(cpu / dt, 2),
            "broker_cpu_share": round((self.srv.cpu_s() - self.s0) / dt, 2),
        }


async def produce_cases(
    srv: bl.Server, topic: str, size: int, seconds: float, window: int, batch: int
) -> tuple[list[dict[str, Any]], int]:
    body = b"x" * size
    out = []
    total = 0
    async with Producer("bench-producer", srv.namesrv) as p:
        await p.send(Message(topic, body))  # route + connection warm-up
        total += 1

        # awaited
        w = _Window(srv)
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            await p.send(Message(topic, body))
            n += 1
        out.append(w.result("awaited", size, n))
        total += n

        # pipelined single sends, `window` outstanding
        w = _Window(srv)
        n = 0
        end = time.perf_counter() + seconds
        pending: set[asyncio.Future[Any]] = set()
        while time.perf_counter() < end:
            while len(pending) < window:
                pending.add(p.send_async(Message(topic, body)))
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for f in done:
                f.result()
            n += len(done)
        for f in asyncio.as_completed(pending):
            await f
            n += 1
        out.append(w.result("pipelined", size, n))
        total += n

        # batches, a few outstanding
        w = _Window(srv)
        n = 0
        end = time.perf_counter() + seconds
        pending = set()
        bwin = max(2, window // batch)
        while time.perf_counter() < end:
            while len(pending) < bwin:
                pending.add(p.send_async([Message(topic, body) for _ in range(batch)]))
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for f in done:
                f.result()
            n += len(done) * batch
        for f in asyncio.as_completed(pending):
            await f
            n += batch
        out.append(w.result(f"batched({batch})", size, n))
        total += n
    return out, total


async def consume_case(
    srv: bl.Server, topic: str, size: int, expect: int, limit: float
) -> dict[str, Any]:
    got = 0
    done = asyncio.Event()

    async def listener(msgs: list[Any], ctx: Any) -> None:
        nonlocal got
        got += len(msgs)
        if got >= expect:
            done.set()

    c = PushConsumer(
        f"bench-push-{topic}",
        srv.namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        consume_message_batch_max_size=32,
    )
    c.subscribe(topic)
    c.register_message_listener(listener)
    w = _Window(srv)
    await c.start()
    try:
        async with asyncio.timeout(limit):
            await done.wait()
    except TimeoutError:
        pass
    res = w.result("consume(push)", size, got)
    await c.shutdown()
    return res


async def poll_case(
    srv: bl.Server, topic: str, size: int, expect: int, limit: float
) -> dict[str, Any]:
    got = 0
    c = PullConsumer(
        f"bench-poll-{topic}",
        srv.namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        auto_commit=True,
    )
    c.subscribe(topic)
    w = _Window(srv)
    await c.start()
    end = time.perf_counter() + limit
    while got < expect and time.perf_counter() < end:
        got += len(await c.poll(1.0))
    res = w.result("consume(poll)", size, got)
    await c.shutdown()
    return res


async def run(args: argparse.Namespace, srv: bl.Server) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for size in args.sizes:
        topic = f"BenchClient{size}"
        prod, total = await produce_cases(srv, topic, size, args.seconds, args.window, args.batch)
        rows += prod
        rows.append(await consume_case(srv, topic, size, total, args.seconds * 6))
        rows.append(await poll_case(srv, topic, size, total, args.seconds * 6))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="128,1024", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--window", type=int, default=1024, help="outstanding async sends")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    with bl.standalone(args.dir, args.flush) as srv:
        rows = asyncio.run(run(args, srv))
    print(f"pyrmq client, one process, {args.flush}, {os.cpu_count()} CPUs")
    head = ("case", "body", "msgs/s", "client µs/msg", "client CPU", "broker CPU")
    print("".join(f"{h:<16}" if i == 0 else f"{h:>12}" for i, h in enumerate(head)))
    for r in rows:
        print(
            f"{r['case']:<16}{r['body']:>12}{r['msgs_per_s']:>12,}{r['client_us_per_msg']:>12}"
            f"{r['client_cpu_share']:>12}{r['broker_cpu_share']:>12}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"flush": args.flush, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
