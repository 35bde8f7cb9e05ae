"""BrokerHeartbeatManager: which brokers are alive, as this controller heard
them (RocketMQ DefaultBrokerHeartbeatManager), and the election policy that
uses it (DefaultElectPolicy).

Liveness is local, never replicated: brokers send BROKER_HEARTBEAT to every
controller, so a controller that becomes leader already knows who is alive.
A broker is alive while its last heartbeat is younger than the
heartbeatTimeoutMills it sent (120 s when absent: RocketMQ's
DEFAULT_BROKER_CHANNEL_EXPIRED_TIME). Each heartbeat also carries the
broker's epoch and max offset; elections prefer the highest epoch, then the
largest max offset, then the smallest electionPriority."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable

#: ms a broker stays alive after a heartbeat that names no timeout
DEFAULT_BROKER_CHANNEL_EXPIRED_MS = 120_000
#: electionPriority when a heartbeat has none (Integer.MAX_VALUE: lowest)
LOWEST_PRIORITY = 2**31 - 1

BrokerKey = tuple[str, str, int]  # clusterName, brokerName, brokerId


@dataclasses.dataclass(slots=True)
class BrokerLiveInfo:
    broker_name: str
    broker_addr: str
    broker_id: int
    last_update: float
    timeout: float
    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    election_priority: int = LOWEST_PRIORITY


class BrokerHeartbeatManager:
    """The broker liveness table of one controller (event loop only)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._table: dict[BrokerKey, BrokerLiveInfo] = {}
        #: the longest heartbeat timeout any broker announced (s)
        self.longest_timeout = 0.0

    def on_broker_heartbeat(
        self,
        cluster_name: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int,
        timeout_ms: int | None,
        epoch: int | None,
        max_offset: int | None,
        confirm_offset: int | None,
        election_priority: int | None,
    ) -> None:
        key = (cluster_name, broker_name, broker_id)
        now = self._clock()
        timeout = (
            timeout_ms if timeout_ms is not None else DEFAULT_BROKER_CHANNEL_EXPIRED_MS
        ) / 1000
        self.longest_timeout = max(self.longest_timeout, timeout)
        epoch = -1 if epoch is None else epoch
        max_offset = -1 if max_offset is None else max_offset
        prev = self._table.get(key)
        if prev is None:
            self._table[key] = BrokerLiveInfo(
                broker_name,
                broker_addr,
                broker_id,
                now,
                timeout,
                epoch,
                max_offset,
                -1 if confirm_offset is None else confirm_offset,
                LOWEST_PRIORITY if election_priority is None else election_priority,
            )
            return
        prev.last_update = now
        prev.timeout = timeout
        prev.broker_addr = broker_addr
        if election_priority is not None:
            prev.election_priority = election_priority
        if epoch > prev.epoch or (epoch == prev.epoch and max_offset > prev.max_offset):
            prev.epoch, prev.max_offset = epoch, max_offset
            if confirm_offset is not None:
                prev.confirm_offset = confirm_offset

    def is_broker_active(self, cluster_name: str, broker_name: str, broker_id: int) -> bool:
        info = self._table.get((cluster_name, broker_name, broker_id))
        return info is not None and info.last_update + info.timeout >= self._clock()

    def live_info(
        self, cluster_name: str, broker_name: str, broker_id: int
    ) -> BrokerLiveInfo | None:
        return self._table.get((cluster_name, broker_name, broker_id))

    def scan_not_active(self) -> list[BrokerKey]:
        """Drop and return the brokers whose heartbeat timed out."""
        now = self._clock()
        gone = [k for k, v in self._table.items() if v.last_update + v.timeout < now]
        for k in gone:
            del self._table[k]
        return gone


def elect(
    candidates: Iterable[int],
    old_master: int | None,
    prefer: int | None,
    is_alive: Callable[[int], bool],
    live_info: Callable[[int], BrokerLiveInfo | None],
) -> int | None:
    """DefaultElectPolicy.tryElect over one candidate set: the old master if
    it is alive (and no other broker is preferred); else the preferred
    broker if it is an alive candidate (else None); else the alive candidate
    with the highest epoch, then max offset, then lowest electionPriority
    value, then smallest id."""
    alive = sorted(b for b in set(candidates) if is_alive(b))
    if not alive:
        return None
    if old_master in alive and (prefer is None or prefer == old_master):
        return old_master
    if prefer is not None:
        return prefer if prefer in alive else None

    def rank(b: int) -> tuple[int, int, int, int]:
        info = live_info(b)
        if info is None:
            return (1, 0, 0, b)
        return (-info.epoch, -info.max_offset, info.election_priority, b)

    return min(alive, key=rank)
