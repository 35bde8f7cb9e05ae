"""Reading a queue back with plain pulls, for tests that compare what a
broker stores with what was sent (no consumer group state involved)."""

from __future__ import annotations

from pyrmq.client.api import PULL_FLAG_SUBSCRIPTION, MQClientAPI
from pyrmq.common.errors import BrokerError
from pyrmq.common.message import MessageExt, MessageQueue
from pyrmq.common.results import PullStatus


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
    order; [] when the broker does not have the topic. A pull answered
    NO_MATCHED_MSG or OFFSET_MOVED moves on to the offset it names; it ends
    at the first answer that does not move forward. AssertionError past
    `max_pulls` pulls."""
    out: list[MessageExt] = []
    offset = start
    for _ in range(max_pulls):
        try:
            r = await api.pull_message(
                addr,
                mq,
                consumer_group=group,
                queue_offset=offset,
                max_msg_nums=32,
                sys_flag=PULL_FLAG_SUBSCRIPTION,
                commit_offset=0,
                suspend_timeout_ms=0,
                subscription="*",
                sub_version=0,
                timeout=timeout,
            )
        except BrokerError:  # no such topic on this broker
            return out
        if r.pull_status is PullStatus.FOUND:
            out.extend(r.msg_found_list)
        elif r.next_begin_offset <= offset:
            return out
        offset = r.next_begin_offset
    raise AssertionError(f"{mq} did not end within {max_pulls} pulls")
