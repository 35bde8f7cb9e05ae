"""Failover time in controller mode: how long producers see no successful
send when the master of a broker group is SIGKILLed, with RocketMQ 5's
default liveness settings and with tighter ones.

Each setting starts three controllers (``pyrmq controller``, Raft), a name
server and a broker group of two brokers (enableControllerMode=true,
SYNC_MASTER, allAckInSyncStateSet=true, ASYNC_FLUSH), all processes on
127.0.0.1 (pyrmq.testing), and four pyrmq producers with the client's
default settings, each awaiting its sends one by one (1 KiB bodies). Then,
`kills` times: after at least 100 more acknowledged sends the master is
SIGKILLed; measured are

- ``outage_s``: first failed send after the kill to the first successful
  send after it (what an application sees);
- ``election_s``: the kill to a running broker reporting itself master
  (sampled every 50 ms);
- ``rejoin_s``: the old master's restart (same store) to the group settled
  again (one master, both replicas in its SyncStateSet).

After the last kill the senders stop and the master's queues must hold at
least every acknowledged message (``stored_ok``); a setting that fails it
is marked, not published.

Settings (broker ``brokerHeartbeatInterval`` / ``controllerHeartBeatTimeoutMills``,
controller ``scanNotActiveBrokerInterval``, ms):

- ``defaults``: 1000 / 10000 / 5000, RocketMQ 5's defaults;
- ``fast``: 300 / 2000 / 300, what tests/ha/test_failover.py runs with.

    python -m bench.failover --out DIR [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import shutil
import statistics
import tempfile
import time
from collections import Counter
from typing import Any

from bench import _e2e
from pyrmq.client.api import MQClientAPI
from pyrmq.common.errors import RMQError
from pyrmq.common.message import Message
from pyrmq.common.results import SendStatus
from pyrmq.producer import Producer
from pyrmq.remoting import RemotingClient, RequestCode
from pyrmq.testing.cluster import ProcessCluster
from pyrmq.testing.controllers import ControllerGroup
from pyrmq.testing.ha import masters, replica_tables, settled_master, stored_messages

SETTINGS: dict[str, tuple[int, int, int]] = {
    # name: (brokerHeartbeatInterval, controllerHeartBeatTimeoutMills,
    #        scanNotActiveBrokerInterval), ms
    "defaults": (1000, 10_000, 5000),
    "fast": (300, 2000, 300),
}
NAMES = ("b0", "b1")
GROUP = "broker-fo"
TOPIC = "FailoverBench"
QUEUES = 4
SENDERS = 4
#: s any one wait may take before the setting is reported failed
WAIT_LIMIT = 180.0


async def _wait(cond: Any, what: str, limit: float = WAIT_LIMIT) -> float:
    """Poll the async cond() every 50 ms; the monotonic time it held."""
    for _ in range(int(limit / 0.05)):
        if await cond():
            return time.monotonic()
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no {what} after {limit:.0f} s")


class _Load:
    """SENDERS producers awaiting their sends, and the outages they saw:
    (first failed send, first successful send after it). Only the open
    outage and the closed ones are kept, not a time per send: the kill's
    wait polls them every 50 ms while hundreds of thousands of sends go by."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self.acked = 0
        self.other: Counter[str] = Counter()
        self.outages: list[tuple[float, float]] = []
        self.last_ok = 0.0
        self.last_failed = 0.0
        self._failing_since: float | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def _failed(self, what: str) -> None:
        self.other[what] += 1
        self.last_failed = time.monotonic()
        if self._failing_since is None:
            self._failing_since = self.last_failed

    def _ok(self) -> None:
        self.acked += 1
        self.last_ok = time.monotonic()
        if self._failing_since is not None:
            self.outages.append((self._failing_since, self.last_ok))
            self._failing_since = None

    async def _one(self, k: int) -> None:
        body = _e2e.body_of(1024)
        async with Producer(f"bench-fo-{k}", self.namesrv) as p:
            for _ in range(100_000_000):
                if self._stop.is_set():
                    return
                try:
                    r = await p.send(Message(TOPIC, body))
                except RMQError as e:
                    self._failed(f"{type(e).__name__}: {e}"[:120])
                    await asyncio.sleep(0.05)
                    continue
                if r.send_status is SendStatus.SEND_OK:
                    self._ok()
                else:
                    self._failed(r.send_status.name)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._one(k)) for k in range(SENDERS)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def before_kill(self) -> None:
        """Forget an outage still open (a failure unrelated to the kill):
        the kill's outage starts with the first failure after it."""
        self._failing_since = None

    def served_since(self, killed_at: float) -> bool:
        """A successful send after the failures the kill caused (or, if no
        send failed, one more than a second after it)."""
        if self.outage_after(killed_at) is not None:
            return True
        return self.last_failed < killed_at and self.last_ok > killed_at + 1.0

    def outage_after(self, killed_at: float) -> float | None:
        """The first outage that began at or after killed_at, closed."""
        return next((end - start for start, end in self.outages if start >= killed_at), None)


def _dist(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    s = sorted(xs)
    return {
        "min": round(s[0], 2),
        "median": round(statistics.median(s), 2),
        "p90": round(s[min(len(s) - 1, int(len(s) * 0.9))], 2),
        "max": round(s[-1], 2),
    }


async def _measure(ctl: ControllerGroup, c: ProcessCluster, kills: int) -> dict[str, Any]:
    remoting = RemotingClient(name="bench-failover")
    api = MQClientAPI(remoting, [c.namesrv_addr])
    load = _Load(c.namesrv_addr)
    found: list[str] = []

    async def settled() -> bool:
        m = settled_master(await replica_tables(api, c, NAMES), c, NAMES)
        found[:] = [m] if m else []
        return m is not None

    try:
        await _wait(settled, "settled broker group")
        master = found[0]
        await api.broker_request(
            c.broker_addr(master),
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": TOPIC, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES)},
        )

        async def routed() -> bool:
            try:
                return await api.get_topic_route(TOPIC) is not None
            except RMQError:
                return False

        await _wait(routed, "route of the topic")
        load.start()
        outages: list[float] = []
        elections: list[float] = []
        rejoins: list[float] = []
        unseen = 0  # kills no sender noticed (no failed send at all)
        for _ in range(kills):
            before = load.acked

            async def more(before: int = before) -> bool:
                return load.acked >= before + 100

            await _wait(more, "100 acknowledged sends before the kill")
            load.before_kill()
            killed_at = time.monotonic()
            c.kill_broker(master)

            async def elected(old: str = master) -> bool:
                new = [n for n in masters(await replica_tables(api, c, NAMES, 0.5)) if n != old]
                found[:] = new
                return bool(new)

            elections.append(await _wait(elected, "new master") - killed_at)

            async def served(killed_at: float = killed_at) -> bool:
                return load.served_since(killed_at)

            await _wait(served, "successful send after the kill")
            outage = load.outage_after(killed_at)
            if outage is None:
                unseen += 1
            else:
                outages.append(outage)
            restart_at = time.monotonic()
            await c.start_broker_async(master)
            rejoins.append(await _wait(settled, "settled group after the restart") - restart_at)
            master = found[0]
        await load.stop()
        tables = await replica_tables(api, c, NAMES)
        master = masters(tables)[0]
        stored = await stored_messages(api, c.broker_addr(master), TOPIC, QUEUES)
        return {
            "kills": kills,
            "outage_s": _dist(outages),
            "outages": [round(x, 3) for x in outages],
            "kills_unnoticed": unseen,
            "election_s": _dist(elections),
            "rejoin_s": _dist(rejoins),
            "acked": load.acked,
            "stored": stored,
            "stored_ok": stored >= load.acked,
            "failed_sends": dict(load.other),
        }
    finally:
        await load.stop()
        await remoting.shutdown()


def run(
    out_dir: pathlib.Path,
    quick: bool,
    *,
    work_dir: str | None = None,
    kills: int | None = None,
    settings: tuple[str, ...] = tuple(SETTINGS),
) -> dict[str, Any]:
    """Each setting in turn; writes out_dir/failover.json. kills per
    setting: 10 (quick 3)."""
    kills = kills or (3 if quick else 10)
    root = pathlib.Path(tempfile.mkdtemp(prefix="pyrmq-bench-failover-", dir=work_dir))
    res: dict[str, Any] = {"senders": SENDERS, "settings": {}}
    try:
        for name in settings:
            beat, timeout, scan = SETTINGS[name]
            (root / name / "ctl").mkdir(parents=True)
            ctl = ControllerGroup(
                root / name / "ctl", 3, extra={"scanNotActiveBrokerInterval": scan}
            )
            c = ProcessCluster(
                root / name / "cluster",
                NAMES,
                broker_conf={
                    "brokerName": GROUP,
                    "enableControllerMode": "true",
                    "brokerRole": "SYNC_MASTER",
                    "allAckInSyncStateSet": "true",
                    "brokerHeartbeatInterval": beat,
                    "controllerHeartBeatTimeoutMills": timeout,
                },
            )
            row: dict[str, Any] = {
                "brokerHeartbeatInterval": beat,
                "controllerHeartBeatTimeoutMills": timeout,
                "scanNotActiveBrokerInterval": scan,
            }
            try:
                asyncio.run(ctl.start())
                c.broker_conf["controllerAddr"] = ctl.controller_addr
                c.start()
                row |= asyncio.run(_measure(ctl, c, kills))
            except Exception as e:  # one setting's failure costs that setting
                row["error"] = repr(e)
                row["log"] = c.log_tails(20)
            finally:
                c.shutdown()
                ctl.stop_all()
            res["settings"][name] = row
            shutil.rmtree(root / name, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "failover.json").write_text(json.dumps(res, indent=1))
    return res


def table(res: dict[str, Any]) -> str:
    lines = [
        f"Master SIGKILLed under {res['senders']} awaiting senders; seconds "
        "min / median / p90 / max.",
        "",
        "| setting (heartbeat / timeout / scan ms) | kills | outage s | election s | "
        "rejoin s | stored / acked |",
        "|---|---:|---:|---:|---:|---|",
    ]

    def d(x: dict[str, float]) -> str:
        return " / ".join(f"{x[k]:.2f}" for k in ("min", "median", "p90", "max")) if x else "-"

    for name, s in res["settings"].items():
        head = (
            f"{name} ({s['brokerHeartbeatInterval']} / {s['controllerHeartBeatTimeoutMills']}"
            f" / {s['scanNotActiveBrokerInterval']})"
        )
        if "error" in s:
            lines.append(f"| {head} | FAILED: {s['error']} |||||")
            continue
        unseen = f" ({s['kills_unnoticed']} unnoticed)" if s["kills_unnoticed"] else ""
        lines.append(
            f"| {head} | {s['kills']}{unseen} | {d(s['outage_s'])} | {d(s['election_s'])} | "
            f"{d(s['rejoin_s'])} | {s['stored']:,} / {s['acked']:,}"
            f"{'' if s['stored_ok'] else ' FAILED'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kills", type=int, default=None, help="kills per setting (10; quick 3)")
    args = ap.parse_args(argv)
    print(table(run(args.out, args.quick, kills=args.kills)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
