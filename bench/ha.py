"""Replication: what a slave costs the master's sends, and how far behind it
runs, beside a broker without one, in one run.

Setups, each a name server and broker processes (pyrmq.testing.ProcessCluster,
ASYNC_FLUSH, 1 GiB CommitLog segments, production sizes):

- ``single``: one ASYNC_MASTER, no slave (the single-broker figure);
- ``async_master``: ASYNC_MASTER + one SLAVE (a send is answered once the
  master has it);
- ``sync_master``: SYNC_MASTER + one SLAVE (a send is answered once the slave
  has it too);
- ``sync_master_sync_flush``: the same with SYNC_FLUSH on both (answered once
  the master flushed it and the slave has it: RocketMQ's zero-loss setup).

Cases, pyrmq's asyncio client, 1 KiB bodies, one topic of 8 queues:

- ``awaited``: one sender, each send awaited: latency p50/p99 and msgs/s;
- ``concurrent32``: 32 senders, each awaiting its own sends: msgs/s and
  latency (the issue's target: SYNC_MASTER at least 60% of ASYNC_MASTER's);
- ``pipelined``: one producer, sends not awaited one by one, 1024
  outstanding (bench._e2e.windowed): msgs/s.

Every case counts only SEND_OK answers, and after each setup the master's
queues must hold every one of them and the slave's CommitLog must reach the
master's (``stored_ok``, ``slave_caught_up``): a row that fails either is
marked, not published. Replication lag is the master's
``slaveFallBehindBytes`` sampled every 50 ms during concurrent32 (max and
p50), and ``catch_up_s``: from the end of the last case (every send answered) to the
slave holding everything.

Then failover time in controller mode (bench.failover, its docstring says
how): the outage producers see when the master is SIGKILLed, with RocketMQ
5's default liveness settings and tighter ones.

    python -m bench.ha --out DIR [--quick] [--no-failover]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable, Coroutine
from typing import Any

from bench import _e2e, failover
from pyrmq.client.api import MQClientAPI
from pyrmq.common.message import Message
from pyrmq.common.results import SendStatus
from pyrmq.producer import Producer
from pyrmq.remoting import RemotingClient, RequestCode
from pyrmq.testing.cluster import ProcessCluster
from pyrmq.testing.ha import stored_messages

SETUPS: dict[str, tuple[str, str, bool]] = {
    # name: (master role, flush, with a slave)
    "single": ("ASYNC_MASTER", "ASYNC_FLUSH", False),
    "async_master": ("ASYNC_MASTER", "ASYNC_FLUSH", True),
    "sync_master": ("SYNC_MASTER", "ASYNC_FLUSH", True),
    "sync_master_sync_flush": ("SYNC_MASTER", "SYNC_FLUSH", True),
}
BODY = 1024
QUEUES = 8
TOPIC = "HaBench"


class _Admin:
    def __init__(self, namesrv: str) -> None:
        self.remoting = RemotingClient(name="bench-ha")
        self.api = MQClientAPI(self.remoting, [namesrv])

    async def runtime(self, addr: str) -> dict[str, str]:
        resp = await self.api.broker_request(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return dict(json.loads(resp.body)["table"])

    async def stored(self, addr: str) -> int:
        return await stored_messages(self.api, addr, TOPIC, QUEUES)


def _cluster(root: pathlib.Path, setup: str, production: bool = True) -> ProcessCluster:
    role, flush, slave = SETUPS[setup]
    names = ("m", "s") if slave else ("m",)
    per: dict[str, dict[str, object]] = {"m": {"brokerName": "broker-ha", "brokerRole": role}}
    if slave:
        per["s"] = {"brokerName": "broker-ha", "brokerId": 1, "brokerRole": "SLAVE"}
    sizes = {
        "mappedFileSizeCommitLog": 1 << 30,
        "mappedFileSizeConsumeQueue": 300_000 * 20,
        "maxHashSlotNum": 5_000_000,
        "maxIndexNum": 20_000_000,
        "warmMappedFileEnable": "true",
    }
    return ProcessCluster(
        root,
        names,
        broker_conf={"flushDiskType": flush, **(sizes if production else {})},
        per_broker_conf=per,
    )


async def _concurrent(
    p: Producer,
    senders: int,
    seconds: float,
    sampler: Callable[[], Coroutine[Any, Any, None]] | None,
) -> dict[str, Any]:
    body = _e2e.body_of(BODY)
    acked = 0
    other: dict[str, int] = {}
    rtt: list[int] = []
    end = time.perf_counter() + seconds

    async def one() -> None:
        nonlocal acked
        clock = time.perf_counter_ns
        while time.perf_counter() < end:
            t = clock()
            r = await p.send(Message(TOPIC, body))
            rtt.append(clock() - t)
            if r.send_status is SendStatus.SEND_OK:
                acked += 1
            else:
                other[r.send_status.name] = other.get(r.send_status.name, 0) + 1

    t0 = time.perf_counter()
    tasks = [asyncio.create_task(one()) for _ in range(senders)]
    sample = asyncio.create_task(sampler()) if sampler is not None else None
    await asyncio.gather(*tasks)
    took = time.perf_counter() - t0
    if sample is not None:
        sample.cancel()
        await asyncio.gather(sample, return_exceptions=True)
    rtt.sort()
    return {
        "msgs": acked,
        "msgs_per_s": round(acked / took),
        "other_answers": other,
        **_e2e.latency_fields(rtt),
    }


async def _pipelined(p: Producer, seconds: float, n_max: int) -> dict[str, Any]:
    body = _e2e.body_of(BODY)

    async def submit(flow: _e2e.Flow) -> None:
        fut = asyncio.ensure_future(p.send(Message(TOPIC, body)))
        flow.track(fut, ok=lambda r: r.send_status is SendStatus.SEND_OK)

    flow, took = await _e2e.windowed(submit, 1, 1024, n_max, seconds)
    return {"msgs": flow.acked, "msgs_per_s": round(flow.acked / took), "failed": flow.failed}


async def _measure(c: ProcessCluster, setup: str, seconds: float) -> dict[str, Any]:
    has_slave = SETUPS[setup][2]
    admin = _Admin(c.namesrv_addr)
    master = c.broker_addr("m")
    try:
        await admin.api.broker_request(
            master,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": TOPIC,
                "readQueueNums": str(QUEUES),
                "writeQueueNums": str(QUEUES),
                "perm": "6",
            },
        )
        for _ in range(600):  # the route, and the slave connected (60 s at most)
            route = await admin.api.get_topic_route(TOPIC)
            info = await admin.runtime(master)
            if route is not None and (not has_slave or int(info.get("haConnections", 0)) > 0):
                break
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"{setup}: no route or no slave after 60 s")
        lag: list[int] = []

        async def sample() -> None:
            for _ in range(100_000):
                info = await admin.runtime(master)
                lag.append(int(info.get("slaveFallBehindBytes", -1)))
                await asyncio.sleep(0.05)

        rows: dict[str, Any] = {}
        async with Producer(f"bench-ha-{setup}", c.namesrv_addr, send_msg_timeout=10.0) as p:
            await p.send(Message(TOPIC, b"warm"))
            body = _e2e.body_of(BODY)
            n, took, rtt = await _e2e.awaited(
                lambda: p.send(Message(TOPIC, body)), 1_000_000, seconds
            )
            rtt.sort()
            rows["awaited"] = {"msgs": n, "msgs_per_s": round(n / took), **_e2e.latency_fields(rtt)}
            rows["concurrent32"] = await _concurrent(p, 32, seconds, sample if has_slave else None)
            rows["pipelined"] = await _pipelined(p, seconds, 2_000_000)
            t_last = time.perf_counter()
        sent = 1 + sum(r["msgs"] for r in rows.values())
        stored = await admin.stored(master)
        out: dict[str, Any] = {"rows": rows, "acked": sent, "stored": stored}
        out["stored_ok"] = stored >= sent
        if has_slave:
            top = int((await admin.runtime(master))["commitLogMaxOffset"])
            slave = c.broker_addr("s")
            caught = None
            for _ in range(1200):  # 60 s at most
                if int((await admin.runtime(slave))["commitLogMaxOffset"]) >= top:
                    caught = time.perf_counter()
                    break
                await asyncio.sleep(0.05)
            out["slave_caught_up"] = caught is not None
            out["catch_up_s"] = round(caught - t_last, 2) if caught else None
            out["slave_stored"] = await admin.stored(slave)
            valid = sorted(x for x in lag if x >= 0)
            out["lag_bytes_max"] = valid[-1] if valid else None
            out["lag_bytes_p50"] = valid[len(valid) // 2] if valid else None
            out["lag_samples"] = len(valid)
        return out
    finally:
        await admin.remoting.shutdown()


def run(
    out_dir: pathlib.Path,
    quick: bool,
    *,
    work_dir: str | os.PathLike[str] | None = None,
    seconds: float | None = None,
    production: bool = True,
    failover_kills: int | None = None,
) -> dict[str, Any]:
    """Every setup in turn, then bench.failover (failover_kills per setting,
    0: none); writes out_dir/ha.json. seconds: per case (10, quick 3);
    production=False: the test clusters' small files (a smoke test)."""
    seconds = seconds or (3.0 if quick else 10.0)
    root = pathlib.Path(tempfile.mkdtemp(prefix="pyrmq-bench-ha-", dir=work_dir))
    res: dict[str, Any] = {"seconds_per_case": seconds, "body": BODY, "setups": {}}
    try:
        for setup in SETUPS:
            c = _cluster(root / setup, setup, production)
            try:
                c.start()
                res["setups"][setup] = asyncio.run(_measure(c, setup, seconds))
            except Exception as e:  # one setup's failure costs that setup
                res["setups"][setup] = {"error": repr(e), "log": c.log_tails(20)}
            finally:
                c.shutdown()
                shutil.rmtree(root / setup, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = res["setups"].get("async_master", {}).get("rows", {}).get("concurrent32", {})
    sync = res["setups"].get("sync_master", {}).get("rows", {}).get("concurrent32", {})
    if base.get("msgs_per_s") and sync.get("msgs_per_s"):
        res["sync_vs_async_concurrent32"] = round(sync["msgs_per_s"] / base["msgs_per_s"], 3)
    if failover_kills != 0:
        res["failover"] = failover.run(
            out_dir,
            quick,
            work_dir=None if work_dir is None else str(work_dir),
            kills=failover_kills,
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ha.json").write_text(json.dumps(res, indent=1))
    return res


def table(res: dict[str, Any]) -> str:
    lines = [
        f"1 KiB bodies, {res['seconds_per_case']:.0f} s per case; msgs/s counts SEND_OK only.",
        "",
        "| setup | awaited msgs/s | awaited p50 / p99 ms | 32 senders msgs/s | "
        "32 senders p50 / p99 ms | pipelined msgs/s | lag max / p50 KiB | catch-up s | "
        "stored / acked |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, s in res["setups"].items():
        if "error" in s:
            lines.append(f"| {name} | FAILED: {s['error']} |||||||")
            continue
        r = s["rows"]
        a, c, p = r["awaited"], r["concurrent32"], r["pipelined"]
        ok = s["stored_ok"] and s.get("slave_caught_up", True)
        lag = (
            f"{s['lag_bytes_max'] / 1024:,.0f} / {s['lag_bytes_p50'] / 1024:,.0f}"
            if s.get("lag_bytes_max") is not None
            else "-"
        )
        lines.append(
            f"| {name} | {a['msgs_per_s']:,} | {a['p50_ms']:.2f} / {a['p99_ms']:.2f} | "
            f"{c['msgs_per_s']:,} | {c['p50_ms']:.2f} / {c['p99_ms']:.2f} | "
            f"{p['msgs_per_s']:,} | {lag} | {s.get('catch_up_s', '-')} | "
            f"{s['stored']:,} / {s['acked']:,}{'' if ok else ' FAILED'} |"
        )
    if "sync_vs_async_concurrent32" in res:
        lines += [
            "",
            f"SYNC_MASTER / ASYNC_MASTER with 32 senders: "
            f"{res['sync_vs_async_concurrent32']:.2f} (target >= 0.60)",
        ]
    if "failover" in res:
        lines += ["", "Failover (controller mode):", "", failover.table(res["failover"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-failover", action="store_true", help="skip the failover measurement")
    args = ap.parse_args(argv)
    res = run(args.out, args.quick, failover_kills=0 if args.no_failover else None)
    print(table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
