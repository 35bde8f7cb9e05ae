"""The gRPC proxy beside the remoting path, in one run, against one
``pyrmq standalone --enable-proxy`` (ASYNC_FLUSH, 128-byte bodies):

1. **Load generators.** Pipelined single sends from ``--procs`` processes:
   over remoting, bench.pipelined's pre-encoded SEND_MESSAGE frames; over
   gRPC, pre-serialized SendMessageRequest bytes on grpc.aio channels with
   ``--window`` calls in flight per channel (one message a call, as the
   5.x SDKs send). Acknowledged sends per second, broker CPU per message,
   and every acknowledged message counted in the topic afterwards.
2. **The floor**: the same gRPC load against a grpc.aio server whose one
   method echoes its request: what the Python gRPC server costs a call.
3. **The official 5.x SDK** (rocketmq-python-client, installed as the
   interop tests do): sync sends (latency per send), async sends, and a
   SimpleConsumer receiving and acking them all; beside pyrmq's own client
   over remoting doing the same sends.

    python -m bench.grpc_proxy [--seconds 5] [--procs 2] [--sdk-messages 2000]

Prints a table and writes JSON to --out."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from bench import broker_load as bl
from bench import pipelined
from bench._children import LoadProcesses
from pyrmq.proxy.protocol import SERVICE, pb

TOPIC = "GrpcBench"
#: the SDK's own topic: its consumer reads a topic from its start
SDK_TOPIC = "GrpcBenchSdk"
QUEUES = 8
BODY = 128


def _requests(n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        m = pb.Message(body=b"x" * BODY)
        m.topic.name = TOPIC
        m.system_properties.message_id = f"01{uuid.uuid4().hex[:32].upper()}"
        m.system_properties.message_type = pb.NORMAL
        m.system_properties.tag = "TagA"
        m.system_properties.born_host = "127.0.0.1"
        out.append(pb.SendMessageRequest(messages=[m]).SerializeToString())
    return out


#: the floor: a grpc.aio server whose one method returns its request
ECHO_METHOD = "/pyrmq.bench.Echo/Echo"


def _echo_server(addr_out: Any) -> None:
    import grpc

    async def serve() -> None:
        async def echo(raw: bytes, context: Any) -> bytes:
            return raw

        server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(echo)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("pyrmq.bench.Echo", {"Echo": handler}),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        addr_out.put(f"127.0.0.1:{port}")
        await server.wait_for_termination()

    asyncio.run(serve())


async def _grpc_proc(
    addr: str,
    channels: int,
    window: int,
    warmup: float,
    duration: float,
    idx: int,
    ready: Any,
    method: str = f"/{SERVICE}/SendMessage",
) -> dict[str, Any]:
    import grpc

    reqs = _requests(1024)
    ok = bad = 0
    chans = [grpc.aio.insecure_channel(addr) for _ in range(channels)]
    meta = (("x-mq-client-id", f"bench-{idx}-{uuid.uuid4().hex[:8]}"),)
    stubs = [c.unary_unary(method) for c in chans]
    echo = method == ECHO_METHOD
    running = True

    async def loop_one(stub: Any, k: int) -> None:
        nonlocal ok, bad
        i = k
        while running:
            raw = await stub(reqs[i % len(reqs)], metadata=meta, timeout=30)
            if echo or pb.SendMessageResponse.FromString(raw).status.code == pb.Code.OK:
                ok += 1
            else:
                bad += 1
            i += 7

    for s in stubs:  # connect before the clock starts
        await s(reqs[0], metadata=meta, timeout=30)
    t_start = ready()
    tasks = [asyncio.ensure_future(loop_one(s, k)) for s in stubs for k in range(window)]
    await asyncio.sleep(max(0.0, t_start + warmup - time.monotonic()))
    t0, c0, cpu0 = time.monotonic(), ok, time.process_time()
    await asyncio.sleep(max(0.0, t_start + warmup + duration - time.monotonic()))
    t1, c1, cpu1 = time.monotonic(), ok, time.process_time()
    running = False
    await asyncio.wait(tasks, timeout=30)
    for c in chans:
        await c.close()
    return {"msgs": c1 - c0, "secs": t1 - t0, "bad": bad, "total_ok": ok,
            "gen_cpu_s": cpu1 - cpu0}  # fmt: skip


def grpc_load(server: bl.Server, procs: int, channels: int, window: int, warmup: float,
              duration: float) -> dict[str, Any]:  # fmt: skip
    jobs = [(server.grpc, channels, window, warmup, duration, i) for i in range(procs)]
    with bl.BlockingClient(server.broker) as c:
        before = sum(bl.max_offsets(c, TOPIC, QUEUES))
        with LoadProcesses(_grpc_proc, jobs) as kids:
            t_start = kids.start()
            time.sleep(max(0.0, t_start + warmup - time.monotonic()))
            cpu0, w0 = server.cpu_s(), time.monotonic()
            time.sleep(max(0.0, t_start + warmup + duration - time.monotonic()))
            cpu1, w1 = server.cpu_s(), time.monotonic()
            results = kids.results(timeout=120)
        stored = sum(bl.max_offsets(c, TOPIC, QUEUES)) - before
    rate = sum(r["msgs"] / r["secs"] for r in results)
    return {
        "msgs_per_s": rate,
        "bad": sum(r["bad"] for r in results),
        "acked_total": sum(r["total_ok"] for r in results),
        "stored_total": stored,
        "server_cpu_us_per_msg": (cpu1 - cpu0) / max(1, rate * (w1 - w0)) * 1e6,
        "gen_cpu_util": sum(r["gen_cpu_s"] for r in results) / (w1 - w0),
    }


def echo_floor(
    procs: int, channels: int, window: int, warmup: float, duration: float
) -> dict[str, Any]:
    """The same load against a grpc.aio server that only echoes: what a
    call costs the Python gRPC server before any work of ours."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    srv = ctx.Process(target=_echo_server, args=(q,), daemon=True)
    srv.start()
    try:
        addr = q.get(timeout=60)
        jobs = [(addr, channels, window, warmup, duration, i) for i in range(procs)]
        with LoadProcesses(_echo_proc, jobs) as kids:
            t_start = kids.start()
            time.sleep(max(0.0, t_start + warmup - time.monotonic()))
            cpu0, w0 = bl.proc_cpu_s(srv.pid or 0), time.monotonic()
            time.sleep(max(0.0, t_start + warmup + duration - time.monotonic()))
            cpu1, w1 = bl.proc_cpu_s(srv.pid or 0), time.monotonic()
            results = kids.results(timeout=120)
    finally:
        srv.terminate()
        srv.join(10)
    rate = sum(r["msgs"] / r["secs"] for r in results)
    return {
        "calls_per_s": rate,
        "server_cpu_us_per_call": (cpu1 - cpu0) / max(1, rate * (w1 - w0)) * 1e6,
    }


async def _echo_proc(
    addr: str, channels: int, window: int, warmup: float, duration: float, idx: int, ready: Any
) -> dict[str, Any]:
    return await _grpc_proc(addr, channels, window, warmup, duration, idx, ready, ECHO_METHOD)


def sdk_runs(server: bl.Server, n: int) -> dict[str, Any]:
    sys.path.insert(0, str(bl.REPO))
    from tests.interop import sdk5

    topic = SDK_TOPIC
    bl.create_topic(server.broker, topic, QUEUES)
    bl.wait_route(server.namesrv, topic)
    out: dict[str, Any] = {}
    t = time.perf_counter()
    sent = sdk5.run("send", timeout=600, endpoint=server.grpc, topic=topic, n=n, prefix="sync")
    out["sdk_sync_send_s"] = time.perf_counter() - t
    lat = sorted(o["ms"] for o in sent)
    out["sdk_sync_send_ms"] = {
        "p50": lat[len(lat) // 2],
        "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
    }
    t = time.perf_counter()
    sdk5.run("send", timeout=600, endpoint=server.grpc, topic=topic, n=n, prefix="async",
             **{"async": True})  # fmt: skip
    out["sdk_async_send_s"] = time.perf_counter() - t
    t = time.perf_counter()
    got = sdk5.run("simple", timeout=900, endpoint=server.grpc, topic=topic,
                   group=f"GID_bench_{uuid.uuid4().hex[:6]}", want=2 * n, seconds=600,
                   invisible_s=60, mode="ack", batch=32)  # fmt: skip
    out["sdk_receive_ack_s"] = time.perf_counter() - t
    out["sdk_received"] = sum(1 for o in got if "recv" in o)
    out["sdk_sent"] = len(sent) * 2
    return out


def own_client(server: bl.Server, n: int) -> dict[str, Any]:
    """pyrmq's own client over remoting, one send at a time, beside the SDK."""
    from pyrmq import Message, Producer

    async def run() -> dict[str, Any]:
        p = Producer("GID_bench_own", server.namesrv)
        await p.start()
        try:
            lat = []
            t0 = time.perf_counter()
            for i in range(n):
                t = time.perf_counter()
                await p.send(Message(SDK_TOPIC, f"own-{i}".encode(), tags="TagA"))
                lat.append((time.perf_counter() - t) * 1000)
            total = time.perf_counter() - t0
        finally:
            await p.shutdown()
        lat.sort()
        return {
            "own_sync_send_s": total,
            "own_sync_send_ms": {"p50": lat[n // 2], "p99": lat[min(n - 1, int(n * 0.99))]},
        }

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--channels", type=int, default=4)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sdk-messages", type=int, default=2000)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="pyrmq-grpc-bench-")
    doc: dict[str, Any] = {"args": vars(a), "rounds": []}
    with bl.standalone(root, extra=("--enable-proxy", "--grpc-port", "0")) as srv:
        bl.create_topic(srv.broker, TOPIC, QUEUES)
        bl.wait_route(srv.namesrv, TOPIC)
        for r in range(a.rounds):  # alternate, so drift hits both alike
            rem = pipelined.send_load(
                srv,
                TOPIC,
                QUEUES,
                BODY,
                procs=a.procs,
                conns=a.channels,
                window=a.window,
                warmup=a.warmup,
                duration=a.seconds,
            )
            grp = grpc_load(srv, a.procs, a.channels, a.window, a.warmup, a.seconds)
            row = {"remoting": rem["msgs_per_s"], "grpc": grp["msgs_per_s"],
                   "remoting_cpu_us": rem["server_cpu_us_per_msg"],
                   "grpc_cpu_us": grp["server_cpu_us_per_msg"],
                   "grpc_acked": grp["acked_total"], "grpc_stored": grp["stored_total"],
                   "grpc_bad": grp["bad"]}  # fmt: skip
            doc["rounds"].append(row)
            print(f"round {r}: remoting {row['remoting']:,.0f}/s "
                  f"({row['remoting_cpu_us']:.1f} us/msg), gRPC {row['grpc']:,.0f}/s "
                  f"({row['grpc_cpu_us']:.1f} us/msg); gRPC acked {row['grpc_acked']} "
                  f"stored {row['grpc_stored']}", flush=True)  # fmt: skip
        floor = echo_floor(a.procs, a.channels, a.window, a.warmup, a.seconds)
        doc["grpc_echo_floor"] = floor
        us = floor["server_cpu_us_per_call"]
        print(f"grpc.aio echo floor: {floor['calls_per_s']:,.0f} calls/s, {us:.0f} us a call")
        if a.sdk_messages:
            doc["sdk"] = sdk_runs(srv, a.sdk_messages)
            doc["own"] = own = own_client(srv, a.sdk_messages)
            q = own["own_sync_send_ms"]
            print(f"pyrmq's client over remoting: sync send "
                  f"{a.sdk_messages / own['own_sync_send_s']:,.0f}/s "
                  f"(p50 {q['p50']:.2f} ms, p99 {q['p99']:.2f} ms)", flush=True)  # fmt: skip
            s = doc["sdk"]
            n = a.sdk_messages
            q = s["sdk_sync_send_ms"]
            print(f"SDK: sync send {n / s['sdk_sync_send_s']:,.0f}/s "
                  f"(p50 {q['p50']:.2f} ms, p99 {q['p99']:.2f} ms), async "
                  f"{n / s['sdk_async_send_s']:,.0f}/s, receive+ack "
                  f"{s['sdk_received'] / s['sdk_receive_ack_s']:,.0f}/s "
                  f"({s['sdk_received']} of {s['sdk_sent']})", flush=True)  # fmt: skip
    ratios = [row["grpc"] / row["remoting"] for row in doc["rounds"]]
    doc["grpc_over_remoting_median"] = statistics.median(ratios)
    print(f"gRPC / remoting, median of {len(ratios)} rounds: {statistics.median(ratios):.3f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
