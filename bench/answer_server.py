"""A trivial answer-only server: the reference the broker is compared with.

It speaks just enough of the protocol for the C++ producer and the load
generators, on one port that is both its name server and its broker:

- GET_ROUTEINTO_BY_TOPIC (105): a route of ``--queues`` queues on itself;
- HEART_BEAT (34), UNREGISTER_CLIENT (35), UPDATE_AND_CREATE_TOPIC (17): SUCCESS;
- SEND_MESSAGE (10/310/320): SUCCESS with string extFields msgId, queueId and
  queueOffset. It stores nothing; it counts messages per queue;
- GET_MAX_OFFSET (30): the number of messages counted on that queue, so the
  benchmarks read its throughput the way they read the broker's.

It uses the broker's own remoting layer (``pyrmq.remoting``: codec,
Connection, RemotingServer), so a broker/answer-server ratio measures what
the broker adds on top of that layer: header parsing, the store, the
processors.

Usage: ``python -m bench.answer_server [--host H] [--port P] [--queues N]
[--ready-file F]`` (the ready file gets {"namesrv", "broker", "pid"}, as
``pyrmq standalone`` writes it; SIGTERM stops it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys

from pyrmq.remoting import RemotingCommand, RemotingServer, RequestCode, ResponseCode
from pyrmq.remoting.connection import Connection


class AnswerServer:
    """Answers without storing; ``counts[queue_id]`` messages seen."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, queues: int = 4) -> None:
        self.host = host
        self.queues = queues
        self.server = RemotingServer(host, port, name="answer")
        self.counts: dict[int, int] = {}
        self._route = b""
        s = self.server
        s.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.route)
        for code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT,
                     RequestCode.UPDATE_AND_CREATE_TOPIC):
            s.register(code, self.ok)
        for code in (10, 310, 320):
            s.register(code, self.send)
        s.register(RequestCode.GET_MAX_OFFSET, self.max_offset)

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.server.port}"

    async def start(self) -> None:
        await self.server.start()
        self._route = json.dumps({
            "brokerDatas": [{"brokerAddrs": {"0": self.addr}, "brokerName": "answer",
                             "cluster": "DefaultCluster"}],
            "filterServerTable": {},
            "queueDatas": [{"brokerName": "answer", "perm": 6, "readQueueNums": self.queues,
                            "topicSysFlag": 0, "writeQueueNums": self.queues}],
        }).encode()

    async def shutdown(self) -> None:
        await self.server.shutdown()

    def route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self._route)

    def ok(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS)

    def send(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        f = cmd.ext_fields
        qid = f.get("queueId") or f.get("e") or "0"
        q = int(qid)
        n = self.counts.get(q, 0)
        self.counts[q] = n + 1
        return cmd.response(ResponseCode.SUCCESS, {
            "msgId": f"7F00000100002A9F{n:016X}", "queueId": qid, "queueOffset": str(n)})

    def max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        q = int(cmd.ext_fields.get("queueId") or 0)
        return cmd.response(ResponseCode.SUCCESS, {"offset": str(self.counts.get(q, 0))})


async def _serve(args: argparse.Namespace) -> int:
    srv = AnswerServer(args.host, args.port, args.queues)
    await srv.start()
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"namesrv": srv.addr, "broker": srv.addr, "pid": os.getpid()}, f)
        os.replace(tmp, args.ready_file)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await srv.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--queues", type=int, default=4, help="queues in every route (4)")
    p.add_argument("--ready-file", default=None)
    return asyncio.run(_serve(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
