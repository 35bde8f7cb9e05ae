"""A pyrmq producer in its own process (run inside a network namespace by
tests/ha/test_partition.py): `python -m tests.ha._ns_sender NAMESRV TOPIC
SECONDS`. It sends bodies ns-<n> one at a time for SECONDS and prints one
line per send, flushed:

    OK <wall time> <body> <offsetMsgId>       answered SEND_OK (the id names
                                                the broker that stored it)
    NOT <wall time> <body> <status>             answered another status
    ERR <wall time> <body> <error class>        raised

Once the name server is out of reach it keeps sending on its cached route,
to the master it knew (a client that still reaches a partitioned master)."""

from __future__ import annotations

import asyncio
import sys
import time

from pyrmq.common.errors import RMQError
from pyrmq.common.message import Message
from pyrmq.common.results import SendStatus
from pyrmq.producer import Producer


async def main(namesrv: str, topic: str, seconds: float) -> None:
    async with Producer(
        "ha-ns-sender", namesrv, send_msg_timeout=2.0, retry_times_when_send_failed=0
    ) as p:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            body = f"ns-{n}"
            n += 1
            try:
                r = await p.send(Message(topic, body.encode()))
            except RMQError as e:
                print(f"ERR {time.time():.3f} {body} {type(e).__name__}", flush=True)
                await asyncio.sleep(0.05)
                continue
            if r.send_status is SendStatus.SEND_OK:
                print(f"OK {time.time():.3f} {body} {r.offset_msg_id}", flush=True)
            else:
                print(f"NOT {time.time():.3f} {body} {r.send_status.name}", flush=True)
            await asyncio.sleep(0.01)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
