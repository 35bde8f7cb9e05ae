"""Reading a queue back with plain pulls, for tests that compare what a
broker stores with what was sent (no consumer group state involved)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from pyrmq.client.api import PULL_FLAG_SUBSCRIPTION, MQClientAPI
from pyrmq.common.errors import BrokerError
from pyrmq.common.message import MessageExt, MessageQueue
from pyrmq.common.results import PullResult, PullStatus


async def pull_all(
    api: MQClientAPI,
    addr: str,
    mq: MessageQueue,
    *,
    start: int = 0,
    group: str = "test-reader",
    max_pulls: int = 10_000,
    timeout: float = 10.0,
    raw: bool = False,
    missing_ok: bool = True,
) -> AsyncIterator[PullResult]:
    """Every FOUND pull of `mq` on the broker at `addr` from `start`, in
    queue order (raw: bodies not decoded). A pull answered NO_MATCHED_MSG or
    OFFSET_MOVED moves on to the offset it names; it ends at the first answer
    that does not move forward, or (missing_ok) when the broker does not have
    the topic; BrokerError otherwise. AssertionError past `max_pulls` pulls."""
    offset = start
    for _ in range(max_pulls):
        try:
            cmd = api.pull_command(
                mq,
                consumer_group=group,
                queue_offset=offset,
                max_msg_nums=32,
                sys_flag=PULL_FLAG_SUBSCRIPTION,
                commit_offset=0,
                suspend_timeout_ms=0,
                subscription="*",
                sub_version=0,
            )
            r = await api.pull_message(
                addr, cmd, timeout=timeout, broker_name=mq.broker_name, raw=raw
            )
        except BrokerError:  # no such topic on this broker
            if missing_ok:
                return
            raise
        if r.pull_status is PullStatus.FOUND:
            yield r
        elif r.next_begin_offset <= offset:
            return
        offset = r.next_begin_offset
    raise AssertionError(f"{mq} did not end within {max_pulls} pulls")


async def read_queue(
    api: MQClientAPI,
    addr: str,
    mq: MessageQueue,
    *,
    start: int = 0,
    group: str = "test-reader",
    max_pulls: int = 10_000,
    timeout: float = 10.0,
) -> list[MessageExt]:
    """Every message of `mq` on the broker at `addr` from `start`, in queue
    order; [] when the broker does not have the topic (pull_all's rules)."""
    out: list[MessageExt] = []
    async for r in pull_all(
        api, addr, mq, start=start, group=group, max_pulls=max_pulls, timeout=timeout
    ):
        out.extend(r.msg_found_list)
    return out
