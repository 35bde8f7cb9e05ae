"""One-at-a-time acknowledged send latency, pyrmq beside Redis, in
alternating rounds.

The suite's awaited case runs pyrmq in part 2 and Redis in part 3, minutes
apart. On a shared 2-vCPU VM a round trip's p50 moves by ±15 % from one
minute to the next (how long an idle vCPU takes to wake), which is as large
as the difference being judged. Here both servers run at once — a ``pyrmq
standalone`` (ASYNC_FLUSH) and ``redis-server`` (AOF everysec), each as in
its own part — and the same client process alternates between them: round
k sends for ``seconds`` to one, then to the other, the order swapped every
round, with the same code (bench._e2e.awaited through each system's
adapter: ``await producer.send(Message(...))`` for pyrmq, ``await
redis.xadd(...)`` for Redis) and the same 128 B body. Reported per system:
every round's p50, the median of those p50s, and the p50/p99 of all round
trips pooled; ``ratio`` is Redis's median p50 over pyrmq's (≥ 1: pyrmq no
slower). ``pyrmq`` is a Producer with its defaults (auto_batch on);
``pyrmq-nobatch`` one with auto_batch=False, alternating in the same
rounds: what client auto-batching costs a lone awaited send.
``pyrmq`` sends to a standalone at its defaults, which busy polls where
it can use two CPUs (eventLoopBusyPollUs 100; busy_poll.py);
``pyrmq-nopoll`` (left out with --no-nopoll) is a default Producer sending
to a second standalone with eventLoopBusyPollUs=0: what polling buys.
Each system's server CPU (all its
threads, /proc) over its rounds is reported per send: what the latency
cost the server.

``--pipelined`` runs the other duel, of throughput (issue 18): pipelined
single sends (``send_async`` of one message, 1,024 unacknowledged, acks
counted from callbacks: bench._e2e.windowed) from a Producer with
auto_batch on and from one with it off, beside Redis pipelined XADD
(pipelines of 64, as part 3 sends them); pyrmq ASYNC_FLUSH beside Redis
AOF everysec and pyrmq SYNC_FLUSH beside Redis AOF always, all four
servers up at once and every system once per round, the order reversed
every other round. Reported: each system's median msgs/s over the rounds,
and each ratio taken round by round, then the median. Every acknowledged
message is counted in its topic or stream after each run (GET_MAX_OFFSET,
XLEN); a shortfall is in ``lost`` and fails the duel.

    python -m bench.duel [--rounds 10] [--seconds 1.0] [--size 128] [--json out.json]
    python -m bench.duel --pipelined [--rounds 5] [--seconds 2.0]
    python -m bench.duel --e2e [--rounds 6] [--seconds 5.0] [--rate 1000]

``--e2e`` runs the produce-to-consume duel with NATS JetStream (issue 18):
stamped messages at a fixed rate, each system's usual push consumer
timing them on arrival, alternating rounds (run_e2e says how).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench import _e2e
from bench import broker_load as bl
from bench._args import work_dir
from bench._cluster import git_tree


def _pct(xs: list[int], p: float) -> float:
    return round(_e2e.pct(sorted(xs), p) / 1e6, 4)


def run(
    root: str,
    rounds: int = 10,
    seconds: float = 1.0,
    size: int = 128,
    log: Callable[[str], None] = lambda _m: None,
    nopoll: bool = True,
) -> dict[str, Any]:
    """Start the servers under root, alternate `rounds` rounds, stop them."""
    from bench.client_bench import PyrmqAdapter
    from bench.peers import _servers, missing
    from bench.peers.redis_streams import RedisAdapter
    from pyrmq import Producer
    from pyrmq.broker.busy_poll import default_poll_us

    why = missing("redis-everysec")
    if why:
        return {"skipped": why}
    body = _e2e.body_of(size)
    with contextlib.ExitStack() as stack:
        psrv = stack.enter_context(bl.standalone(root, "ASYNC_FLUSH"))
        unpolled = None
        if nopoll:
            conf = {"eventLoopBusyPollUs": 0}
            unpolled = stack.enter_context(bl.standalone(root, "ASYNC_FLUSH", conf=conf))
        rsrv = stack.enter_context(_servers.redis_server(root, "everysec"))
        log(f"duel: pyrmq pid {psrv.pid}, {rsrv.version} pid {rsrv.pid}")
        #: each system's server process, whose CPU time a send is charged
        server_cpu: dict[str, Callable[[], float]] = {
            "pyrmq": psrv.cpu_s,
            "pyrmq-nobatch": psrv.cpu_s,
            "redis-everysec": rsrv.cpu_s,
        }
        if unpolled is not None:
            server_cpu["pyrmq-nopoll"] = unpolled.cpu_s

        async def main() -> dict[str, Any]:
            async with contextlib.AsyncExitStack() as clients:
                p = await clients.enter_async_context(Producer("bench-duel", psrv.namesrv))
                p1 = await clients.enter_async_context(
                    Producer("bench-duel-nobatch", psrv.namesrv, auto_batch=False)
                )
                adapters: list[tuple[str, Any]] = [
                    ("pyrmq", PyrmqAdapter(psrv, p)),
                    ("pyrmq-nobatch", PyrmqAdapter(psrv, p1)),
                ]
                if unpolled is not None:
                    pp = await clients.enter_async_context(
                        Producer("bench-duel-nopoll", unpolled.namesrv)
                    )
                    adapters.append(("pyrmq-nopoll", PyrmqAdapter(unpolled, pp)))
                ra = await RedisAdapter.connect(rsrv.host, rsrv.port)
                clients.push_async_callback(ra.close)
                adapters.append(("redis-everysec", ra))
                sends = {}
                for name, a in adapters:
                    stream = await a.new_stream(f"duel{size}")
                    send = a.awaited_send(stream, body)
                    for _ in range(200):  # connection, route, files, caches
                        await send()
                    sends[name] = send
                per_round: dict[str, list[float]] = {n: [] for n in sends}
                pooled: dict[str, list[int]] = {n: [] for n in sends}
                cpu_s = dict.fromkeys(sends, 0.0)
                order = list(sends)
                for k in range(rounds):
                    for name in order if k % 2 == 0 else order[::-1]:
                        c0 = server_cpu[name]()
                        _, _, rtt = await _e2e.awaited(sends[name], 10**7, seconds)
                        cpu_s[name] += server_cpu[name]() - c0
                        per_round[name].append(_pct(rtt, 0.5))
                        pooled[name] += rtt
                    log(
                        f"  round {k + 1}: "
                        + ", ".join(f"{n} p50 {per_round[n][-1]:.3f} ms" for n in order)
                    )
                return {
                    name: {
                        "p50_ms_per_round": per_round[name],
                        "median_p50_ms": round(statistics.median(per_round[name]), 4),
                        "pooled_p50_ms": _pct(pooled[name], 0.5),
                        "pooled_p99_ms": _pct(pooled[name], 0.99),
                        "sends": len(pooled[name]),
                        #: the server process's CPU (all its threads) per send
                        "server_cpu_us_per_send": round(cpu_s[name] / len(pooled[name]) * 1e6, 1),
                    }
                    for name in order
                }

        systems = asyncio.run(main())
    r = systems["redis-everysec"]["median_p50_ms"]

    def ratio(name: str) -> float | None:
        p = systems[name]["median_p50_ms"] if name in systems else 0
        return round(r / p, 3) if p else None

    p, nb = systems["pyrmq"]["median_p50_ms"], systems["pyrmq-nobatch"]["median_p50_ms"]
    return {
        "rounds": rounds,
        "seconds": seconds,
        "body": size,
        #: eventLoopBusyPollUs the defaults gave `pyrmq` on this machine
        "busy_poll_us": default_poll_us(),
        "systems": systems,
        "ratio": ratio("pyrmq"),
        #: Redis's median p50 over pyrmq's with eventLoopBusyPollUs=0
        "no_poll_ratio": ratio("pyrmq-nopoll"),
        #: auto_batch on over off, median p50s (> 1: batching slower)
        "auto_batch_p50_ratio": round(p / nb, 3) if nb else None,
        "pyrmq_faster_rounds": sum(
            a <= b
            for a, b in zip(
                systems["pyrmq"]["p50_ms_per_round"],
                systems["redis-everysec"]["p50_ms_per_round"],
                strict=True,
            )
        ),
    }


#: (system, server, auto_batch) of the pipelined duel, in round order
PIPELINED = (
    ("pyrmq-autobatch", "pyrmq ASYNC_FLUSH", True),
    ("pyrmq-single", "pyrmq ASYNC_FLUSH", False),
    ("redis-everysec", "redis everysec", None),
    ("pyrmq-sync-autobatch", "pyrmq SYNC_FLUSH", True),
    ("pyrmq-sync-single", "pyrmq SYNC_FLUSH", False),
    ("redis-always", "redis always", None),
)
#: (ratio name, numerator, denominator) of the pipelined duel
PIPELINED_RATIOS = (
    ("autobatch_vs_redis_everysec", "pyrmq-autobatch", "redis-everysec"),
    ("sync_autobatch_vs_redis_always", "pyrmq-sync-autobatch", "redis-always"),
    ("autobatch_vs_single", "pyrmq-autobatch", "pyrmq-single"),
    ("sync_autobatch_vs_single", "pyrmq-sync-autobatch", "pyrmq-sync-single"),
    ("single_vs_redis_everysec", "pyrmq-single", "redis-everysec"),
    ("sync_single_vs_redis_always", "pyrmq-sync-single", "redis-always"),
)


def run_pipelined(
    root: str,
    rounds: int = 5,
    seconds: float = 2.0,
    size: int = 128,
    window: int = 1024,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """The pipelined duel (module docstring): start the four servers under
    root, run `rounds` rounds of every system, stop them."""
    from bench.client_bench import QUEUES, PyrmqAdapter
    from bench.peers import _servers, missing
    from bench.peers.redis_streams import RedisAdapter
    from pyrmq import Producer

    why = missing("redis-everysec")
    if why:
        return {"skipped": why}
    body = _e2e.body_of(size)
    pipe = 64  # XADDs per Redis pipeline, as part 3's pipelined case
    with (
        bl.standalone(root, "ASYNC_FLUSH") as pa_srv,
        bl.standalone(root, "SYNC_FLUSH") as ps_srv,
        _servers.redis_server(root, "everysec") as re_srv,
        _servers.redis_server(root, "always") as ra_srv,
    ):
        log(f"pipelined duel: pyrmq {pa_srv.pid} / {ps_srv.pid}, redis {re_srv.pid} / {ra_srv.pid}")

        async def main() -> dict[str, Any]:
            def server(where: str) -> bl.Server:
                return pa_srv if "ASYNC" in where else ps_srv

            producers = {
                name: Producer(f"bench-duel-{name}", server(where).namesrv, auto_batch=ab)
                for name, where, ab in PIPELINED
                if ab is not None
            }
            redis = {
                "redis-everysec": await RedisAdapter.connect(re_srv.host, re_srv.port),
                "redis-always": await RedisAdapter.connect(ra_srv.host, ra_srv.port),
            }
            try:
                for p in producers.values():
                    await p.start()
                # name -> (submit, messages per submit, count of what is stored)
                runs: dict[str, tuple[Any, int, Callable[[], Any]]] = {}
                for name, where, ab in PIPELINED:
                    if ab is None:
                        ra = redis[name]
                        stream = await ra.new_stream(f"pi{size}")
                        submit, per = ra.pipelined_submit(stream, body, pipe)
                        count = _redis_count(ra, stream)
                        warm = ra.awaited_send(stream, body)
                    else:
                        srv = server(where)
                        a = PyrmqAdapter(srv, producers[name])
                        topic = await a.new_stream(f"pi{size}")
                        submit, per = a.pipelined_submit(topic, body, pipe)
                        count = _pyrmq_count(srv.broker, topic, QUEUES)
                        warm = a.awaited_send(topic, body)
                    for _ in range(200):  # connection, route, files, caches
                        await warm()
                    runs[name] = (submit, per, count)
                rates: dict[str, list[float]] = {n: [] for n in runs}
                cpu: dict[str, list[float]] = {n: [] for n in runs}
                lost: dict[str, int] = dict.fromkeys(runs, 0)
                order = list(runs)
                for k in range(rounds):
                    for name in order if k % 2 == 0 else order[::-1]:
                        submit, per, count = runs[name]
                        before = await count()
                        c0 = time.process_time()
                        flow, secs = await _e2e.windowed(submit, per, window, 10**8, seconds)
                        c1 = time.process_time()
                        stored = await count() - before
                        lost[name] += max(flow.acked - stored, 0)
                        rates[name].append(round(flow.acked / secs, 1))
                        cpu[name].append(round((c1 - c0) * 1e6 / max(flow.acked, 1), 2))
                    log(
                        f"  round {k + 1}: "
                        + ", ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in order)
                    )
                stats = {n: p.auto_batch_stats for n, p in producers.items()}
                return {"rates": rates, "cpu": cpu, "lost": lost, "auto_batch_stats": stats}
            finally:
                for p in producers.values():
                    await p.shutdown()
                for ra in redis.values():
                    await ra.close()

        got = asyncio.run(main())
    rates = got["rates"]
    systems = {
        name: {
            "server": where,
            "auto_batch": ab,
            "msgs_per_s_per_round": rates[name],
            "median_msgs_per_s": round(statistics.median(rates[name]), 1),
            #: this process's CPU per acknowledged message (the client's,
            #: and the harness's), median over the rounds
            "client_us_per_msg": statistics.median(got["cpu"][name]),
            "lost": got["lost"][name],
        }
        for name, where, ab in PIPELINED
    }
    ratios = {}
    for what, num, den in PIPELINED_RATIOS:
        per_round = [round(a / b, 3) for a, b in zip(rates[num], rates[den], strict=True) if b]
        ratios[what] = {
            "per_round": per_round,
            "median": round(statistics.median(per_round), 3) if per_round else None,
        }
    return {
        "rounds": rounds,
        "seconds": seconds,
        "body": size,
        "window": window,
        "systems": systems,
        "ratios": ratios,
        "auto_batch_stats": got["auto_batch_stats"],
        "lost": sum(got["lost"].values()),
    }


def run_e2e(
    root: str,
    rounds: int = 6,
    seconds: float = 5.0,
    size: int = 128,
    rate: float = 1000.0,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """The produce-to-consume duel (issue 18: p50 and p99 at 1,000 msgs/s
    no worse than NATS's): a ``pyrmq standalone`` (ASYNC_FLUSH) and a
    nats-server with JetStream (file storage) up at once; every round runs
    bench._e2e.e2e_once on each, `rate` stamped messages a second for 1 s
    of warm-up and `seconds` measured, into a fresh topic or stream with
    the system's usual push consumer listening; the order swaps every
    round. Ratios are NATS's median over pyrmq's (>= 1: pyrmq no slower)."""
    from bench.client_bench import PyrmqAdapter
    from bench.peers import _servers, missing
    from bench.peers.nats_js import open_adapter
    from pyrmq import Producer

    why = missing("nats")
    if why:
        return {"skipped": why}
    body = _e2e.body_of(size)
    with bl.standalone(root, "ASYNC_FLUSH") as psrv, _servers.nats_server(root) as nsrv:
        log(f"e2e duel: pyrmq pid {psrv.pid}, {nsrv.version} pid {nsrv.pid}, {rate:,.0f} msgs/s")

        async def main() -> dict[str, list[dict[str, Any]]]:
            async with Producer("bench-duel-e2e", psrv.namesrv) as p:
                na = await open_adapter(nsrv.host, nsrv.port)
                try:
                    adapters: dict[str, Any] = {"pyrmq": PyrmqAdapter(psrv, p), "nats": na}
                    rows: dict[str, list[dict[str, Any]]] = {n: [] for n in adapters}
                    order = list(adapters)
                    for k in range(rounds):
                        for name in order if k % 2 == 0 else order[::-1]:
                            rows[name].append(
                                await _e2e.e2e_once(
                                    adapters[name], size, body, rate, 1.0, seconds, log, name
                                )
                            )
                    return rows
                finally:
                    await na.close()

        got = asyncio.run(main())

    def median(name: str, key: str) -> float:
        # NaN: a round without such messages (no close ones)
        xs = [r[key] for r in got[name] if r[key] == r[key]]
        return round(statistics.median(xs), 4) if xs else float("nan")

    systems = {
        name: {
            "p50_ms_per_round": [r["p50_ms"] for r in rows],
            "p99_ms_per_round": [r["p99_ms"] for r in rows],
            "median_p50_ms": median(name, "p50_ms"),
            "median_p99_ms": median(name, "p99_ms"),
            # messages sent close behind the one before (bench._e2e.close_far_fields)
            "median_close_share": median(name, "close_share"),
            "median_close_p50_ms": median(name, "close_p50_ms"),
            "median_close_p99_ms": median(name, "close_p99_ms"),
            "median_far_p50_ms": median(name, "far_p50_ms"),
            "median_far_p99_ms": median(name, "far_p99_ms"),
            "received": sum(r["received"] for r in rows),
            "sent": sum(r["sent"] for r in rows),
            "failed": sum(r["failed"] for r in rows),
        }
        for name, rows in got.items()
    }
    ps, ns = systems["pyrmq"], systems["nats"]
    return {
        "rounds": rounds,
        "seconds": seconds,
        "rate": rate,
        "body": size,
        "systems": systems,
        "p50_ratio": round(ns["median_p50_ms"] / ps["median_p50_ms"], 3),
        "p99_ratio": round(ns["median_p99_ms"] / ps["median_p99_ms"], 3),
        "lost": sum(s["sent"] - s["received"] + s["failed"] for s in systems.values()),
    }


def _redis_count(ra: Any, stream: str) -> Callable[[], Any]:
    async def count() -> int:
        return int(await ra.r.xlen(stream))

    return count


def _pyrmq_count(broker: str, topic: str, queues: int) -> Callable[[], Any]:
    """Messages stored in topic (the sum of its queues' max offsets)."""

    async def count() -> int:
        def read() -> int:
            with bl.BlockingClient(broker) as c:
                return sum(bl.max_offsets(c, topic, queues))

        return await asyncio.to_thread(read)

    return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--dir", type=work_dir, default=tempfile.gettempdir())
    ap.add_argument("--json")
    ap.add_argument("--pipelined", action="store_true", help="the throughput duel")
    ap.add_argument("--e2e", action="store_true", help="the produce-to-consume duel with NATS")
    ap.add_argument("--rate", type=float, default=1000.0, help="msgs/s of the --e2e duel")
    ap.add_argument(
        "--nopoll",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the one-at-a-time duel also runs pyrmq-nopoll, a broker with eventLoopBusyPollUs=0",
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.e2e:
        doc = run_e2e(args.dir, args.rounds, args.seconds, args.size, args.rate, log=log)
    elif args.pipelined:
        doc = run_pipelined(args.dir, args.rounds, args.seconds, args.size, log=log)
    else:
        doc = run(args.dir, args.rounds, args.seconds, args.size, log, args.nopoll)
    doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
    # both systems' clients ran on this interpreter: results differ by
    # version (from 3.12 pyrmq's listener starts eagerly, nats-py is slower)
    doc["python"] = platform.python_version()
    doc["tree"] = git_tree()
    print(json.dumps(doc, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 1 if doc.get("lost") else 0


if __name__ == "__main__":
    raise SystemExit(main())
