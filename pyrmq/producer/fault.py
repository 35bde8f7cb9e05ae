"""Latency fault tolerance (MQFaultStrategy + LatencyFaultToleranceImpl).

After each send the producer reports how long it took; a send that took at
least LATENCY_MAX[i] ms makes its broker unavailable for
NOT_AVAILABLE_DURATION[i] ms (a failed send counts as 30,000 ms, so 600 s).
While sendLatencyFaultEnable is on, queue selection skips unavailable
brokers as long as an available one exists. Time is injected (`clock`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pyrmq.common.message import MessageQueue
from pyrmq.common.route import TopicPublishInfo

LATENCY_MAX = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION = (0, 0, 30000, 60000, 120000, 180000, 600000)
#: the latency charged to a broker whose send failed (isolation)
ISOLATION_LATENCY_MS = 30000


@dataclass(slots=True)
class FaultItem:
    broker_name: str
    current_latency_ms: int
    start_timestamp: float  # clock seconds when the broker is available again

    def is_available(self, now: float) -> bool:
        return now >= self.start_timestamp


class LatencyFaultTolerance:
    """broker name -> FaultItem (LatencyFaultToleranceImpl)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.items: dict[str, FaultItem] = {}

    def update_fault_item(
        self, broker_name: str, current_latency_ms: int, not_available_ms: int
    ) -> None:
        until = self.clock() + not_available_ms / 1000.0
        item = self.items.get(broker_name)
        if item is None:
            self.items[broker_name] = FaultItem(broker_name, current_latency_ms, until)
        else:
            item.current_latency_ms = current_latency_ms
            item.start_timestamp = until

    def is_available(self, broker_name: str) -> bool:
        item = self.items.get(broker_name)
        return item is None or item.is_available(self.clock())

    def remove(self, broker_name: str) -> None:
        self.items.pop(broker_name, None)

    def pick_one_at_least(self) -> str | None:
        """The least bad broker when none is available: soonest available,
        then lowest latency."""
        if not self.items:
            return None
        best = min(self.items.values(), key=lambda i: (i.start_timestamp, i.current_latency_ms))
        return best.broker_name


def compute_not_available_duration(current_latency_ms: int) -> int:
    for limit, duration in zip(
        reversed(LATENCY_MAX), reversed(NOT_AVAILABLE_DURATION), strict=True
    ):
        if current_latency_ms >= limit:
            return duration
    return 0


class MQFaultStrategy:
    """Queue selection with or without latency fault tolerance."""

    def __init__(
        self, send_latency_fault_enable: bool = False, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.send_latency_fault_enable = send_latency_fault_enable
        self.latency_fault_tolerance = LatencyFaultTolerance(clock)

    def select_one_message_queue(
        self, info: TopicPublishInfo, last_broker_name: str | None
    ) -> MessageQueue:
        if not self.send_latency_fault_enable:
            return info.select_one_message_queue(last_broker_name)
        lft = self.latency_fault_tolerance
        n = len(info.queues)
        for _ in range(n):
            info.index += 1
            mq = info.queues[info.index % n]
            if lft.is_available(mq.broker_name):
                return mq
        # every broker is marked unavailable: take the least bad one's queue
        name = lft.pick_one_at_least()
        if name is not None:
            own = [q for q in info.queues if q.broker_name == name]
            if own:
                info.index += 1
                return own[info.index % len(own)]
            lft.remove(name)
        return info.select_one_message_queue()

    def update_fault_item(self, broker_name: str, current_latency_ms: int, isolation: bool) -> None:
        if not self.send_latency_fault_enable:
            return
        latency = ISOLATION_LATENCY_MS if isolation else current_latency_ms
        self.latency_fault_tolerance.update_fault_item(
            broker_name, current_latency_ms, compute_not_available_duration(latency)
        )
