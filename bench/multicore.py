"""What a second core buys the broker: the C send threads against the
event loop alone, in alternating rounds.

    python -m bench.multicore [--rounds 6] [--seconds 6] [--window 256]

Each round starts a fresh ``pyrmq standalone`` (ASYNC_FLUSH) per setup and
runs bench.broker_load's send load against it (128 B C++-shaped
SEND_MESSAGE frames, 2 processes x 4 connections x --window outstanding).
The setups, in this order every round:

- ``1 core``: the broker's threads on CPU 0, sendMessageThreadPoolNums=1
  (the event loop serves every send), the load generator on CPU 1;
- ``2 cores, loop``: the broker on CPUs 0-1, still the loop alone, the
  generator on CPU 1;
- ``2 cores, loop + 1 thread``: the broker on CPUs 0-1 with one C send
  thread (sendMessageThreadPoolNums=2), the generator on CPU 1;
- ``free, loop`` and ``free, loop + 1 thread``: nothing pinned (how a
  2-core machine runs it by default, the generator beside the broker).

Printed per setup: the median msgs/s and broker CPU µs a message over the
rounds, that CPU split by thread name (the event loop, ``SendMessage_<n>``,
``BuildIndex``...: bench.broker_load.thread_cpu_s), and the share of sends
the C send threads served; then the
median over rounds of each round's ratio of a setup to ``1 core`` and of
the threads to the loop alone on the same CPUs (ratios taken within a
round, so the machine's drift between rounds cancels). Needs at least 2
CPUs; the stores are removed after each run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import operator
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from bench import broker_load as bl
from bench import pipelined as pl
from bench._args import work_dir
from bench._runs import paired_ratio
from pyrmq.remoting import RequestCode

#: (name, broker CPUs or None, generator CPUs or None, sendMessageThreadPoolNums)
SETUPS: list[tuple[str, set[int] | None, set[int] | None, int]] = [
    ("1 core", {0}, {1}, 1),
    ("2 cores, loop", {0, 1}, {1}, 1),
    ("2 cores, loop + 1 thread", {0, 1}, {1}, 2),
    ("free, loop", None, None, 1),
    ("free, loop + 1 thread", None, None, 2),
]

RATIOS = [
    ("2 cores, loop + 1 thread", "1 core"),
    ("2 cores, loop + 1 thread", "2 cores, loop"),
    ("free, loop + 1 thread", "free, loop"),
]


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of pid on cpus (threads it starts later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def _generator_on(cpus: set[int] | None) -> Iterator[None]:
    """This process (and the load processes it starts) on cpus."""
    before = os.sched_getaffinity(0)
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _served_on_threads(broker: str) -> tuple[int, int]:
    """(sendFastPathServed, sendFastPathServedOnThreads) of the broker."""
    with bl.BlockingClient(broker) as c:
        resp = c.call(RequestCode.GET_BROKER_RUNTIME_INFO, {})
    info = json.loads(resp.body)["table"]
    return int(info.get("sendFastPathServed", 0)), int(info.get("sendFastPathServedOnThreads", 0))


def one_run(
    root: str, setup: tuple[str, set[int] | None, set[int] | None, int], seconds: float, window: int
) -> dict[str, Any]:
    name, broker_cpus, gen_cpus, threads = setup
    with bl.standalone(root, "ASYNC_FLUSH", conf={"sendMessageThreadPoolNums": threads}) as srv:
        if broker_cpus is not None:
            _pin(srv.pid, broker_cpus)
        topic = "BenchMulticore"
        bl.create_topic(srv.broker, topic, 8)
        with _generator_on(gen_cpus):
            r = pl.send_load(srv, topic, 8, 128, 2, 4, window, 1.0, seconds)
        served, on_threads = _served_on_threads(srv.broker)
    return {
        "setup": name,
        "msgs_per_s": r["msgs_per_s"],
        "broker_us_per_msg": r["server_cpu_us_per_msg"],
        "broker_us_per_msg_by_thread": r["server_cpu_us_per_msg_by_thread"],
        "broker_cpu_util": r["server_cpu_util"],
        "gen_cpu_util": r["gen_cpu_util"],
        "bad": r["bad"],
        "threads_share": on_threads / served if served else 0.0,
        "c_share": served / r["acked_total"] if r["acked_total"] else 0.0,
    }


def _by_thread(rs: list[dict[str, Any]]) -> str:
    """Each thread's median µs a message over the runs (0 where a run had
    none of it), the largest first: which threads did the work."""
    splits = [r["broker_us_per_msg_by_thread"] for r in rs]
    names = {n for split in splits for n in split}
    return bl.by_thread_text({n: statistics.median(s.get(n, 0.0) for s in splits) for n in names})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--window", type=int, default=256, help="outstanding sends per connection")
    ap.add_argument(
        "--dir", type=work_dir, default=tempfile.gettempdir(), help="where the stores go"
    )
    ap.add_argument("--json", help="write every run here")
    args = ap.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        print("bench.multicore needs at least 2 CPUs", file=sys.stderr)
        return 2
    runs: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for setup in SETUPS:
            r = one_run(args.dir, setup, args.seconds, args.window)
            r["round"] = rnd
            runs.append(r)
            print(
                f"round {rnd + 1}/{args.rounds} {r['setup']:<26} {r['msgs_per_s']:>10,.0f} msgs/s"
                f"  broker {r['broker_us_per_msg']:.2f} µs/msg ({r['broker_cpu_util']:.0%} CPU)"
                f"  in C {r['c_share']:.0%}, on threads {r['threads_share']:.0%}"
                f"  generator {r['gen_cpu_util']:.0%}" + (f"  BAD {r['bad']}" if r["bad"] else ""),
                flush=True,
            )
    print(
        f"\n128 B SEND_MESSAGE, 2 x 4 connections x {args.window} outstanding, "
        f"{args.rounds} rounds of {args.seconds:.0f} s (medians)"
    )
    print(
        "| setup | msgs/s | broker CPU µs/msg | of which, by thread | broker CPU "
        "| on C send threads |"
    )
    print("|---|---:|---:|---|---:|---:|")
    for name, *_ in SETUPS:
        rs = [r for r in runs if r["setup"] == name]
        print(
            f"| {name} | {statistics.median(r['msgs_per_s'] for r in rs):,.0f} | "
            f"{statistics.median(r['broker_us_per_msg'] for r in rs):.2f} | {_by_thread(rs)} | "
            f"{statistics.median(r['broker_cpu_util'] for r in rs):.0%} | "
            f"{statistics.median(r['threads_share'] for r in rs):.0%} |"
        )
    print("\n| ratio (within each round) | median | rounds |")
    print("|---|---:|---|")
    for a, b in RATIOS:
        # runs are in round order, so the two lists pair up round by round
        ra = [r for r in runs if r["setup"] == a]
        rb = [r for r in runs if r["setup"] == b]
        rate = operator.itemgetter("msgs_per_s")
        per = ", ".join(f"{rate(x) / rate(y):.2f}" for x, y in zip(ra, rb, strict=True))
        print(f"| {a} ÷ {b} | {paired_ratio(ra, rb, rate):.2f} | {per} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
