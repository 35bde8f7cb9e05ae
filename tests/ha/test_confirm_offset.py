"""Controller mode's confirmOffset on a master: consumers read only what the
SyncStateSet holds. A record past it may be cut if the master fails over;
a consumer that had read it would then skip the acknowledged record that
takes its queue offset on the new master (a failover test's C++ consumer
once missed messages that way). The limit is set by hand here, on a real
broker over a real socket, so each step is certain."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from pyrmq.client.api import MQClientAPI
from pyrmq.common.message import MessageQueue
from pyrmq.common.results import PullStatus
from pyrmq.remoting import RemotingClient
from pyrmq.testing import LocalCluster

SUSPEND = 0x2
SUBSCRIPTION = 0x4


def test_consumers_read_only_below_the_confirm_offset(arun: Any, tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store")) as c:
            b = c.broker
            assert b is not None and b.store is not None
            b.topics.create_in_send("ConfT", "TBW102", 1)
            ends = [
                (r.phys_offset + r.wrote_bytes)
                for r in (
                    b.store.put_message_nowait("ConfT", 0, f"m{i}".encode()) for i in range(10)
                )
            ]
            confirm = [0]
            b.pull_processor.confirm_limit = lambda: confirm[0]
            remoting = RemotingClient(name="conf-test")
            api = MQClientAPI(remoting, [c.namesrv_addr])
            mq = MessageQueue("ConfT", b.config.broker_name, 0)

            async def pull(offset: int, suspend_ms: int = 0) -> Any:
                cmd = api.pull_command(
                    mq,
                    consumer_group="conf-g",
                    queue_offset=offset,
                    max_msg_nums=32,
                    sys_flag=SUBSCRIPTION | (SUSPEND if suspend_ms else 0),
                    commit_offset=0,
                    suspend_timeout_ms=suspend_ms,
                    subscription="*",
                    sub_version=0,
                )
                return await api.pull_message(b.addr, cmd, timeout=10.0, broker_name=mq.broker_name)

            try:
                r = await pull(0)
                assert r.pull_status is PullStatus.NO_NEW_MSG and r.next_begin_offset == 0
                confirm[0] = ends[4]  # the first 5 are held by the SyncStateSet
                r = await pull(0)
                assert [m.body for m in r.msg_found_list] == [f"m{i}".encode() for i in range(5)]
                assert r.next_begin_offset == 5
                # a long-polling pull at 5 waits, and is answered once more is confirmed
                held = asyncio.ensure_future(pull(5, suspend_ms=5000))
                await asyncio.sleep(0.3)
                assert not held.done()
                confirm[0] = ends[-1]
                b.pull_processor.wake_all()
                r = await asyncio.wait_for(held, 5.0)
                assert [m.body for m in r.msg_found_list] == [
                    f"m{i}".encode() for i in range(5, 10)
                ]
            finally:
                await remoting.shutdown()

    arun(main(), timeout=60)
