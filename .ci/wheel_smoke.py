"""Smoke test of an installed pyrmq wheel, run by .ci/wheels against a
`pyrmq standalone` it started: send a few messages with pyrmq.Producer and
read them back with pyrmq.PullConsumer, all within --timeout seconds.

Run it with `python -I` from outside the source tree: the modules must come
from the wheel installed in the venv, which it checks. Prints one line and
exits 0, or exits 1 with the reason."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time


async def smoke(namesrv: str, count: int) -> str:
    import pyrmq
    import rmqcore
    from pyrmq import ConsumeFromWhere, Message, Producer, PullConsumer, SendStatus

    here = os.path.dirname(os.path.abspath(rmqcore.__file__))
    if os.path.dirname(here) != os.path.dirname(os.path.dirname(os.path.abspath(pyrmq.__file__))):
        raise SystemExit(f"pyrmq and rmqcore come from different places: {here}")
    if not here.startswith(sys.prefix) or "site-packages" not in here:
        raise SystemExit(f"rmqcore is not the installed wheel's: {here}")

    run = f"{os.getpid()}-{time.time_ns()}"
    topic = f"WheelSmoke{os.getpid()}"
    bodies = {f"wheel smoke {run} #{i}".encode() for i in range(count)}
    t0 = time.perf_counter()
    async with Producer(f"GID_wheel_smoke_p_{os.getpid()}", namesrv_addr=namesrv) as producer:
        for body in sorted(bodies):
            r = await producer.send(Message(topic, body, tags="smoke", keys=run))
            if r.send_status != SendStatus.SEND_OK:
                raise SystemExit(f"send: {r.send_status}")
    sent = time.perf_counter() - t0

    consumer = PullConsumer(
        f"GID_wheel_smoke_c_{os.getpid()}",
        namesrv_addr=namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(topic, "smoke")
    seen: set[bytes] = set()
    async with consumer:
        while not bodies <= seen:
            seen.update(m.body for m in await consumer.poll(1.0))
        await consumer.commit()
    got = time.perf_counter() - t0 - sent
    return (
        f"sent {count} in {sent:.2f}s, consumed them in {got:.2f}s; "
        f"pyrmq {pyrmq.__version__}, {os.path.basename(rmqcore._core.__file__)}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--namesrv", required=True, help="host:port of the name server")
    ap.add_argument("--count", type=int, default=10, help="messages to send")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds for everything")
    args = ap.parse_args()

    async def bounded() -> str:
        async with asyncio.timeout(args.timeout):
            return await smoke(args.namesrv, args.count)

    try:
        print(asyncio.run(bounded()))
    except TimeoutError:
        print(f"smoke: not done within {args.timeout:.0f}s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
