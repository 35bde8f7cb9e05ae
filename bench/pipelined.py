"""Pipelined load over raw remoting frames: sends and pulls many requests
ahead on each connection, in several processes (bench._children), so the
broker, not the client, is what is measured.

- ``send_load``: the pre-encoded SEND_MESSAGE ring of ``broker_load.send_ring``
  (frames shaped like the C++ client's), ``window`` outstanding per
  connection over ``conns`` connections in each of ``procs`` processes;
  acknowledged (code 0) sends per second in a window after a warm-up,
  counted by each process over its own window.
- ``pull_ranges`` / ``pull_all``: PULL_MESSAGE (``broker_load.pull_frame``)
  issued ahead at known offsets, a queue's pulls on one connection, no pull
  across the end of a ConsumeQueue file (a pull stops there, as in
  RocketMQ); messages are counted by walking the records' TOTALSIZE fields,
  and the rate runs from the common start to the last answer.

Only the length prefix and the start of each response header
(``{"code":0,``) are looked at; a Sender counts them with C calls
(whole_frames_end, bytes.count), not a Python walk of each answer. Server
CPU comes from /proc/PID/stat over the measured window (``Server.cpu_s``)."""

from __future__ import annotations

import asyncio
import functools
import socket
import time
from collections.abc import Callable
from typing import Any

from bench import broker_load as bl
from bench._children import LoadProcesses
from pyrmq.storage import MessageStoreConfig
from rmqcore import whole_frames_end

#: ConsumeQueue units per file with the broker's default sizes
CQ_UNITS = MessageStoreConfig().cq_units_per_file
#: what every JSON answer header starts with
FRAME_HEAD = b'{"code":'
#: the largest answer frame a Sender takes (a send's answer is ~300 bytes)
MAX_ANSWER = 1 << 20


class NoDelayProtocol(asyncio.Protocol):
    """A load connection: its transport once connected, Nagle off (every
    request goes out at once)."""

    transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def stop_senders(senders: list[Any], drain_s: float) -> None:
    """Stop sending, let the outstanding answers arrive (at most drain_s),
    close the connections."""
    for s in senders:
        s.sending = False
    drain = time.monotonic() + drain_s
    while any(s.outstanding for s in senders) and time.monotonic() < drain:
        await asyncio.sleep(0.005)
    for s in senders:
        if s.transport is not None:
            s.transport.close()


# -- sending ---------------------------------------------------------------------------


class Sender(NoDelayProtocol):
    """Keeps `window` SEND_MESSAGE frames outstanding; each response frees a slot."""

    def __init__(self, ring: bytes, flen: int, window: int, start_frame: int) -> None:
        self.ring = memoryview(ring)
        self.flen = flen
        self.frames = len(ring) // flen
        self.window = window
        self.pos = start_frame % self.frames
        self.buf = bytearray()
        self.ok = 0
        self.bad = 0
        self.sending = False
        self.outstanding = 0
        self.lost = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)

    def start(self) -> None:
        self.sending = True
        self._send(self.window)

    def _send(self, k: int) -> None:
        t, ring, flen, frames = self.transport, self.ring, self.flen, self.frames
        if t is None or t.is_closing():
            return
        self.outstanding += k
        while k:
            m = min(k, frames - self.pos)
            t.write(ring[self.pos * flen : (self.pos + m) * flen])
            self.pos = (self.pos + m) % frames
            k -= m

    def data_received(self, data: bytes) -> None:
        """Counts the whole answers received: every JSON header starts with
        FRAME_HEAD, a success's with OK_HEAD, and a send's answer carries
        no body, so two C-level counts over the whole frames do it. (A
        Python walk of each frame cost ~1 µs an answer: the generator took a
        third of a core at 400k msgs/s, on the core the broker's C send
        thread was meant to have: bench.multicore.)"""
        buf = self.buf
        buf += data
        end = whole_frames_end(buf, MAX_ANSWER)
        if not end:
            return
        n = buf.count(FRAME_HEAD, 0, end)
        n_ok = buf.count(bl.OK_HEAD, 0, end)
        del buf[:end]
        self.ok += n_ok
        self.bad += n - n_ok
        self.outstanding -= n
        if self.sending and n:
            self._send(n)


async def _send_proc(
    addr: str,
    ring: bytes,
    flen: int,
    conns: int,
    window: int,
    warmup: float,
    duration: float,
    proc_index: int,
    ready: Callable[[], float],
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    host, _, port = addr.rpartition(":")
    senders: list[Sender] = []
    for c in range(conns):
        start_frame = (proc_index * conns + c) * 997
        _, s = await loop.create_connection(
            functools.partial(Sender, ring, flen, window, start_frame), host, int(port)
        )
        senders.append(s)
    t_start = ready()
    for s in senders:
        s.start()
    await asyncio.sleep(max(0.0, t_start + warmup - time.monotonic()))
    t0, c0 = time.monotonic(), sum(s.ok for s in senders)
    cpu0 = time.process_time()
    await asyncio.sleep(max(0.0, t_start + warmup + duration - time.monotonic()))
    t1, c1 = time.monotonic(), sum(s.ok for s in senders)
    cpu1 = time.process_time()
    await stop_senders(senders, 10.0)
    return {
        "msgs": c1 - c0,
        "secs": t1 - t0,
        "total_ok": sum(s.ok for s in senders),
        "bad": sum(s.bad for s in senders),
        "gen_cpu_s": cpu1 - cpu0,
        "unanswered": sum(s.outstanding for s in senders),
    }


def send_load(
    server: bl.Server,
    topic: str,
    queues: int,
    body_len: int,
    procs: int = 2,
    conns: int = 4,
    window: int = 256,
    warmup: float = 1.0,
    duration: float = 5.0,
) -> dict[str, Any]:
    """Pipelined SEND_MESSAGE from procs x conns connections; code-0
    responses per second in the window after warmup."""
    ring, flen = bl.send_ring(topic, queues, body_len)
    jobs = [(server.broker, ring, flen, conns, window, warmup, duration, i) for i in range(procs)]
    with bl.BlockingClient(server.broker) as c:
        before = sum(bl.max_offsets(c, topic, queues))
        with LoadProcesses(_send_proc, jobs) as kids:
            t_start = kids.start()
            time.sleep(max(0.0, t_start + warmup - time.monotonic()))
            cpu0, w0 = server.cpu_s(), time.monotonic()
            threads0 = bl.thread_cpu_s(server.pid)
            time.sleep(max(0.0, t_start + warmup + duration - time.monotonic()))
            cpu1, w1 = server.cpu_s(), time.monotonic()
            threads1 = bl.thread_cpu_s(server.pid)
            results = kids.results(timeout=60)
        stored = sum(bl.max_offsets(c, topic, queues)) - before
    msgs = sum(r["msgs"] for r in results)
    rate = sum(r["msgs"] / r["secs"] for r in results)
    return {
        "body_len": body_len,
        "procs": procs,
        "conns": conns,
        "window": window,
        "frame_bytes": flen,
        "msgs": msgs,
        "secs": max(r["secs"] for r in results),
        "msgs_per_s": rate,
        "MBps": rate * body_len / 1e6,
        "wire_MBps": rate * flen / 1e6,
        "bad": sum(r["bad"] for r in results),
        "unanswered": sum(r["unanswered"] for r in results),
        "acked_total": sum(r["total_ok"] for r in results),
        "stored_total": stored,
        "server_cpu_s": cpu1 - cpu0,
        "server_cpu_util": (cpu1 - cpu0) / (w1 - w0),
        "server_cpu_us_per_msg": (cpu1 - cpu0) / max(1, rate * (w1 - w0)) * 1e6,
        "server_cpu_us_per_msg_by_thread": bl.cpu_by_thread_us(
            threads0, threads1, round(rate * (w1 - w0))
        ),
        "gen_cpu_util": sum(r["gen_cpu_s"] for r in results) / (w1 - w0),
    }


# -- pulling ---------------------------------------------------------------------------


def count_records(body: bytes | bytearray | memoryview, start: int, end: int) -> int:
    """Records in data[start:end] by walking TOTALSIZE."""
    n = 0
    while start < end:
        start += int.from_bytes(body[start : start + 4], "big")
        n += 1
    return n


class Puller(NoDelayProtocol):
    def __init__(self, frames: list[bytes], window: int, done: asyncio.Future[None]) -> None:
        self.frames = frames
        self.window = window
        self.next = 0
        self.answered = 0
        self.msgs = 0
        self.bad = 0
        self.buf = bytearray()
        self.done = done
        self.t_end = 0.0

    def start(self) -> None:
        self._send(min(self.window, len(self.frames)))
        if not self.frames:
            self.done.set_result(None)

    def _send(self, k: int) -> None:
        if k > 0 and self.transport is not None:
            self.transport.write(b"".join(self.frames[self.next : self.next + k]))
            self.next += k

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end, n = 0, len(buf), 0
        while end - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big")
            if end - pos - 4 < size:
                break
            if buf[pos + 8 : pos + 18] == bl.OK_HEAD:
                hlen = int.from_bytes(buf[pos + 5 : pos + 8], "big")
                self.msgs += count_records(buf, pos + 8 + hlen, pos + 4 + size)
            else:
                self.bad += 1
            n += 1
            pos += 4 + size
        if pos:
            del buf[:pos]
        self.answered += n
        self._send(min(n, len(self.frames) - self.next))
        if self.answered == len(self.frames) and not self.done.done():
            self.t_end = time.monotonic()
            self.done.set_result(None)


async def _pull_proc(
    addr: str, conn_frames: list[list[bytes]], window: int, ready: Callable[[], float]
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    host, _, port = addr.rpartition(":")
    pullers: list[Puller] = []
    for frames in conn_frames:
        done = loop.create_future()
        _, p = await loop.create_connection(
            functools.partial(Puller, frames, window, done), host, int(port)
        )
        pullers.append(p)
    t_start = ready()
    cpu0 = time.process_time()
    for p in pullers:
        p.start()
    async with asyncio.timeout(600):
        await asyncio.gather(*(p.done for p in pullers))
    cpu1 = time.process_time()
    for p in pullers:
        if p.transport is not None:
            p.transport.close()
    return {
        "msgs": sum(p.msgs for p in pullers),
        "bad": sum(p.bad for p in pullers),
        "pulls": sum(len(p.frames) for p in pullers),
        "t_start": t_start,
        "t_end": max(p.t_end for p in pullers),
        "gen_cpu_s": cpu1 - cpu0,
    }


def pull_ranges(
    server: bl.Server,
    topic: str,
    ranges: dict[int, tuple[int, int]],
    procs: int = 2,
    conns: int = 4,
    window: int = 64,
    max_msgs: int = 32,
) -> dict[str, Any]:
    """Read queue q's offsets [start, end) for every q in ranges with
    pipelined PULL_MESSAGE, planned ahead, a queue's pulls on one connection
    (queues dealt round robin over procs x conns connections, each
    connection's queues interleaved); messages/s from the common start to
    the last answer."""
    slots = procs * conns
    per_conn: list[list[bytes]] = [[] for _ in range(slots)]
    by_slot: list[list[int]] = [[] for _ in range(slots)]
    for i, q in enumerate(sorted(ranges)):
        by_slot[i % slots].append(q)
    opaque = 1
    for slot, queues in enumerate(by_slot):
        cursors = {q: ranges[q][0] for q in queues}
        while any(cursors[q] < ranges[q][1] for q in queues):
            for q in queues:
                off, end = cursors[q], ranges[q][1]
                if off < end:
                    n = min(max_msgs, end - off, CQ_UNITS - off % CQ_UNITS)
                    per_conn[slot].append(bl.pull_frame(topic, q, off, opaque, n))
                    opaque += 1
                    cursors[q] = off + n
    plans = [[f for f in per_conn[p * conns : (p + 1) * conns] if f] for p in range(procs)]
    plans = [p for p in plans if p]
    with LoadProcesses(_pull_proc, [(server.broker, plan, window) for plan in plans]) as kids:
        # the broker is idle until the start: its CPU is read before, as
        # the parent may be scheduled after the children have started
        cpu0 = server.cpu_s()
        kids.start()
        results = kids.results(timeout=900)
        cpu1 = server.cpu_s()
    # from the first child's start (each reads the clock as the barrier
    # lets it go) to the last answer
    secs = max(r["t_end"] for r in results) - min(r["t_start"] for r in results)
    msgs = sum(r["msgs"] for r in results)
    return {
        "msgs": msgs,
        "expected": sum(end - start for start, end in ranges.values()),
        "secs": secs,
        "msgs_per_s": msgs / secs,
        "bad": sum(r["bad"] for r in results),
        "pulls": sum(r["pulls"] for r in results),
        "procs": len(plans),
        "conns": conns,
        "window": window,
        "max_msgs": max_msgs,
        "queues": len(ranges),
        "server_cpu_s": cpu1 - cpu0,
        "server_cpu_util": (cpu1 - cpu0) / secs,
        "server_cpu_us_per_msg": (cpu1 - cpu0) / max(1, msgs) * 1e6,
        "gen_cpu_util": sum(r["gen_cpu_s"] for r in results) / secs,
    }


def pull_all(
    server: bl.Server,
    topic: str,
    queues: int,
    per_queue: int,
    procs: int = 2,
    conns: int = 4,
    window: int = 64,
    max_msgs: int = 32,
) -> dict[str, Any]:
    """Read every message of topic (per_queue in each of its queues)."""
    return pull_ranges(
        server, topic, {q: (0, per_queue) for q in range(queues)}, procs, conns, window, max_msgs
    )
