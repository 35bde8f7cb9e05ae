"""pyrmq client throughput and latency from one Python process, against
``pyrmq standalone`` in another process (loopback TCP, ASYNC_FLUSH unless
--flush SYNC_FLUSH).

The cases are bench._e2e's, the same ones bench.peers runs against NATS
JetStream, Redis Streams and RabbitMQ streams, for each body size:

- ``awaited``: one ``await producer.send(msg)`` at a time; msgs/s and the
  round-trip p50 / p99 / p99.9;
- ``pipelined``: ``producer.send_async`` with a window of unacknowledged sends;
- ``batched``: ``producer.send_async`` of --batch messages (one
  SEND_BATCH_MESSAGE each), the same window counted in messages;
- ``oneway``: ``producer.send_oneway`` for the case's time, counted at the
  broker (GET_MAX_OFFSET) until everything sent is stored;
- ``consume(push)`` and ``consume(poll)``: a topic preloaded with a fixed
  number of messages, read back by a PushConsumer (coroutine listener, 32 per
  call) and by a lite PullConsumer's ``poll()``, each in its own group from
  the first offset; timed from the first delivery to the last;
- ``e2e``: produce-to-consume latency: ``send_async`` at fixed rates with the
  send time in the body, a PushConsumer measuring arrival.

Each case is bounded by a message count and wall time (bench._e2e.Budget)
and reports msgs/s, client CPU per message and the broker's CPU share.

    python -m bench.client_bench [--quick] [--sizes 128,1024,16384] [--seconds 5]
                                 [--flush SYNC_FLUSH] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from bench import _e2e, _report
from bench import broker_load as bl
from bench._args import work_dir
from bench._e2e import Budget, ConsumeClock, Flow, LatencyProbe
from pyrmq import (
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)

QUEUES = 4
#: the oneway case waits while its connection holds more than this, unsent
ONEWAY_HIGH_WATER = 1 << 20
#: the oneway case stops waiting for the store after this long without growth
#: (counted once its connection has written everything), or after DRAIN_S
STALL_S = 2.0
DRAIN_S = 120.0


def _ok(result: Any) -> bool:
    return getattr(getattr(result, "send_status", None), "name", "") == "SEND_OK"


class PyrmqAdapter:
    """bench._e2e.Adapter for pyrmq's asyncio Producer and consumers."""

    def __init__(self, srv: bl.Server, producer: Producer, one_connection: bool = True) -> None:
        self.srv = srv
        self.p = producer
        #: the e2e case produces on its consumer's connection (listen())
        self.one_connection = one_connection
        #: the producer fire() sends with while a listen() runs on one connection
        self._fire_with: Producer | None = None
        try:
            v = version("pyrmq")
        except PackageNotFoundError:
            v = "dev"
        self.client = f"pyrmq {v} (asyncio)"
        self._n = 0

    async def new_stream(self, tag: str) -> str:
        self._n += 1
        topic = f"Bench{tag}N{self._n}"
        await asyncio.to_thread(bl.create_topic, self.srv.broker, topic, QUEUES)
        await asyncio.to_thread(bl.wait_route, self.srv.namesrv, topic)
        return topic

    async def drop_stream(self, stream: str) -> None:
        """Topics stay; the whole store is removed with the broker."""

    def awaited_send(self, stream: str, body: bytes) -> Callable[[], Awaitable[Any]]:
        send = self.p.send

        async def one() -> None:
            r = await send(Message(stream, body))
            if not _ok(r):
                raise RuntimeError(f"send: {r}")

        return one

    def pipelined_submit(
        self, stream: str, body: bytes, batch: int
    ) -> tuple[Callable[[Flow], Awaitable[None]], int]:
        send_async = self.p.send_async

        async def submit(flow: Flow) -> None:
            # acked from send_async's callback, as Java's SendCallback: a
            # done-callback on each future would cost a closure and a loop
            # handle per message, the harness's, not the client's
            send_async(Message(stream, body), flow.on_result)

        return submit, 1

    def batched_submit(
        self, stream: str, body: bytes, batch: int
    ) -> Callable[[Flow], Awaitable[None]] | None:
        send_async = self.p.send_async

        async def submit(flow: Flow) -> None:
            flow.track(send_async([Message(stream, body) for _ in range(batch)]), batch, _ok)

        return submit

    def consumers(self) -> dict[str, Callable[[str, int, Budget], Awaitable[ConsumeClock]]]:
        return {"consume(push)": self.consume_push, "consume(poll)": self.consume_poll}

    async def consume_push(self, stream: str, n: int, budget: Budget) -> ConsumeClock:
        clock = ConsumeClock()
        done = asyncio.Event()

        async def listener(msgs: list[Any], ctx: Any) -> None:
            clock.saw(len(msgs))
            if clock.n >= n:
                done.set()

        c = await self._push_consumer(f"bench-push-{stream}", stream, listener)
        try:
            async with asyncio.timeout(budget.consume_seconds):
                await done.wait()
        except TimeoutError:
            pass
        finally:
            await c.shutdown()
        return clock

    async def consume_poll(self, stream: str, n: int, budget: Budget) -> ConsumeClock:
        clock = ConsumeClock()
        c = PullConsumer(
            f"bench-poll-{stream}",
            self.srv.namesrv,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            auto_commit=True,
        )
        c.subscribe(stream)
        await c.start()
        end = time.perf_counter() + budget.consume_seconds
        try:
            while clock.n < n and time.perf_counter() < end:
                got = len(await c.poll(1.0))
                if got:
                    clock.saw(got)
        finally:
            await c.shutdown()
        return clock

    async def listen(self, stream: str, probe: LatencyProbe) -> Callable[[], Awaitable[None]]:
        """A PushConsumer handing each message to probe; fire() then sends
        with a producer on the consumer's client (one_connection): one
        connection to the broker for producing and consuming, as a
        RocketMQ Java or C++ client has in one process (one client
        instance, one connection a broker) and as the NATS adapter has.
        The broker answers a send and the pull it woke in one write
        (bench/README.md, "One connection for producing and consuming")."""

        async def listener(msgs: list[Any], ctx: Any) -> None:
            for m in msgs:
                probe.saw(m.body)

        c = await self._push_consumer(f"bench-lat-{stream}", stream, listener)
        if not self.one_connection:
            return c.shutdown
        p = Producer(f"bench-lat-{stream}", None, client_instance=c.client)
        try:
            await p.start()
        except BaseException:
            await c.shutdown()
            raise
        self._fire_with = p

        async def stop() -> None:
            self._fire_with = None
            try:
                await p.shutdown()
            finally:
                await c.shutdown()

        return stop

    async def _push_consumer(
        self, group: str, stream: str, listener: Callable[..., Awaitable[None]]
    ) -> PushConsumer:
        """A started PushConsumer of `stream` from its first offset, 32
        messages per listener call."""
        c = PushConsumer(
            group,
            self.srv.namesrv,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            consume_message_batch_max_size=32,
        )
        c.subscribe(stream)
        c.register_message_listener(listener)
        await c.start()
        return c

    def fire(self, stream: str, flow: Flow) -> Callable[[bytes], Awaitable[None]]:
        send_async = (self._fire_with or self.p).send_async

        async def send(body: bytes) -> None:
            flow.track(send_async(Message(stream, body)), 1, _ok)

        return send

    async def oneway(
        self, label: str, size: int, body: bytes, budget: Budget
    ) -> list[dict[str, Any]]:
        """send_oneway for the case's time, from a producer of its own; the
        rate counts messages stored at the broker, up to when the last one
        was.

        ``send_oneway`` never suspends once the route and the connection
        are cached: the connection queues each frame for the end of the
        event loop's iteration. A loop that never yields therefore keeps
        every frame in this process, and its one write at the end (about
        500 MB in the reference run) held the event loop, and the GIL, for
        seconds. The broker saw nothing meanwhile, the stall detector gave
        up after 2 s and the row said 0 msgs/s, "524,287 of 524,288 not
        stored". So, as ``pyrmq bench produce --mode oneway`` does, this
        loop yields after every send and waits while the connection holds
        more than ONEWAY_HIGH_WATER bytes the kernel has not taken: `sent`
        counts frames handed to the socket. Afterwards it waits, with the
        event loop running, until the connection has written everything
        and the store has every message, or the count stops growing for
        STALL_S once everything is written (bounded by DRAIN_S)."""
        topic = await self.new_stream(f"ow{size}")
        await self.awaited_send(topic, body)()
        n_max = budget.produce_msgs(size)
        async with Producer("bench-oneway", self.srv.namesrv) as p:
            await p.send(Message(topic, body))  # route and connection
            base = 2  # the two acknowledged sends above
            unsent = self._unsent_bytes_of(p)
            w = _e2e.CpuWindow(self.srv.cpu_s)
            send_oneway = p.send_oneway
            start = time.perf_counter()
            end = start + budget.seconds
            sent = 0
            while sent < n_max and time.perf_counter() < end:
                await send_oneway(Message(topic, body))
                sent += 1
                await asyncio.sleep(0)
                while unsent() > ONEWAY_HIGH_WATER and time.perf_counter() < end:
                    await asyncio.sleep(0.001)
            t_sent = time.perf_counter()
            stored, t_last, drained = await self._wait_stored(topic, sent + base, unsent)
            row = w.row(
                "oneway",
                size,
                stored - base,
                t_last - start,
                sent=sent,
                lost=sent + base - stored,
                send_s=round(t_sent - start, 4),
                drain_s=round(drained - t_sent, 4),
            )
        return [row]

    def _unsent_bytes_of(self, p: Producer) -> Callable[[], int]:
        """Bytes p's connection to the broker holds that the kernel has not
        taken yet (the transport's buffer; 0 once closed)."""

        def unsent() -> int:
            conn = p.client.remoting.open_connection(self.srv.broker)
            t = conn.transport if conn is not None else None
            return t.get_write_buffer_size() if t is not None else 0

        return unsent

    async def _wait_stored(
        self, topic: str, want: int, unsent: Callable[[], int]
    ) -> tuple[int, float, float]:
        """(messages stored in topic, when the count last grew, when the
        connection had written everything) once `want` are stored, or the
        count has not grown for STALL_S since the later of the last growth
        and the connection's last unsent byte, or DRAIN_S passed. Polled
        from this event loop, so the producer's connection keeps writing
        meanwhile."""
        with bl.BlockingClient(self.srv.broker) as c:
            t0 = time.perf_counter()
            last, t_last, drained = -1, t0, None
            while True:
                stored = sum(await asyncio.to_thread(bl.max_offsets, c, topic, QUEUES))
                now = time.perf_counter()
                if stored != last:
                    last, t_last = stored, now
                if drained is None and unsent() == 0:
                    drained = now
                quiet_since = max(t_last, drained or now)
                if stored >= want or now - quiet_since > STALL_S or now - t0 > DRAIN_S:
                    return stored, t_last, drained or now
                await asyncio.sleep(0.005)


async def run_async(
    srv: bl.Server,
    budget: Budget,
    label: str = "pyrmq",
    log: Callable[[str], None] = lambda _m: None,
    oneway: bool = True,
) -> tuple[str, list[dict[str, Any]]]:
    """Every bench._e2e case (plus oneway) against a running standalone."""
    async with Producer("bench-producer", srv.namesrv) as p:
        a = PyrmqAdapter(srv, p)
        # The first messages make a fresh store create its ConsumeQueue and
        # index files and the next CommitLog segment: before, not during,
        # the first case (run_cases then waits for the broker to go idle).
        warm = await a.new_stream("warmup")
        for _ in range(4):
            await p.send_batch([Message(warm, b"w" * 128) for _ in range(64)])

        async def extra(label: str, size: int, body: bytes) -> list[dict[str, Any]]:
            return await a.oneway(label, size, body, budget) if oneway else []

        rows = await _e2e.run_cases(a, budget, srv.cpu_s, label, log, extra)
        return a.client, rows


def run(
    root: str,
    budget: Budget,
    flush: str = "ASYNC_FLUSH",
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Start a standalone broker (flush type `flush`) under root, run every
    case, stop it: the same document shape as bench.peers.run_peer."""
    label = "pyrmq" if flush == "ASYNC_FLUSH" else "pyrmq-sync"
    t0 = time.perf_counter()
    with bl.standalone(root, flush) as srv:
        log(f"{label}: pyrmq standalone {flush}, pid {srv.pid}, broker {srv.broker}")
        client, rows = asyncio.run(run_async(srv, budget, label, log))
    for r in rows:
        why = _report.row_failure(r)
        if why:
            log(f"{label}: FAILED ROW {r['case']} {r['body']} B: {why}")
    return {
        "system": label,
        "server": f"pyrmq standalone ({flush})",
        "client": client,
        "durability": flush,
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short cases (bench._e2e.Budget)")
    ap.add_argument("--sizes", type=lambda s: tuple(int(x) for x in s.split(",")))
    ap.add_argument("--seconds", type=float, help="per produce case")
    ap.add_argument("--window", type=int, help="unacknowledged messages")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    ap.add_argument("--dir", type=work_dir, default=tempfile.gettempdir())
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    budget = Budget.make(args.quick, args.sizes)
    over = {k: getattr(args, k) for k in ("seconds", "window", "batch") if getattr(args, k)}
    budget = dataclasses.replace(budget, **over)
    doc = run(args.dir, budget, args.flush, lambda m: print(m, file=sys.stderr, flush=True))
    print(f"pyrmq client, one process, {args.flush}, {os.cpu_count()} CPUs")
    print(render_rows(doc["rows"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"budget": dataclasses.asdict(budget), **doc}, f, indent=1)
    return 0


def render_rows(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of bench._e2e rows."""
    out = [
        "| case | body | msgs/s | p50 / p99 / p99.9 ms | client µs/msg | client CPU | server CPU |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lat = ""
        if "p50_ms" in r:
            lat = f"{r['p50_ms']:.3f} / {r['p99_ms']:.3f} / {r['p999_ms']:.3f}"
        if r["case"] == "e2e":
            out.append(f"| e2e at {r['rate']:,.0f}/s | {r['body']} | | {lat} | | | |")
            continue
        out.append(
            f"| {r['case']} | {r['body']} | {r['msgs_per_s']:,.0f} | {lat} "
            f"| {r['client_us_per_msg']} | {r['client_cpu_share']} "
            f"| {r['server_cpu_share']} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
