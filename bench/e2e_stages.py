"""Where one message's produce-to-consume time goes, stage by stage.

    python -m bench.e2e_stages [--seconds 4] [--rate 1000] [--connections 1|2] [--dir DIR]

A ``pyrmq standalone`` (ASYNC_FLUSH, on asyncio's loop) and this process, running
bench._e2e's produce-to-consume case (a Producer's ``send_async`` at a
fixed rate, a PushConsumer listening), both stamp every socket write and
read of asyncio's selector transport and the entry of a few named
functions with ``time.perf_counter_ns`` (one monotonic clock for both
processes). Each message's stamps are then followed from its send to its
listener and every stage's p50, p90 and p99 are printed, with its median
among the slowest 1% of the messages (where the tail's time goes;
bench/README.md, "Produce to consume"). The stamps cost ~1-2 µs each, so the total is a
little above an unstamped run's.

Each write is told by what it carries (_write_kind): a send or a pull
request from the client; a pull answer, an ack, or both in one write
from the broker. By default the producer rides the consumer's connection,
as in bench.duel (PyrmqAdapter.listen), and the broker answers a send and
the pull it woke in one write; ``--connections 2`` gives the producer a
connection of its own. Stamps from before writes were told apart (every
write "W") are told by frame sizes instead: the producer's sends are
larger than the consumer's pull requests, the broker's pull answers (with
a 128 B message) larger than its acks.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import functools
import importlib
import json
import os
import runpy
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import rmqcore
from bench._args import work_dir
from bench._e2e import pct
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.command import FLAG_RESPONSE, MAX_FRAME, SERIALIZE_JSON

#: (time ns, label, bytes, fd) of everything stamped in this process
EVENTS: list[tuple[int, str, int, int]] = []

#: functions stamped on entry: (module, class, function, label)
BROKER_MARKS = (
    ("pyrmq.broker.processor.send_fast", "SendFastPath", "split", "split"),
    ("pyrmq.broker.processor.send_fast", "SendFastPath", "_settle", "settle"),
    ("pyrmq.broker.processor.pull", "PullMessageProcessor", "wake_held", "wake"),
)
CLIENT_MARKS = (
    ("pyrmq.producer.producer", "Producer", "send_async", "send_async"),
    ("pyrmq.consumer.push_consumer", "PushConsumer", "_pulled", "pulled"),
)


def install(marks: tuple[tuple[str, str, str, str], ...]) -> None:
    """Stamp the selector transport's writes and reads, and marks."""
    import asyncio.selector_events as se

    clock, events = time.perf_counter_ns, EVENTS
    cls: Any = se._SelectorSocketTransport
    write = cls.write

    def stamped_write(self: Any, data: Any) -> None:
        events.append((clock(), _write_kind(data), len(data), self._sock_fd))
        write(self, data)

    def stamped(read: Any) -> Any:
        def stamped_read(self: Any) -> None:
            events.append((clock(), "R", 0, self._sock_fd))
            read(self)

        return stamped_read

    cls.write = stamped_write
    # a Protocol's reads and a BufferedProtocol's (pyrmq's Connection)
    for name in ("_read_ready__data_received", "_read_ready__get_buffer"):
        setattr(cls, name, stamped(getattr(cls, name)))
    for module, name, fn, label in marks:
        owner = getattr(importlib.import_module(module), name)
        setattr(owner, fn, _marked(owner.__dict__[fn], label))


#: what a write carries (its event's label): the client's requests, the broker's answers
SEND, PULL, ANSWER, ACK, ANSWER_ACK = "Wsend", "Wpull", "Wanswer", "Wack", "Wanswer+ack"


def _write_kind(data: Any) -> str:
    """A write's label by its frames, split as the servers split them
    (rmqcore.split_frames): a request to send (10, 310 or, auto-batched,
    320) or to pull (11); answers that carry a pull's nextBeginOffset, a
    send's msgId, or both; "W" for anything else."""
    try:
        frames, _ = rmqcore.split_frames(data, MAX_FRAME)
    except ValueError:
        return "W"
    answer = ack = False
    for serialize_type, header, _ in frames:
        if serialize_type != SERIALIZE_JSON:
            continue
        code, flag, ext = header[0], header[4], header[6] or {}
        if not flag & FLAG_RESPONSE:
            if code in _SEND_CODES:
                return SEND
            if code == RequestCode.PULL_MESSAGE:
                return PULL
        elif "nextBeginOffset" in ext:
            answer = True
        elif "msgId" in ext:
            ack = True
    if answer:
        return ANSWER_ACK if ack else ANSWER
    return ACK if ack else "W"


#: the requests _write_kind labels a send
_SEND_CODES = frozenset(
    (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
)


def _marked(f: Any, label: str) -> Any:
    clock, events = time.perf_counter_ns, EVENTS

    @functools.wraps(f)
    def w(*a: Any, **k: Any) -> Any:
        events.append((clock(), label, 0, -1))
        return f(*a, **k)

    return w


def broker_main(argv: list[str]) -> None:
    """``pyrmq <argv>`` stamped: SIGUSR1 clears, SIGUSR2 writes the stamps
    to $STAGES_OUT."""
    install(BROKER_MARKS)

    def dump(*_: Any) -> None:
        with open(os.environ["STAGES_OUT"], "w") as f:
            json.dump(EVENTS, f)

    signal.signal(signal.SIGUSR1, lambda *_: EVENTS.clear())
    signal.signal(signal.SIGUSR2, dump)
    sys.argv = ["pyrmq", *argv]
    runpy.run_module("pyrmq", run_name="__main__")


async def _drive(
    srv: Any, seconds: float, rate: float, one_connection: bool = True
) -> list[tuple[int, int]]:
    """The e2e case with the broker's stamps on for its measured part; the
    (received ns, stamped ns) of each message the listener saw."""
    from bench import _e2e
    from bench.client_bench import PyrmqAdapter
    from pyrmq import Producer

    seen: list[tuple[int, int]] = []
    async with Producer("bench-e2e-stages", srv.namesrv) as p:
        a = PyrmqAdapter(srv, p, one_connection=one_connection)
        body = _e2e.body_of(128)
        s = await a.new_stream("stages")
        await a.awaited_send(s, bytes(8) + body[8:])()
        probe = _e2e.LatencyProbe()
        saw = probe.saw

        def seen_too(b: bytes) -> None:
            seen.append((time.perf_counter_ns(), int.from_bytes(b[:8], "big")))
            saw(b)

        probe.saw = seen_too  # type: ignore[method-assign]
        stop = await a.listen(s, probe)
        fire = a.fire(s, _e2e.Flow())

        async def start_stamps() -> None:
            await asyncio.sleep(1.0)  # the warm-up
            EVENTS.clear()
            seen.clear()
            os.kill(srv.pid, signal.SIGUSR1)

        starter = asyncio.ensure_future(start_stamps())
        await _e2e.fixed_rate(fire, body, rate, 1.0, seconds, probe)
        await starter
        os.kill(srv.pid, signal.SIGUSR2)
        await asyncio.sleep(0.5)
        await stop()
    return [x for x in seen if x[1]]


def _two_fds(events: list[Any]) -> tuple[int, int]:
    """The two fds written most: (smaller frames, larger frames)."""
    sizes: dict[int, list[int]] = defaultdict(list)
    for _, kind, n, fd in events:
        if kind == "W":
            sizes[fd].append(n)
    busiest = sorted(sizes, key=lambda fd: -len(sizes[fd]))[:2]
    small, large = sorted(busiest, key=lambda fd: statistics.median(sizes[fd]))
    return small, large


def _labelled(events: list[Any], small: str, large: str) -> list[Any]:
    """events with each write labelled by what it carries: as stamped, or
    for stamps where every write is "W", `small` on the fd of the smaller
    frames and `large` on the other (_two_fds)."""
    if any(e[1].startswith("W") and e[1] != "W" for e in events):
        return events
    small_fd, large_fd = _two_fds(events)
    names = {small_fd: small, large_fd: large}
    return [(t, names.get(fd, "W") if k == "W" else k, n, fd) for t, k, n, fd in events]


def _fd_of(events: list[Any], kind: str) -> int | None:
    """The fd most of the `kind` writes went to."""
    fds = [e[3] for e in events if e[1] == kind]
    return max(set(fds), key=fds.count) if fds else None


class _Timeline:
    def __init__(self, events: list[Any]) -> None:
        self.ev = sorted(tuple(e) for e in events)
        self.t = [e[0] for e in self.ev]

    def next(
        self, t: int, kind: str | tuple[str, ...], fd: int | None = None, within: int = 5_000_000
    ) -> int | None:
        """The time of the first event of `kind` (one of them, for a tuple)
        on fd at or after t."""
        kinds = (kind,) if isinstance(kind, str) else kind
        for i in range(bisect.bisect_left(self.t, t), len(self.ev)):
            e = self.ev[i]
            if e[0] - t > within:
                return None
            if e[1] in kinds and (fd is None or e[3] == fd):
                return int(e[0])
        return None


#: the broker writes a chunk's woken pull answers before its acks, or
#: with them in one write on one connection (SendFastPath._settle), so
#: both are followed from the settle
STAGES = (
    ("stamp", "send_async", "client: stamped -> send_async called"),
    ("send_async", "c_send", "client: send_async -> the send's write"),
    ("c_send", "b_read", "the broker wakes and reads it"),
    ("b_read", "split", "broker: read -> C split"),
    ("split", "settle", "broker: checks, C put -> settle"),
    ("settle", "wake", "broker: settle -> held pulls woken"),
    ("wake", "b_pull", "broker: woken -> pull answer written"),
    ("b_pull", "b_ack", "broker: pull answer written -> ack written"),
    ("b_pull", "c_pull", "client: pull answer written -> read"),
    ("b_ack", "c_ack", "client: ack written -> ack read"),
    ("c_pull", "pulled", "client: pull answer read -> _pulled"),
    ("pulled", "seen", "client: _pulled -> the listener sees it"),
    ("stamp", "seen", "total"),
)


def stages(client: list[Any], broker: list[Any], seen: list[tuple[int, int]]) -> dict[str, Any]:
    """Per stage, the p50, p90 and p99 in µs over the messages followed,
    and the stages of the slowest 1% (_tail)."""
    client = _labelled(client, PULL, SEND)
    broker = _labelled(broker, ACK, ANSWER)
    c, b = _Timeline(client), _Timeline(broker)
    # where the client reads a pull's answer and a send's ack: one fd
    # when it produces and consumes on one connection
    c_pull_fd, c_send_fd = _fd_of(client, PULL), _fd_of(client, SEND)
    got: dict[str, list[int]] = defaultdict(list)
    #: (total, {stage: µs}) of every message followed, for the tail
    each: list[tuple[int, dict[str, int]]] = []
    followed = 0
    for seen_at, stamp in seen:
        at: dict[str, int | None] = {"stamp": stamp, "seen": seen_at}
        at["send_async"] = c.next(stamp, "send_async")
        at["c_send"] = c.next(stamp, SEND)
        if at["c_send"] is None:
            continue
        at["b_read"] = b.next(at["c_send"], "R")
        if at["b_read"] is None:
            continue
        at["split"] = b.next(at["b_read"], "split")
        at["settle"] = b.next(at["b_read"], "settle")
        if at["settle"] is None:
            continue
        at["wake"] = b.next(at["settle"], "wake")
        at["b_pull"] = b.next(at["settle"], (ANSWER, ANSWER_ACK))
        at["b_ack"] = b.next(at["settle"], (ACK, ANSWER_ACK))
        if at["b_pull"] is None or at["b_pull"] > seen_at or at["b_ack"] is None:
            continue
        at["c_ack"] = c.next(at["b_ack"], "R", c_send_fd)
        at["c_pull"] = c.next(at["b_pull"], "R", c_pull_fd)
        if at["c_pull"] is not None:
            at["pulled"] = c.next(at["c_pull"], "pulled")
        followed += 1
        mine: dict[str, int] = {}
        for a, z, name in STAGES:
            ta, tz = at.get(a), at.get(z)
            if ta is not None and tz is not None and tz >= ta:
                got[name].append(tz - ta)
                mine[name] = tz - ta
        each.append((seen_at - stamp, mine))
    rows = {}
    for _, _, name in STAGES:
        xs = sorted(got[name])
        if xs:
            rows[name] = {
                "p50_us": round(pct(xs, 0.5) / 1000, 1),
                "p90_us": round(pct(xs, 0.9) / 1000, 1),
                "p99_us": round(pct(xs, 0.99) / 1000, 1),
                "n": len(xs),
            }
    return {"messages": len(seen), "followed": followed, "stages": rows, "tail": _tail(each)}


def _tail(each: list[tuple[int, dict[str, int]]]) -> dict[str, Any]:
    """The slowest 1% of the messages followed (total at or above the
    p99): the median of each of their stages, to set beside the stage's
    median over all (which stage a slow message lost its time in)."""
    if not each:
        return {"messages": 0, "stages": {}}
    p99 = pct(sorted(t for t, _ in each), 0.99)
    slow = [m for t, m in each if t >= p99]
    stages = {}
    for _, _, name in STAGES:
        xs = sorted(m[name] for m in slow if name in m)
        if xs:
            stages[name] = round(pct(xs, 0.5) / 1000, 1)
    return {"messages": len(slow), "from_us": round(p99 / 1000, 1), "stages": stages}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["broker"]:
        broker_main(argv[1:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--dir", type=work_dir, default=tempfile.gettempdir())
    ap.add_argument("--json", help="write the result here too")
    ap.add_argument("--config", help="a broker.conf for the standalone (-c)")
    ap.add_argument(
        "--connections",
        type=int,
        choices=(1, 2),
        default=1,
        help="1: the producer rides the consumer's connection (as bench.duel); 2: its own",
    )
    args = ap.parse_args(argv)
    import bench.broker_load as bl

    install(CLIENT_MARKS)
    workdir = tempfile.mkdtemp(prefix="pyrmq-bench-stages-", dir=args.dir)
    out = os.path.join(workdir, "broker-stamps.json")
    os.environ["STAGES_OUT"] = out
    cmd = [sys.executable, "-m", "bench.e2e_stages", "broker", "standalone",
           "--store", os.path.join(workdir, "store"), "--namesrv-port", "0",
           "--broker-port", "0", "--host", "127.0.0.1", "--flush", "ASYNC_FLUSH",
           # the stamps patch asyncio's selector transport: uvloop's, the
           # servers' default, are C and cannot be stamped
           "--event-loop", "asyncio"]  # fmt: skip
    if args.config:
        cmd += ["-c", os.path.abspath(args.config)]
    try:
        with bl._spawn("standalone", cmd, workdir) as srv:
            seen = asyncio.run(_drive(srv, args.seconds, args.rate, args.connections == 1))
            with open(out) as f:
                broker = json.load(f)
    finally:
        # the store preallocates its segments: ~2.5 GB left behind a run
        shutil.rmtree(workdir, ignore_errors=True)
    doc = {
        "rate": args.rate,
        "seconds": args.seconds,
        "connections": args.connections,
        **stages(EVENTS, broker, seen),
    }
    tail = doc["tail"]
    print(f"{doc['followed']:,} of {doc['messages']:,} messages followed; µs:")
    print(f"  {'stage':48s} {'p50':>8s} {'p90':>8s} {'p99':>8s} {'slowest 1%':>11s}")
    for name, row in doc["stages"].items():
        slow = tail["stages"].get(name)
        print(
            f"  {name:48s} {row['p50_us']:8.1f} {row['p90_us']:8.1f} {row['p99_us']:8.1f}"
            f" {'' if slow is None else f'{slow:11.1f}'}"
        )
    print(
        f"  the slowest 1%: {tail['messages']} messages of {tail.get('from_us', 0):.0f} µs"
        " and more, each stage's median among them"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
