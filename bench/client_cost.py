"""The producer's own cost per pipelined single send, counted two ways.

    python -m bench.client_cost [--sends 200000] [--auto-batch | --awaited]
    python -m bench.client_cost --callgrind [--auto-batch | --awaited]

A ``pyrmq standalone`` (ASYNC_FLUSH) takes 128 B ``send_async`` calls from
one Producer, 1,024 unacknowledged, acked from the send callback (the
shape of bench.duel --pipelined's pyrmq rows, without Redis beside it).
The window is this module's own loop calling ``send_async`` directly, not
bench._e2e.windowed: that driver awaits a ``submit`` coroutine per message,
which every system's row pays alike but is not the producer's cost.

- Plain: msgs/s and this process's CPU µs per send, plus the garbage
  collector's passes per 100k sends (a per-send object the collector
  tracks costs twice: once made, once traversed).
- ``--callgrind``: the client process runs under valgrind's callgrind at
  two send counts (3,000 and 13,000 by default) and the difference of the
  instruction totals over the 10,000 sends between them is printed:
  instructions a send, start-up and imports left out. Instruction counts
  do not move with the machine's load (times on a shared 2-vCPU VM move
  by ±15 %), so two trees can be compared run against run. The broker
  runs natively beside it; ~2 minutes.
- ``--awaited``: one ``await producer.send()`` at a time instead, from a
  Producer as users get it (auto_batch on: each send goes alone), the
  shape of bench.duel's one-at-a-time rows. Under callgrind the client is
  many times slower than the broker, so each answer is there when it
  looks: the count leaves out the loop turns a native client spends
  waiting, and is the client's own work a send.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench import broker_load as bl
from bench._args import work_dir

WINDOW = 1024
BODY = b"x" * 128


async def _run(
    namesrv: str, sends: int, auto_batch: bool, awaited: bool = False
) -> dict[str, float]:
    from pyrmq import Message, Producer

    p = Producer("bench-client-cost", namesrv, auto_batch=auto_batch or awaited)
    await p.start()
    try:
        await p.send(Message("ClientCost", BODY))  # route, connection, heartbeat
        return await _measured(_one_at_a_time(p) if awaited else _windowed(p), sends)
    finally:
        await p.shutdown()


#: ``await run(n)``: n sends made, (wall seconds, process CPU seconds)
Run = Callable[[int], Awaitable[tuple[float, float]]]


async def _measured(run: Run, sends: int) -> dict[str, float]:
    """`sends` sends by run after a warm-up (caches, buffers, specialised
    bytecode), and the collector's passes over them."""
    await run(min(sends, 2000))
    gc.collect()
    before = gc.get_stats()[0]["collections"]
    wall, cpu = await run(sends)
    passes = gc.get_stats()[0]["collections"] - before
    return {
        "msgs_per_s": sends / wall,
        "client_us_per_msg": cpu / sends * 1e6,
        "gc_gen0_per_100k": passes / sends * 100_000,
    }


def _windowed(p: Any) -> Run:
    """send_async with WINDOW unacknowledged, acked from the callback."""
    from pyrmq import Message

    done = 0
    sent = 0
    room = asyncio.Event()

    def acked(_r: object, _e: BaseException | None) -> None:
        nonlocal done
        done += 1
        if sent - done <= WINDOW // 2:
            room.set()

    async def window(n: int) -> tuple[float, float]:
        nonlocal sent, done
        sent = done = 0
        t0, c0 = time.perf_counter(), time.process_time()
        while sent < n:
            if sent - done >= WINDOW:
                room.clear()
                await asyncio.wait_for(room.wait(), 30)
            p.send_async(Message("ClientCost", BODY), acked)
            sent += 1
        while done < n:
            room.clear()
            await asyncio.wait_for(room.wait(), 30)
        return time.perf_counter() - t0, time.process_time() - c0

    return window


def _one_at_a_time(p: Any) -> Run:
    """One awaited send at a time."""
    from pyrmq import Message

    async def one_at_a_time(n: int) -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            r = await p.send(Message("ClientCost", BODY))
            if not r.ok:
                raise RuntimeError(f"send: {r}")
        return time.perf_counter() - t0, time.process_time() - c0

    return one_at_a_time


def _callgrind(args: argparse.Namespace) -> int:
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    totals = []
    with tempfile.TemporaryDirectory(prefix="pyrmq-client-cost-") as tmp:
        for n in (args.low, args.high):
            out = os.path.join(tmp, f"cg.{n}")
            cmd = [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "bench.client_cost",
                "--sends",
                str(n),
                "--dir",
                args.dir,
            ]
            if args.auto_batch:
                cmd.append("--auto-batch")
            if args.awaited:
                cmd.append("--awaited")
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(out) as f:
                m = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
            if m is None:
                print(f"no instruction total in {out}", file=sys.stderr)
                return 1
            totals.append(int(m.group(1)))
    per = (totals[1] - totals[0]) / (args.high - args.low)
    kind = (
        "awaited, one at a time"
        if args.awaited
        else "pipelined, auto-batched"
        if args.auto_batch
        else "pipelined, single"
    )
    print(
        f"{per:,.0f} instructions a send ({kind}; callgrind, "
        f"{args.high - args.low:,} sends differenced)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sends", type=int, default=200_000)
    ap.add_argument("--auto-batch", action="store_true", help="Producer(auto_batch=True)")
    ap.add_argument(
        "--awaited", action="store_true", help="one awaited send at a time (auto_batch on)"
    )
    ap.add_argument("--callgrind", action="store_true", help="instructions a send, by callgrind")
    ap.add_argument("--low", type=int, default=3000, help="--callgrind's smaller count")
    ap.add_argument("--high", type=int, default=13000, help="--callgrind's larger count")
    ap.add_argument("--dir", type=work_dir, default=tempfile.gettempdir())
    args = ap.parse_args(argv)
    if args.callgrind:
        return _callgrind(args)
    with bl.standalone(args.dir) as srv:
        r = asyncio.run(_run(srv.namesrv, args.sends, args.auto_batch, args.awaited))
    print(
        f"{r['msgs_per_s']:,.0f} msgs/s, client {r['client_us_per_msg']:.2f} µs CPU a send, "
        f"{r['gc_gen0_per_100k']:,.0f} gen-0 collections per 100k sends"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
