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
slower).

    python -m bench.duel [--rounds 10] [--seconds 1.0] [--size 128] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench import _e2e
from bench import broker_load as bl


def _pct(xs: list[int], p: float) -> float:
    return round(_e2e.pct(sorted(xs), p) / 1e6, 4)


def run(
    root: str,
    rounds: int = 10,
    seconds: float = 1.0,
    size: int = 128,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Start both servers under root, alternate `rounds` rounds, stop them."""
    from bench.client_bench import PyrmqAdapter
    from bench.peers import _servers, missing
    from bench.peers.redis_streams import RedisAdapter
    from pyrmq import Producer

    why = missing("redis-everysec")
    if why:
        return {"skipped": why}
    body = _e2e.body_of(size)
    with (
        bl.standalone(root, "ASYNC_FLUSH") as psrv,
        _servers.redis_server(root, "everysec") as rsrv,
    ):
        log(f"duel: pyrmq pid {psrv.pid}, {rsrv.version} pid {rsrv.pid}")

        async def main() -> dict[str, Any]:
            async with Producer("bench-duel", psrv.namesrv) as p:
                pa = PyrmqAdapter(psrv, p)
                ra = await RedisAdapter.connect(rsrv.host, rsrv.port)
                try:
                    sends = {}
                    for name, a in (("pyrmq", pa), ("redis-everysec", ra)):
                        stream = await a.new_stream(f"duel{size}")
                        send = a.awaited_send(stream, body)
                        for _ in range(200):  # connection, route, files, caches
                            await send()
                        sends[name] = send
                    per_round: dict[str, list[float]] = {n: [] for n in sends}
                    pooled: dict[str, list[int]] = {n: [] for n in sends}
                    order = list(sends)
                    for k in range(rounds):
                        for name in order if k % 2 == 0 else order[::-1]:
                            _, _, rtt = await _e2e.awaited(sends[name], 10**7, seconds)
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
                        }
                        for name in order
                    }
                finally:
                    await ra.close()

        systems = asyncio.run(main())
    p, r = systems["pyrmq"]["median_p50_ms"], systems["redis-everysec"]["median_p50_ms"]
    return {
        "rounds": rounds,
        "seconds": seconds,
        "body": size,
        "systems": systems,
        "ratio": round(r / p, 3) if p else None,
        "pyrmq_faster_rounds": sum(
            a <= b
            for a, b in zip(
                systems["pyrmq"]["p50_ms_per_round"],
                systems["redis-everysec"]["p50_ms_per_round"],
                strict=True,
            )
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    doc = run(
        args.dir,
        args.rounds,
        args.seconds,
        args.size,
        lambda m: print(m, file=sys.stderr, flush=True),
    )
    doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(doc, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
