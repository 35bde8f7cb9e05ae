"""Client-side workload drivers shared by bench.client_bench (pyrmq's own
client) and bench.peers (NATS JetStream, Redis Streams, RabbitMQ streams), so
that every system runs the same cases with the same counts, sizes and bounds.

Each system supplies small callables (send one and await the ack, submit one
unit of work whose ack arrives later, consume N); the drivers here own the
loops, the windows, the clocks and the result rows:

- ``awaited``: one acknowledged send at a time; msgs/s and the round-trip
  percentiles (the "one-at-a-time acknowledged send latency").
- ``windowed``: at most ``window`` messages sent and not yet acknowledged;
  ``per`` messages per submit (1 for pipelined single sends, the batch size
  for batches). Acks are counted through a ``Flow``.
- ``fixed_rate``: stamped messages (``perf_counter_ns`` in the first 8
  bytes) on a fixed schedule, while the system's consumer reports each
  message it receives to a ``LatencyProbe``: produce-to-consume latency.

Every loop is bounded by a message count and by wall time. ``CpuWindow``
turns a measured window into a row: msgs/s, MB/s of bodies, this process's
CPU per message and the server's CPU share (the server's whole process
group, read from /proc).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import resource
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

from pyrmq.testing.procs import process_stats, read_stat

MIB = 1 << 20
_CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- budget -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Budget:
    """Counts, sizes and time bounds of one run; shared by every system."""

    sizes: tuple[int, ...]
    #: wall-time bound of one produce case (pipelined, batched, oneway)
    seconds: float
    #: wall-time bound of the one-at-a-time case
    awaited_seconds: float
    #: message bound of one produce case, and a bound on its body bytes
    max_msgs: int
    case_bytes: int
    #: messages sent and not yet acknowledged (pipelined and batched cases)
    window: int
    #: messages per batch
    batch: int
    #: messages preloaded, then consumed, per size (bounded by consume_bytes too)
    consume_max_msgs: int
    consume_bytes: int
    #: messages per fetch for the peers' pull consumers (XREADGROUP COUNT, fetch batch)
    consume_batch: int
    #: wall-time bound of one consume case
    consume_seconds: float
    #: produce-to-consume latency: send rates (msgs/s), duration, warm-up
    e2e_rates: tuple[float, ...]
    e2e_seconds: float
    e2e_warmup: float

    @classmethod
    def make(cls, quick: bool, sizes: tuple[int, ...] | None = None) -> Budget:
        if quick:
            b = cls(
                sizes=(128, 1024, 16384),
                seconds=1.0,
                awaited_seconds=0.5,
                max_msgs=100_000,
                case_bytes=32 * MIB,
                window=1024,
                batch=64,
                consume_max_msgs=30_000,
                consume_bytes=16 * MIB,
                consume_batch=256,
                consume_seconds=20.0,
                e2e_rates=(500.0,),
                e2e_seconds=2.0,
                e2e_warmup=0.5,
            )
        else:
            b = cls(
                sizes=(128, 1024, 16384),
                seconds=5.0,
                awaited_seconds=3.0,
                max_msgs=1_000_000,
                case_bytes=512 * MIB,
                window=1024,
                batch=64,
                consume_max_msgs=300_000,
                consume_bytes=256 * MIB,
                consume_batch=256,
                consume_seconds=60.0,
                e2e_rates=(1000.0, 5000.0),
                e2e_seconds=8.0,
                e2e_warmup=1.0,
            )
        return dataclasses.replace(b, sizes=sizes) if sizes else b

    def produce_msgs(self, size: int) -> int:
        """The message bound of one produce case with bodies of `size` bytes."""
        return max(1, min(self.max_msgs, self.case_bytes // size))

    def consume_msgs(self, size: int) -> int:
        """How many messages are preloaded and consumed for `size`-byte bodies."""
        return max(1, min(self.consume_max_msgs, self.consume_bytes // size))


def body_of(size: int) -> bytes:
    """A body of `size` random (incompressible) bytes: clients that compress
    large bodies, as RocketMQ's do from 4 KiB, gain nothing from it."""
    return os.urandom(size)


# -- CPU and rows -------------------------------------------------------------------


def file_tail(path: str, lines: int = 30) -> str:
    """The last `lines` lines of a (log) file, or why it cannot be read."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"<{e}>"


def process_cpu_s() -> float:
    """user + system CPU seconds of this process (all its threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def stat_cpu_s(fields: list[str]) -> float:
    """user + system CPU seconds of read_stat's fields (in clock ticks:
    10 ms steps)."""
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def thread_cpu(pid: int, tid: str) -> tuple[str, float]:
    """(name, CPU seconds) of one thread, to the nanosecond from its
    schedstat (the scheduler's run time), in clock ticks where the kernel
    keeps none. OSError when the thread is gone."""
    task = f"/proc/{pid}/task/{tid}"
    name, fields = read_stat(f"{task}/stat")
    try:
        with open(f"{task}/schedstat") as f:
            return name, int(f.read().split()[0]) / 1e9
    except FileNotFoundError:
        return name, stat_cpu_s(fields)


def process_cpu_s_of(pid: int) -> float:
    """user + system CPU seconds of a process, every thread it ever had,
    to the nanosecond: the kernel's CPU clock of that process (the clock id
    clock_getcpuclockid(3) gives, ((~pid) << 3) | CPUCLOCK_SCHED), as a
    short window of a lightly loaded server spends less than the 10 ms
    tick /proc/<pid>/stat counts in. /proc's ticks where there is no such
    clock; OSError when the process is gone."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return stat_cpu_s(read_stat(f"/proc/{pid}/stat")[1])


def group_stats(pgid: int) -> Iterator[tuple[int, list[str]]]:
    """(pid, the /proc/<pid>/stat fields after the command name, state
    first) of every process in process group `pgid` (a server started with
    start_new_session: its PID is its group)."""
    return ((pid, f) for pid, f in process_stats() if int(f[2]) == pgid)


def group_cpu_s(pgid: int) -> float:
    """user + system CPU seconds of every live process in process group
    `pgid` (process_cpu_s_of each)."""
    total = 0.0
    for pid, _ in group_stats(pgid):
        with contextlib.suppress(OSError):  # ended meanwhile
            total += process_cpu_s_of(pid)
    return total


def pct(sorted_xs: list[float], p: float) -> float:
    """The p-quantile (0..1) of an ascending list; NaN when empty."""
    if not sorted_xs:
        return float("nan")
    return sorted_xs[min(len(sorted_xs) - 1, int(len(sorted_xs) * p))]


def latency_fields(ns: list[int], prefix: str = "") -> dict[str, float]:
    """p50 / p99 / p99.9 / max in milliseconds of a list of nanosecond times."""
    xs = sorted(x / 1e6 for x in ns)
    return {
        f"{prefix}p50_ms": round(pct(xs, 0.5), 4),
        f"{prefix}p99_ms": round(pct(xs, 0.99), 4),
        f"{prefix}p999_ms": round(pct(xs, 0.999), 4),
        f"{prefix}max_ms": round(xs[-1], 4) if xs else float("nan"),
    }


class CpuWindow:
    """A measured window: wall time, this process's CPU and the server's."""

    def __init__(self, server_cpu_s: Callable[[], float]) -> None:
        self._server_cpu_s = server_cpu_s
        self.t0 = time.perf_counter()
        self.c0 = process_cpu_s()
        self.s0 = server_cpu_s()

    def row(
        self, case: str, size: int, n: int, secs: float | None = None, **extra: Any
    ) -> dict[str, Any]:
        """The result row; `secs` overrides the window's wall time (for
        cases that end at an event measured elsewhere)."""
        dt = secs if secs is not None else time.perf_counter() - self.t0
        wall = time.perf_counter() - self.t0
        cpu = process_cpu_s() - self.c0
        dt = max(dt, 1e-9)
        return {
            "case": case,
            "body": size,
            "messages": n,
            "seconds": round(dt, 4),
            "msgs_per_s": round(n / dt, 1),
            "MBps": round(n * size / dt / 1e6, 2),
            "client_us_per_msg": round(cpu / max(n, 1) * 1e6, 2),
            "client_cpu_share": round(cpu / max(wall, 1e-9), 2),
            "server_cpu_share": round((self._server_cpu_s() - self.s0) / max(wall, 1e-9), 2),
            **extra,
        }


def settle(
    server_cpu_s: Callable[[], float],
    below: float = 0.05,
    interval: float = 0.5,
    timeout: float = 30.0,
) -> float | None:
    """Wait until the server uses less than `below` of a CPU over `interval`
    (a fresh broker creates and warms its store files for a while; a peer
    may still be booting or writing out the previous case). Returns None
    once idle, or the last share seen when `timeout` passed first."""
    deadline = time.monotonic() + timeout
    while True:
        c0, t0 = server_cpu_s(), time.monotonic()
        time.sleep(interval)
        share = (server_cpu_s() - c0) / (time.monotonic() - t0)
        if share < below:
            return None
        if time.monotonic() > deadline:
            return share


# -- drivers ------------------------------------------------------------------------


async def awaited(
    send: Callable[[], Awaitable[Any]], n_max: int, seconds: float
) -> tuple[int, float, list[int]]:
    """Call ``await send()`` one at a time until n_max or `seconds`; returns
    (count, elapsed seconds, round trips in ns)."""
    rtt: list[int] = []
    clock = time.perf_counter_ns
    start = clock()
    end = start + int(seconds * 1e9)
    n = 0
    while n < n_max:
        t = clock()
        if t >= end:
            break
        await send()
        rtt.append(clock() - t)
        n += 1
    return n, (clock() - start) / 1e9, rtt


class Flow:
    """Counts messages sent and acknowledged; wakes the window when acks
    arrive. Systems call ``ack(k)`` from their confirmation callbacks, or
    hand a future to ``track``."""

    def __init__(self) -> None:
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.error: BaseException | None = None
        self._wake = asyncio.Event()
        #: a (result, error) callback that counts one message (made once)
        self.on_result = self._on_result

    @property
    def done(self) -> int:
        return self.acked + self.failed

    def ack(self, k: int = 1, ok: bool = True) -> None:
        if ok:
            self.acked += k
        else:
            self.failed += k
        self._wake.set()

    def _on_result(self, result: Any, exc: BaseException | None) -> None:
        """One message answered: acked when there is no error and the
        result's `ok` (when it has one) is true."""
        if exc is not None:
            self.error = self.error or exc
            self.ack(1, False)
        else:
            self.ack(1, bool(getattr(result, "ok", True)))

    def track(
        self, fut: asyncio.Future[Any], k: int = 1, ok: Callable[[Any], bool] | None = None
    ) -> None:
        """Count `k` messages acknowledged when fut completes (failed when
        it raises or when ok(result) is false)."""

        def settle(f: asyncio.Future[Any]) -> None:
            if f.cancelled():
                self.ack(k, False)
                return
            exc = f.exception()
            if exc is not None:
                self.error = self.error or exc
                self.ack(k, False)
            else:
                self.ack(k, ok(f.result()) if ok else True)

        fut.add_done_callback(settle)

    async def wait_below(self, outstanding: int) -> None:
        """Until fewer than `outstanding` messages are unacknowledged."""
        while self.sent - self.done >= outstanding:
            self._wake.clear()
            await self._wake.wait()

    async def drain(self, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            await self.wait_below(1)


async def windowed(
    submit: Callable[[Flow], Awaitable[None]],
    per: int,
    window: int,
    n_max: int,
    seconds: float,
    drain_timeout: float = 60.0,
) -> tuple[Flow, float]:
    """``await submit(flow)`` sends `per` messages whose acks reach `flow`
    later; at most `window` messages are unacknowledged at a time. Runs
    until n_max messages were sent or `seconds` passed, then waits for every
    ack. Returns the flow and the seconds from the first send to the last ack."""
    flow = Flow()
    clock = time.perf_counter
    start = clock()
    end = start + seconds
    limit = max(per, window)
    room = limit - per + 1
    while flow.sent + per <= n_max and clock() < end:
        if flow.sent - flow.done >= room:  # else no coroutine to make and await
            await flow.wait_below(room)
        await submit(flow)
        flow.sent += per
    await flow.drain(drain_timeout)
    return flow, clock() - start


def stamp(body: bytes) -> bytes:
    """`body` with perf_counter_ns() in its first 8 bytes (bodies >= 8 bytes)."""
    return time.perf_counter_ns().to_bytes(8, "big") + body[8:]


class ConsumeClock:
    """Messages a consumer received, and when: the rate runs from the first
    delivery to the last (connecting, joining a group and rebalancing stay
    out), over the messages after the first delivery."""

    def __init__(self) -> None:
        self.n = 0
        self.n_first = 0
        self.t_first = 0.0
        self.t_last = 0.0

    def saw(self, k: int = 1) -> None:
        now = time.perf_counter()
        if not self.n:
            self.t_first, self.n_first = now, k
        self.n += k
        self.t_last = now

    @property
    def secs(self) -> float:
        return self.t_last - self.t_first

    @property
    def msgs_per_s(self) -> float:
        return (self.n - self.n_first) / self.secs if self.secs > 0 else 0.0


class LatencyProbe:
    """Produce-to-consume latencies of stamped messages sent after the
    warm-up, and their stamps (close_far_fields)."""

    def __init__(self) -> None:
        self.measure_from = 1 << 62
        self.lat_ns: list[int] = []
        self.sent_ns: list[int] = []
        self.seen = 0

    def saw(self, body: bytes) -> None:
        now = time.perf_counter_ns()
        self.seen += 1
        sent = int.from_bytes(body[:8], "big")
        if self.measure_from <= sent <= now:
            self.lat_ns.append(now - sent)
            self.sent_ns.append(sent)


#: a message stamped less than this after the one before it is sent while
#: that one is still on its way (a produce-to-consume round trip here is
#: 0.2-0.3 ms): a fixed-rate sender whose timer fired late catches up so
CLOSE_GAP_NS = 300_000


def close_far_fields(sent_ns: list[int], lat_ns: list[int]) -> dict[str, float]:
    """The latencies of the messages stamped less than CLOSE_GAP_NS after
    the one stamped before them ("close_"), of the others ("far_"), and the
    close ones' share: a system that makes a message wait for the one ahead
    of it shows it in the close ones' tail."""
    close: list[int] = []
    far: list[int] = []
    prev: int | None = None
    for sent, lat in sorted(zip(sent_ns, lat_ns, strict=True)):
        (close if prev is not None and sent - prev < CLOSE_GAP_NS else far).append(lat)
        prev = sent
    n = len(close) + len(far)
    return {
        "close_share": round(len(close) / n, 3) if n else float("nan"),
        **latency_fields(close, "close_"),
        **latency_fields(far, "far_"),
    }


async def fixed_rate(
    send: Callable[[bytes], Awaitable[Any]],
    body: bytes,
    rate: float,
    warmup: float,
    duration: float,
    probe: LatencyProbe,
    settle: float = 1.0,
) -> dict[str, Any]:
    """Send stamped copies of `body` at `rate` msgs/s for warmup + duration
    seconds (``await send(stamped)`` must not wait for the ack: it starts
    the send and returns); messages stamped after the warm-up are measured
    when the system's consumer hands them to ``probe.saw``. Waits up to
    `settle` seconds for the last ones. Returns the row's latency fields."""
    clock = time.perf_counter_ns
    t0 = clock()
    probe.measure_from = t0 + int(warmup * 1e9)
    stop_at = probe.measure_from + int(duration * 1e9)
    i = sent = 0
    while True:
        due = t0 + int(i * 1e9 / rate)
        now = clock()
        if now >= stop_at:
            break
        if due > now:
            await asyncio.sleep((due - now) / 1e9)
        else:
            # behind schedule (a rate the client cannot make): still let the
            # consumer and the acks run, or nothing arrives until the end
            await asyncio.sleep(0)
        stamped = stamp(body)
        await send(stamped)
        # counted by its stamp, as the probe measures it: a message stamped
        # just before the warm-up ended is neither (it was counted as sent
        # and never measured: "8,001 of 8,002" with nothing lost)
        if int.from_bytes(stamped[:8], "big") >= probe.measure_from:
            sent += 1
        i += 1
    deadline = clock() + int(settle * 1e9)
    while len(probe.lat_ns) < sent and clock() < deadline:
        await asyncio.sleep(0.01)
    return {
        "rate": rate,
        "duration_s": duration,
        "sent": sent,
        "received": len(probe.lat_ns),
        "achieved_rate": round(sent / duration, 1),
        **latency_fields(probe.lat_ns),
        **close_far_fields(probe.sent_ns, probe.lat_ns),
    }


def e2e_row(size: int, lat: dict[str, Any], how: str) -> dict[str, Any]:
    """A produce-to-consume latency row (no throughput figures)."""
    return {"case": "e2e", "body": size, "messages": lat["received"], "how": how, **lat}


# -- the cases, for any system ------------------------------------------------------


class Adapter(Protocol):
    """What one system's client supplies to ``run_cases``. A "stream" is the
    system's unit of storage (a topic, a JetStream stream, a Redis stream
    key, a RabbitMQ stream); each case gets a fresh one."""

    #: e.g. "nats-py 2.16.0 (asyncio)"
    client: str

    async def new_stream(self, tag: str) -> str: ...

    async def drop_stream(self, stream: str) -> None: ...

    def awaited_send(self, stream: str, body: bytes) -> Callable[[], Awaitable[Any]]:
        """``await send()``: one message sent and acknowledged."""
        ...

    def pipelined_submit(
        self, stream: str, body: bytes, batch: int
    ) -> tuple[Callable[[Flow], Awaitable[None]], int]:
        """(submit, per): ``await submit(flow)`` sends `per` single messages
        (1, or `batch` for clients whose pipelining is explicit, as Redis's
        pipelines); their acks reach flow later."""
        ...

    def batched_submit(
        self, stream: str, body: bytes, batch: int
    ) -> Callable[[Flow], Awaitable[None]] | None:
        """``await submit(flow)``: `batch` messages sent in one batch (None:
        the client has no batch send)."""
        ...

    def consumers(self) -> dict[str, Callable[[str, int, Budget], Awaitable[ConsumeClock]]]:
        """case name -> ``await consume(stream, n, budget)``: read the n
        messages preloaded into stream from its start, acknowledging or
        committing as the client usually does, counting deliveries on a
        ConsumeClock (stops at budget.consume_seconds)."""
        ...

    async def listen(self, stream: str, probe: LatencyProbe) -> Callable[[], Awaitable[None]]:
        """Start the usual consumer on stream, handing each body to
        probe.saw; returns a coroutine function that stops it."""
        ...

    def fire(self, stream: str, flow: Flow) -> Callable[[bytes], Awaitable[None]]:
        """``await send(body)`` starts one send (its ack reaches flow) and
        returns without waiting for the ack."""
        ...


async def _case(log: Callable[[str], None], label: str, row: dict[str, Any]) -> dict[str, Any]:
    extra = ""
    if "p50_ms" in row:
        extra = f", p50 {row['p50_ms']:.3f} / p99 {row['p99_ms']:.3f} ms"
    if row.get("failed"):
        extra += f", {row['failed']} FAILED"
    log(
        f"  {label} {row['case']} {row['body']} B: {row.get('msgs_per_s', 0):,.0f} msg/s "
        f"({row['messages']:,} msgs){extra}"
    )
    return row


@dataclasses.dataclass
class _Ctx:
    a: Adapter
    budget: Budget
    server_cpu_s: Callable[[], float]
    label: str
    log: Callable[[str], None]
    size: int
    body: bytes
    extra: Callable[[str, int, bytes], Awaitable[list[dict[str, Any]]]] | None


async def run_cases(
    a: Adapter,
    budget: Budget,
    server_cpu_s: Callable[[], float],
    label: str,
    log: Callable[[str], None] = lambda _m: None,
    extra: Callable[[str, int, bytes], Awaitable[list[dict[str, Any]]]] | None = None,
) -> list[dict[str, Any]]:
    """Every case for every body size of the budget, in this order: awaited,
    pipelined, batched, (`extra`, e.g. pyrmq's oneway), preload + each
    consumer, produce-to-consume latency at each rate. Rows as CpuWindow.row.
    A case that raises becomes a row with "error" and the others still run."""
    rows: list[dict[str, Any]] = []
    for size in budget.sizes:
        busy = await asyncio.to_thread(settle, server_cpu_s)
        if busy is not None:
            log(f"  {label}: the server stayed busy ({busy:.0%} of a CPU) before {size} B")
        ctx = _Ctx(a, budget, server_cpu_s, label, log, size, body_of(size), extra)
        for name, case in _CASES:
            try:
                rows += await case(ctx)
            except Exception as e:  # one failed case must not lose the others
                log(f"  {label} {name} {size} B FAILED: {e!r}")
                rows.append({"case": name, "body": size, "messages": 0, "error": repr(e)})
    return rows


async def _awaited(c: _Ctx) -> list[dict[str, Any]]:
    s = await c.a.new_stream(f"aw{c.size}")
    send = c.a.awaited_send(s, c.body)
    await send()  # connection, route, stream
    w = CpuWindow(c.server_cpu_s)
    n, secs, rtt = await awaited(send, c.budget.produce_msgs(c.size), c.budget.awaited_seconds)
    row = await _case(c.log, c.label, w.row("awaited", c.size, n, secs, **latency_fields(rtt)))
    await c.a.drop_stream(s)
    return [row]


async def _pipelined(c: _Ctx) -> list[dict[str, Any]]:
    s = await c.a.new_stream(f"pi{c.size}")
    submit, per = c.a.pipelined_submit(s, c.body, c.budget.batch)
    return await _windowed_case(c, "pipelined", s, submit, per)


async def _batched(c: _Ctx) -> list[dict[str, Any]]:
    s = await c.a.new_stream(f"ba{c.size}")
    submit = c.a.batched_submit(s, c.body, c.budget.batch)
    if submit is None:
        await c.a.drop_stream(s)
        return []
    return await _windowed_case(c, "batched", s, submit, c.budget.batch)


async def _windowed_case(
    c: _Ctx, case: str, s: str, submit: Callable[[Flow], Awaitable[None]], per: int
) -> list[dict[str, Any]]:
    await c.a.awaited_send(s, c.body)()
    w = CpuWindow(c.server_cpu_s)
    b = c.budget
    flow, secs = await windowed(submit, per, b.window, b.produce_msgs(c.size), b.seconds)
    row = w.row(case, c.size, flow.acked, secs, window=b.window, per_submit=per, failed=flow.failed)
    if flow.error is not None:
        row["error"] = repr(flow.error)
    await c.a.drop_stream(s)
    return [await _case(c.log, c.label, row)]


async def _extra(c: _Ctx) -> list[dict[str, Any]]:
    if c.extra is None:
        return []
    return [await _case(c.log, c.label, row) for row in await c.extra(c.label, c.size, c.body)]


async def _consume(c: _Ctx) -> list[dict[str, Any]]:
    return await _consume_cases(c.a, c.budget, c.server_cpu_s, c.label, c.log, c.size, c.body)


async def e2e_once(
    a: Adapter,
    size: int,
    body: bytes,
    rate: float,
    warmup: float,
    seconds: float,
    log: Callable[[str], None],
    label: str,
) -> dict[str, Any]:
    """One produce-to-consume latency row: a fresh stream, its usual
    consumer listening, stamped messages at `rate` msgs/s for warmup +
    seconds (bench.duel --e2e alternates these between two systems)."""
    s = await a.new_stream(f"e2e{size}r{int(rate)}")
    await a.awaited_send(s, bytes(8) + body[8:])()  # stamped 0: not measured
    probe = LatencyProbe()
    stop = await a.listen(s, probe)
    flow = Flow()
    fire = a.fire(s, flow)

    async def send(b: bytes) -> None:
        await fire(b)
        flow.sent += 1

    try:
        lat = await fixed_rate(send, body, rate, warmup, seconds, probe)
        await flow.drain(30)
    finally:
        await stop()
    row = {"case": "e2e", "body": size, "messages": lat["received"], "failed": flow.failed, **lat}
    log(
        f"  {label} e2e {size} B at {rate:,.0f}/s: p50 {row['p50_ms']:.2f} / p99 "
        f"{row['p99_ms']:.2f} / p99.9 {row['p999_ms']:.2f} ms "
        f"({row['received']:,} of {row['sent']:,}); sent close behind the one before "
        f"{row['close_share']:.0%}: p99 {row['close_p99_ms']:.2f}, "
        f"the others {row['far_p99_ms']:.2f}"
    )
    await a.drop_stream(s)
    return row


async def _e2e(c: _Ctx) -> list[dict[str, Any]]:
    b = c.budget
    return [
        await e2e_once(c.a, c.size, c.body, rate, b.e2e_warmup, b.e2e_seconds, c.log, c.label)
        for rate in b.e2e_rates
    ]


_CASES: tuple[tuple[str, Callable[[_Ctx], Awaitable[list[dict[str, Any]]]]], ...] = (
    ("awaited", _awaited),
    ("pipelined", _pipelined),
    ("batched", _batched),
    ("extra", _extra),
    ("consume", _consume),
    ("e2e", _e2e),
)


async def _consume_cases(
    a: Adapter,
    budget: Budget,
    server_cpu_s: Callable[[], float],
    label: str,
    log: Callable[[str], None],
    size: int,
    body: bytes,
) -> list[dict[str, Any]]:
    """Preload consume_msgs(size) messages (batched if the client batches,
    else pipelined), then let each consumer read them all."""
    n = budget.consume_msgs(size)
    s = await a.new_stream(f"co{size}")
    await a.awaited_send(s, body)()
    submit = a.batched_submit(s, body, budget.batch)
    per = budget.batch
    if submit is None:
        submit, per = a.pipelined_submit(s, body, budget.batch)
    flow, secs = await windowed(submit, per, budget.window, n - 1, 600.0)
    stored = flow.acked + 1
    log(f"  {label} preload {size} B: {stored:,} msgs in {secs:.2f} s")
    rows = []
    for case, consume in a.consumers().items():
        w = CpuWindow(server_cpu_s)
        clock = await consume(s, stored, budget)
        row = w.row(case, size, clock.n, clock.secs, expected=stored)
        row["msgs_per_s"] = round(clock.msgs_per_s, 1)
        row["MBps"] = round(clock.msgs_per_s * size / 1e6, 2)
        rows.append(await _case(log, label, row))
    await a.drop_stream(s)
    return rows
