"""Scale: produce throughput with 1, 2 and 4 broker processes on this
machine, and throughput and latency with 1 to 1,000 client connections to
one broker.

Brokers are ``pyrmq broker`` processes with a name server
(pyrmq.testing.ProcessCluster), ASYNC_FLUSH, production store sizes (quick:
128 MiB CommitLog segments). The load is pre-encoded SEND_MESSAGE frames of
128 B, shaped like the C++ client's (``bench.broker_load.send_ring``: KEYS,
TAGS, a distinct UNIQ_KEY per frame in a ring of 8,192, 8 queues), pipelined
over many connections from load processes (fork), each connection keeping
``window`` requests outstanding and sending a new one per answer. Every
request's round trip is timed (answers come back in order on a connection).
Each case: connect everything, then warm-up, then a fixed window.

- ``brokers``: N = 1, 2, 4 brokers; 8 connections (2 processes x 4) with
  256 outstanding each, spread round robin over the brokers: the same
  offered load, split N ways. **This machine has 2 CPUs** (see
  ``config.machine``) shared by the brokers and the load processes, so more
  broker processes cannot add CPU beyond 2; the figure shows what the extra
  processes cost or gain there, not how the system scales on more cores.
- ``connections``: one broker; C = 1, 10, 100, 1,000 connections (over 1
  process for C = 1, else 2) with 4 outstanding each: per-connection costs
  (wake-ups, writes, memory per connection) as clients multiply. The soft
  RLIMIT_NOFILE is raised in-process if needed (brokers and load processes
  inherit it).

``run(out_dir, quick)`` writes ``scale.json`` into out_dir and returns::

    {"config": {...budget, machine, nofile, tree},
     "brokers": [{"brokers": n, "connections": 8, "window": 256,
                  "produce_rate": msgs/s (all brokers), "per_broker_rate": [...],
                  "p50_ms": ..., "p99_ms": ..., "p999_ms": ...,
                  "broker_cpu_util": [share of one CPU, per broker],
                  "broker_cpu_total": ..., "gen_cpu_util": ...,
                  "rss_mib": [per broker], "rss_anon_mib": [per broker],
                  "bad": n, "stored": n, "acked": n}, ...],
     "connections": [{"connections": c, "brokers": 1, "window": 4,
                      "produce_rate": ..., "p50_ms": ..., "p99_ms": ...,
                      "p999_ms": ..., "max_ms": ..., "broker_cpu_util": ...,
                      "rss_mib": ..., "rss_anon_mib": ..., "broker_fds": ...,
                      "gen_cpu_util": ..., "connect_s": ..., "bad": n}, ...]}

``python -m bench.scale [--quick] [--brokers 1,2,4] [--connections
1,10,100,1000] [--seconds S] [--dir WORKDIR] --out DIR``.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import collections
import dataclasses
import functools
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import rmqcore
from bench import _cluster as cl
from bench import broker_load as bl
from bench._args import work_dir
from bench._children import LoadProcesses
from bench.pipelined import NoDelayProtocol
from pyrmq.testing.cluster import ProcessCluster

TOPIC = "BenchScale"
QUEUES = 8
BODY_LEN = 128
_OK_HEAD = b'{"code":0,'


@dataclasses.dataclass(frozen=True)
class Budget:
    brokers: tuple[int, ...]
    connections: tuple[int, ...]
    seconds: float
    warmup_s: float
    segment_bytes: int
    #: brokers case: connections in all and outstanding requests on each
    broker_conns: int = 8
    broker_window: int = 256
    #: connections case: outstanding requests per connection
    conn_window: int = 4


FULL = Budget(
    brokers=(1, 2, 4),
    connections=(1, 10, 100, 1000),
    seconds=5.0,
    warmup_s=1.0,
    segment_bytes=rmqcore.DEFAULT_COMMIT_LOG_FILE_SIZE,
)
QUICK = Budget(
    brokers=(1, 2, 4),
    connections=(1, 10, 100, 1000),
    seconds=2.0,
    warmup_s=0.5,
    segment_bytes=128 * cl.MIB,
)


# -- the load: connections that time every request -------------------------------------


class _Stats:
    def __init__(self) -> None:
        self.measuring = False
        self.lat = array.array("d")


class _TimedSender(NoDelayProtocol):
    """Keeps `window` frames of the ring outstanding; records each answer's
    round trip while stats.measuring (answers on one connection come back in
    the order of the requests: the broker serves a connection in order)."""

    def __init__(
        self, ring: bytes, flen: int, window: int, start_frame: int, stats: _Stats
    ) -> None:
        self.ring = memoryview(ring)
        self.flen = flen
        self.frames = len(ring) // flen
        self.window = window
        self.pos = start_frame % self.frames
        self.stats = stats
        self.sent_at: collections.deque[float] = collections.deque()
        self.buf = bytearray()
        self.ok = 0
        self.bad = 0
        self.sending = False

    def start(self) -> None:
        self.sending = True
        self._send(self.window)

    def _send(self, k: int) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        self.sent_at.extend([time.perf_counter()] * k)
        while k:
            m = min(k, self.frames - self.pos)
            t.write(self.ring[self.pos * self.flen : (self.pos + m) * self.flen])
            self.pos = (self.pos + m) % self.frames
            k -= m

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        now = time.perf_counter()
        measuring, lat, sent_at = self.stats.measuring, self.stats.lat, self.sent_at
        pos, end, n = 0, len(buf), 0
        while end - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big")
            if end - pos - 4 < size:
                break
            if buf[pos + 8 : pos + 18] == _OK_HEAD:
                self.ok += 1
            else:
                self.bad += 1
            t = sent_at.popleft()
            if measuring:
                lat.append(now - t)
            n += 1
            pos += 4 + size
        if pos:
            del buf[:pos]
        if self.sending and n:
            self._send(n)


async def _load(
    targets: list[tuple[str, int]],
    ring: bytes,
    flen: int,
    window: int,
    first_conn: int,
    warmup: float,
    duration: float,
    ready: Callable[[], float],
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    stats = _Stats()
    conns: list[tuple[str, _TimedSender]] = []
    t0 = time.monotonic()
    k = first_conn
    for addr, count in targets:
        host, _, port = addr.rpartition(":")
        for lo in range(0, count, 50):  # a few at a time: the listen backlog is finite
            batch = []
            for _ in range(min(50, count - lo)):
                batch.append(
                    loop.create_connection(
                        functools.partial(_TimedSender, ring, flen, window, k * 997, stats),
                        host,
                        int(port),
                    )
                )
                k += 1
            for _, proto in await asyncio.gather(*batch):
                conns.append((addr, proto))
    connect_s = time.monotonic() - t0
    t_start = ready()  # everybody is connected
    for _, p in conns:
        p.start()
    await asyncio.sleep(max(0.0, t_start + warmup - time.monotonic()))
    stats.measuring = True
    c0 = {id(p): p.ok for _, p in conns}
    w0, cpu0 = time.monotonic(), time.process_time()
    await asyncio.sleep(max(0.0, t_start + warmup + duration - time.monotonic()))
    stats.measuring = False
    w1, cpu1 = time.monotonic(), time.process_time()
    per_addr: dict[str, int] = {}
    for addr, p in conns:
        per_addr[addr] = per_addr.get(addr, 0) + p.ok - c0[id(p)]
        p.sending = False
    drain = time.monotonic() + 15.0
    while any(p.sent_at for _, p in conns) and time.monotonic() < drain:
        await asyncio.sleep(0.01)
    for _, p in conns:
        if p.transport is not None:
            p.transport.close()
    await asyncio.sleep(0.05)
    return {
        "msgs": sum(per_addr.values()),
        "secs": w1 - w0,
        "per_addr": per_addr,
        "bad": sum(p.bad for _, p in conns),
        "acked": sum(p.ok for _, p in conns),
        "unanswered": sum(len(p.sent_at) for _, p in conns),
        "gen_cpu_s": cpu1 - cpu0,
        "connect_s": connect_s,
        "lat": stats.lat.tobytes(),
    }


def _pct(xs: list[float], p: float) -> float | None:
    return round(xs[min(len(xs) - 1, int(len(xs) * p))] * 1e3, 3) if xs else None


def load(
    brokers: list[bl.Server], conns: int, window: int, procs: int, warmup: float, duration: float
) -> dict[str, Any]:
    """conns connections spread round robin over the brokers and over procs
    load processes, window outstanding on each; the measured window's
    throughput, latency percentiles and the brokers' CPU and memory."""
    ring, flen = bl.send_ring(TOPIC, QUEUES, BODY_LEN)
    plans: list[dict[str, int]] = [{} for _ in range(procs)]
    for g in range(conns):
        addr = brokers[g % len(brokers)].broker
        plan = plans[g % procs]
        plan[addr] = plan.get(addr, 0) + 1
    plans = [p for p in plans if p]
    jobs = []
    first = 0
    for plan in plans:
        jobs.append((list(plan.items()), ring, flen, window, first, warmup, duration))
        first += sum(plan.values())
    before = _stored(brokers)
    with LoadProcesses(_load, jobs) as kids:
        t_start = kids.start()
        time.sleep(max(0.0, t_start + warmup - time.monotonic()))
        cpu0, w0 = [b.cpu_s() for b in brokers], time.monotonic()
        time.sleep(max(0.0, t_start + warmup + duration - time.monotonic()))
        cpu1, w1 = [b.cpu_s() for b in brokers], time.monotonic()
        status = [cl.proc_status(b.pid) for b in brokers]
        outs = kids.results(timeout=120)
    stored = _stored(brokers) - before
    lat = sorted(x for o in outs for x in array.array("d", o["lat"]))
    secs = max(o["secs"] for o in outs)
    per_addr = {b.broker: sum(o["per_addr"].get(b.broker, 0) for o in outs) for b in brokers}
    cpu = [(c1 - c0) / (w1 - w0) for c0, c1 in zip(cpu0, cpu1, strict=True)]
    return {
        "connections": conns,
        "window": window,
        "procs": len(plans),
        "produce_rate": sum(o["msgs"] for o in outs) / secs,
        "per_broker_rate": [per_addr[b.broker] / secs for b in brokers],
        "p50_ms": _pct(lat, 0.5),
        "p99_ms": _pct(lat, 0.99),
        "p999_ms": _pct(lat, 0.999),
        "max_ms": round(lat[-1] * 1e3, 3) if lat else None,
        "samples": len(lat),
        "broker_cpu_util": [round(c, 3) for c in cpu],
        "broker_cpu_total": round(sum(cpu), 3),
        "gen_cpu_util": round(sum(o["gen_cpu_s"] for o in outs) / secs, 3),
        "rss_mib": [s["rss_mib"] for s in status],
        "rss_anon_mib": [s["rss_anon_mib"] for s in status],
        "broker_fds": [s["fds"] for s in status],
        "connect_s": round(max(o["connect_s"] for o in outs), 3),
        "bad": sum(o["bad"] for o in outs),
        "unanswered": sum(o["unanswered"] for o in outs),
        "acked": sum(o["acked"] for o in outs),
        "stored": stored,
        "secs": secs,
    }


def _stored(brokers: list[bl.Server]) -> int:
    n = 0
    for b in brokers:
        with bl.BlockingClient(b.broker) as c:
            n += sum(bl.max_offsets(c, TOPIC, QUEUES))
    return n


# -- the run ------------------------------------------------------------------------


def _cluster(work: pathlib.Path, n: int, b: Budget) -> ProcessCluster:
    names = [f"broker-{chr(ord('a') + i)}" for i in range(n)]
    return ProcessCluster(
        work / f"brokers{n}", names, broker_conf=cl.production_conf(b.segment_bytes)
    )


def _check(r: dict[str, Any], what: str) -> None:
    if r["bad"] or r["unanswered"] or r["stored"] < r["acked"]:
        raise RuntimeError(
            f"{what}: {r['bad']} failed, {r['unanswered']} unanswered, "
            f"{r['stored']:,} stored of {r['acked']:,} acknowledged"
        )


def run(
    out_dir: pathlib.Path,
    quick: bool,
    *,
    brokers: tuple[int, ...] | None = None,
    connections: tuple[int, ...] | None = None,
    seconds: float | None = None,
    work_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Both sweeps; writes out_dir/scale.json. brokers/connections/seconds
    override the budget's; work_dir: where the stores live (a temp folder,
    removed afterwards)."""
    b = QUICK if quick else FULL
    if brokers is not None:
        b = dataclasses.replace(b, brokers=tuple(brokers))
    if connections is not None:
        b = dataclasses.replace(b, connections=tuple(connections))
    if seconds is not None:
        b = dataclasses.replace(b, seconds=seconds, warmup_s=min(b.warmup_s, seconds / 2))
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    nofile = cl.raise_nofile(4 * max(b.connections, default=1) + 1024)
    work = pathlib.Path(tempfile.mkdtemp(prefix="pyrmq-bench-scale-", dir=work_dir))
    t0 = time.monotonic()
    by_brokers: list[dict[str, Any]] = []
    by_conns: list[dict[str, Any]] = []
    try:
        for n in b.brokers:
            with _cluster(work, n, b) as c:
                servers = [cl.server(c, name) for name in c.brokers]
                for s in servers:
                    bl.create_topic(s.broker, TOPIC, QUEUES)
                cl.log(
                    f"scale: {n} broker(s), {b.broker_conns} connections x "
                    f"{b.broker_window} outstanding"
                )
                r = load(servers, b.broker_conns, b.broker_window, 2, b.warmup_s, b.seconds)
                _check(r, f"{n} brokers")
                by_brokers.append({"brokers": n, **r})
                cl.log(
                    f"  {r['produce_rate']:,.0f} msg/s (per broker "
                    f"{', '.join(f'{x:,.0f}' for x in r['per_broker_rate'])}); broker CPU "
                    f"{r['broker_cpu_util']}, load CPU {r['gen_cpu_util']}; "
                    f"p99 {r['p99_ms']} ms"
                )
            shutil.rmtree(work / f"brokers{n}", ignore_errors=True)
        if b.connections:
            with _cluster(work, 1, b) as c:
                srv = cl.server(c, "broker-a")
                bl.create_topic(srv.broker, TOPIC, QUEUES)
                for conns in b.connections:
                    cl.log(f"scale: {conns} connection(s) x {b.conn_window} outstanding")
                    r = load(
                        [srv], conns, b.conn_window, 1 if conns == 1 else 2, b.warmup_s, b.seconds
                    )
                    _check(r, f"{conns} connections")
                    row = {"brokers": 1, **r}
                    for k in ("broker_cpu_util", "rss_mib", "rss_anon_mib", "broker_fds"):
                        row[k] = r[k][0]
                    del row["per_broker_rate"]
                    by_conns.append(row)
                    cl.log(
                        f"  {r['produce_rate']:,.0f} msg/s, p50 {r['p50_ms']} ms, p99 "
                        f"{r['p99_ms']} ms; broker CPU {row['broker_cpu_util']}, RSS "
                        f"{row['rss_mib']} MiB (anon {row['rss_anon_mib']}), "
                        f"{row['broker_fds']} fds; connected in {r['connect_s']} s"
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "config": {
            **dataclasses.asdict(b),
            "quick": quick,
            "body_len": BODY_LEN,
            "queues": QUEUES,
            "machine": cl.machine(),
            "nofile": nofile,
            "tree": cl.git_tree(),
            "secs": round(time.monotonic() - t0, 1),
        },
        "brokers": by_brokers,
        "connections": by_conns,
    }
    (out_dir / "scale.json").write_text(json.dumps(result, indent=1))
    return result


def table(res: dict[str, Any]) -> str:
    lines = [
        "| brokers | msg/s (all) | per broker | p50 / p99 ms | broker CPU | load CPU | "
        "RSS MiB (anon) |",
        "|---:|---:|---|---|---|---:|---|",
    ]
    for r in res["brokers"]:
        per = " / ".join(f"{x:,.0f}" for x in r["per_broker_rate"])
        cpu = " / ".join(f"{x:.0%}" for x in r["broker_cpu_util"])
        rss = " / ".join(f"{a} ({b})" for a, b in zip(r["rss_mib"], r["rss_anon_mib"], strict=True))
        lines.append(
            f"| {r['brokers']} | {r['produce_rate']:,.0f} | {per} | {r['p50_ms']} / "
            f"{r['p99_ms']} | {cpu} | {r['gen_cpu_util']:.0%} | {rss} |"
        )
    lines += [
        "",
        "| connections | msg/s | p50 / p99 / p99.9 ms | broker CPU | load CPU | "
        "RSS MiB (anon) | broker fds |",
        "|---:|---:|---|---:|---:|---|---:|",
    ]
    for r in res["connections"]:
        lines.append(
            f"| {r['connections']:,} | {r['produce_rate']:,.0f} | {r['p50_ms']} / "
            f"{r['p99_ms']} / {r['p999_ms']} | {r['broker_cpu_util']:.0%} | "
            f"{r['gen_cpu_util']:.0%} | {r['rss_mib']} ({r['rss_anon_mib']}) | "
            f"{r['broker_fds']} |"
        )
    return "\n".join(lines)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 s windows, 128 MiB segments")
    p.add_argument("--brokers", type=_ints, default=None, help="e.g. 1,2,4")
    p.add_argument("--connections", type=_ints, default=None, help="e.g. 1,10,100,1000")
    p.add_argument("--seconds", type=float, default=None, help="measured window (s)")
    p.add_argument(
        "--dir", type=work_dir, default=None, help="where the stores live (default: $TMPDIR)"
    )
    p.add_argument("--out", required=True, help="folder for scale.json")
    args = p.parse_args(argv)
    res = run(
        pathlib.Path(args.out),
        args.quick,
        brokers=args.brokers,
        connections=args.connections,
        seconds=args.seconds,
        work_dir=args.dir,
    )
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
