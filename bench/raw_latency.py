"""Produce-to-consume latency over raw remoting frames (bench.broker_report
section d, ``python -m bench.broker_load latency``).

One connection holds a long-poll pull (sysFlag 6, suspendTimeoutMillis
15000) on every queue, another sends C++-shaped SEND_MESSAGE frames at a
fixed rate with the send time in the body; latency = receive time - send
time, counted for what was sent after the warm-up. Each send's round trip
is reported too.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import rmqcore
from bench._e2e import latency_fields
from bench.broker_load import CONSUMER_GROUP, Server, cpp_properties, create_topic, send_fields
from pyrmq.remoting.command import RemotingCommand


async def _latency(addr: str, topic: str, queues: int, rate: float, warmup: float,
                   duration: float, body_len: int) -> dict[str, Any]:
    from pyrmq.remoting import RemotingClient

    client = RemotingClient(name="bench-consumer")
    producer = RemotingClient(name="bench-producer")
    pconn = await producer.connection(addr)
    cconn = await client.connection(addr)
    lat_ns: list[int] = []
    rtt_ns: list[int] = []
    t_start = time.perf_counter_ns()
    measure_from = t_start + int(warmup * 1e9)
    stop_at = measure_from + int(duration * 1e9)
    stopping = False
    bad: dict[str, int] = {}

    offsets = []
    for q in range(queues):
        r = await cconn.invoke(RemotingCommand(30, {"topic": topic, "queueId": str(q)}), 5)
        offsets.append(int(r.ext_fields["offset"]))

    async def consume(q: int) -> None:
        off = offsets[q]
        while not stopping:
            fields = {
                "commitOffset": "-1", "consumerGroup": CONSUMER_GROUP, "maxMsgNums": "32",
                "queueId": str(q), "queueOffset": str(off), "subVersion": "0",
                "subscription": "*", "suspendTimeoutMillis": "15000", "sysFlag": "6",
                "topic": topic}
            resp = await cconn.invoke(RemotingCommand(11, fields), 30)
            now = time.perf_counter_ns()
            if resp.code == 0:
                for rec in rmqcore.decode_records(resp.body, False):
                    sent = int.from_bytes(rec["body"][:8], "big")
                    if sent >= measure_from:
                        lat_ns.append(now - sent)
            elif resp.code != 19:
                bad[str(resp.code)] = bad.get(str(resp.code), 0) + 1
            off = int(resp.ext_fields.get("nextBeginOffset", off))

    consumers = [asyncio.create_task(consume(q)) for q in range(queues)]
    await asyncio.sleep(0.2)  # the pulls are held before the first send
    pad = b"\x00" * (body_len - 8)
    sends: list[asyncio.Future[RemotingCommand]] = []

    async def send_one(i: int) -> None:
        t = time.perf_counter_ns()
        cmd = RemotingCommand(10, send_fields(topic, i % queues, cpp_properties(i), t // 10**6),
                              t.to_bytes(8, "big") + pad, language="CPP", version=63)
        r = await pconn.invoke(cmd, 10)
        if t >= measure_from:
            rtt_ns.append(time.perf_counter_ns() - t)
        if r.code != 0:
            bad[f"send {r.code}"] = bad.get(f"send {r.code}", 0) + 1

    t0 = time.perf_counter_ns()
    i = 0
    sent = 0
    while True:
        due = t0 + int(i * 1e9 / rate)
        now = time.perf_counter_ns()
        if now >= stop_at:
            break
        if due > now:
            await asyncio.sleep((due - now) / 1e9)
        sends.append(asyncio.ensure_future(send_one(i)))
        if time.perf_counter_ns() >= measure_from:
            sent += 1
        i += 1
    await asyncio.gather(*sends)
    await asyncio.sleep(0.5)  # the last messages reach the consumer
    stopping = True
    for t in consumers:
        t.cancel()
    await asyncio.gather(*consumers, return_exceptions=True)
    await client.shutdown()
    await producer.shutdown()
    return {
        "rate": rate, "duration_s": duration, "sent": sent, "received": len(lat_ns),
        "achieved_rate": sent / duration, "bad": bad,
        **latency_fields(lat_ns), **latency_fields(rtt_ns, "send_rtt_"),
    }


def latency(server: Server, topic: str, queues: int = 4, rate: float = 1000.0,
            warmup: float = 1.0, duration: float = 10.0, body_len: int = 128) -> dict[str, Any]:
    create_topic(server.broker, topic, queues)
    return asyncio.run(_latency(server.broker, topic, queues, rate, warmup, duration, body_len))
