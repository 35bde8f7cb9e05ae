"""The timer under load and crashes (issue: "a million messages scheduled
over the next hour, broker SIGKILLed twice: every one delivered once, none
early, lateness p99 under 1 s; memory flat").

    python -m bench.timer_soak [--messages 1000000] [--spread-s 3600] [--kills 2] [--dir D]

One ``pyrmq standalone`` (ASYNC_FLUSH). A pyrmq Producer sends --messages
messages as fast as it can, each due at a uniformly random time over the
next --spread-s seconds (TIMER_DELIVER_MS; the due time is in the body).
The broker is SIGKILLed --kills times, evenly over the spread, and
restarted on its ports. A reader pulls the topic throughout. At the end:
how many arrived, how many twice, how many early (the delivered record's
store time before its due time), lateness percentiles (store time - due)
of the messages the timer delivered (those due before they could be sent
are stored at once and counted apart),
and the broker's anonymous resident memory (RssAnon: not the mapped store
files) sampled every 10 s (it must not grow with the number of messages
pending). Writes the summary as JSON to --out."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import random
import struct
import tempfile
import time
from typing import Any

from bench._args import work_dir
from pyrmq import Message, Producer
from pyrmq.client.api import PULL_FLAG_SUBSCRIPTION, MQClientAPI
from pyrmq.common.errors import BrokerError, RMQError
from pyrmq.common.message import MessageQueue
from pyrmq.common.results import PullStatus
from pyrmq.remoting import RemotingClient
from pyrmq.testing.cluster import StandaloneProcess

TOPIC = "TimerSoak"
QUEUES = 8
_BODY = struct.Struct(">qq")  # message number, due ms


def rss_kb(pid: int) -> int:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


async def produce(namesrv: str, n: int, spread_s: float, seed: int) -> float:
    rng = random.Random(seed)
    p = Producer("timer-soak", namesrv)
    await p.start()
    start = time.time()
    try:
        window = 256
        sem = asyncio.Semaphore(window)
        failures = 0

        async def one(i: int) -> None:
            nonlocal failures
            due = int((start + 5 + rng.random() * spread_s) * 1000)
            m = Message(TOPIC, _BODY.pack(i, due))
            m.deliver_time_ms = due
            try:
                for attempt in range(50):
                    try:
                        await p.send(m)
                        return
                    except RMQError:
                        await asyncio.sleep(0.2 * (attempt + 1))
                failures += 1
            finally:
                sem.release()

        tasks = set()
        for i in range(n):
            await sem.acquire()
            t = asyncio.ensure_future(one(i))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        while tasks:
            await asyncio.sleep(0.1)
        if failures:
            raise RuntimeError(f"{failures} sends failed")
    finally:
        await p.shutdown()
    return time.time() - start


class Reader:
    def __init__(self, namesrv: str, broker: str) -> None:
        self.api = MQClientAPI(RemotingClient(name="soak-reader"), [namesrv])
        self.broker = broker
        self.offsets = dict.fromkeys(range(QUEUES), 0)
        self.seen: dict[int, int] = {}  # message number -> times seen
        self.lateness_ms: list[int] = []
        self.early = 0
        #: messages whose due time had passed when they were sent: stored at
        #: once, not through the timer (their "lateness" is the send's)
        self.direct = 0

    async def poll_once(self) -> int:
        got = 0
        for qid in range(QUEUES):
            mq = MessageQueue(TOPIC, "broker-a", qid)
            for _ in range(200):
                try:
                    cmd = self.api.pull_command(
                        mq, consumer_group="soak", queue_offset=self.offsets[qid],
                        max_msg_nums=32, sys_flag=PULL_FLAG_SUBSCRIPTION, commit_offset=0,
                        suspend_timeout_ms=0, subscription="*", sub_version=0,
                    )  # fmt: skip
                    r = await self.api.pull_message(
                        self.broker, cmd, timeout=5.0, broker_name=mq.broker_name
                    )
                except (TimeoutError, BrokerError, RMQError, OSError):
                    break
                if r.pull_status is not PullStatus.FOUND:
                    if r.next_begin_offset > self.offsets[qid]:
                        self.offsets[qid] = r.next_begin_offset
                        continue
                    break
                for m in r.msg_found_list:
                    i, due = _BODY.unpack(m.body)
                    self.seen[i] = self.seen.get(i, 0) + 1
                    late = m.store_timestamp - due
                    if late < 0:
                        self.early += 1
                    if "TIMER_OUT_MS" in m.properties:
                        self.lateness_ms.append(late)
                    else:
                        self.direct += 1
                    got += 1
                self.offsets[qid] = r.next_begin_offset
        return got

    async def close(self) -> None:
        await self.api.remoting.shutdown()


def pin_ports(srv: StandaloneProcess) -> None:
    """Restart on the same ports (clients keep their name server)."""
    ns, br = srv.namesrv.rpartition(":")[2], srv.broker.rpartition(":")[2]
    args = list(srv.args)
    args[args.index("--namesrv-port") + 1] = ns
    args[args.index("--broker-port") + 1] = br
    srv.args = args


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    work = pathlib.Path(a.dir or tempfile.mkdtemp(prefix="timer-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    srv = StandaloneProcess(work, {"mappedFileSizeCommitLog": 256 << 20})
    srv.ready_timeout = 300.0
    await srv.start_async()
    pin_ports(srv)
    from pyrmq.admin.client import AdminClient

    async with AdminClient(srv.namesrv) as admin:
        await admin.create_topic(TOPIC, QUEUES, QUEUES, broker_addr=srv.broker)
    t0 = time.time()
    send_s = await produce(srv.namesrv, a.messages, a.spread_s, a.seed)
    print(f"sent {a.messages} in {send_s:.1f} s", flush=True)
    reader = Reader(srv.namesrv, srv.broker)
    kill_at = [t0 + a.spread_s * (k + 1) / (a.kills + 1) for k in range(a.kills)]
    rss: list[tuple[float, int]] = []
    end = t0 + 5 + a.spread_s + a.grace_s
    last_sample = 0.0
    try:
        while time.time() < end and len(reader.seen) < a.messages:
            now = time.time()
            if kill_at and now >= kill_at[0]:
                kill_at.pop(0)
                print(f"{now - t0:.0f} s: SIGKILL broker ({len(reader.seen)} arrived)", flush=True)
                srv.kill()
                await srv.start_async()
            if now - last_sample >= 10 and srv.proc is not None:
                rss.append((round(now - t0, 1), rss_kb(srv.proc.pid)))
                last_sample = now
            await reader.poll_once()
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)
        await reader.poll_once()
    finally:
        await reader.close()
        srv.stop()
    lat = sorted(reader.lateness_ms)

    def pct(q: float) -> int | None:
        return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None

    summary = {
        "messages": a.messages,
        "spread_s": a.spread_s,
        "kills": a.kills,
        "send_s": round(send_s, 1),
        "arrived": len(reader.seen),
        "missing": a.messages - len(reader.seen),
        "twice": sum(1 for v in reader.seen.values() if v > 1),
        "early": reader.early,
        "stored_at_once": reader.direct,
        "lateness_ms": {
            "p50": pct(0.5),
            "p99": pct(0.99),
            "p999": pct(0.999),
            "max": lat[-1] if lat else None,
        },
        "rss_kb": rss,
        "store": str(work),
    }
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--spread-s", type=float, default=3600.0)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--grace-s", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dir", type=work_dir, default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    summary = asyncio.run(main_async(a))
    text = json.dumps(summary, indent=1)
    print(text)
    if a.out:
        pathlib.Path(a.out).write_text(text)
    os._exit(0 if summary["missing"] == 0 and summary["early"] == 0 else 1)


if __name__ == "__main__":
    main()
