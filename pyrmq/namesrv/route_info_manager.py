"""RouteInfoManager: the NameServer's tables of clusters, brokers, topics
and broker liveness, and the TopicRouteData clients ask for."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("pyrmq.namesrv")

PERM_READ = 4
PERM_WRITE = 2


@dataclasses.dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclasses.dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    #: brokerId (0 = master) -> "ip:port"
    broker_addrs: dict[int, str] = dataclasses.field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


@dataclasses.dataclass(slots=True)
class BrokerLiveInfo:
    last_update: float
    data_version: dict[str, Any]
    ha_server_addr: str
    channel: Any
    #: controller mode: the master epoch a master registered with
    master_epoch: int = -1


class BrokerConflictError(ValueError):
    """A registration that would take another live broker's place."""


class RouteInfoManager:
    """The NameServer's route tables. `clock` is injectable for expiry tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}

    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_configs: dict[str, dict[str, Any]],
        data_version: dict[str, Any],
        channel: Any,
        master_epoch: int = -1,
    ) -> dict[str, str]:
        """Upsert a broker and (for a master whose data changed) its topics.
        Returns the response fields (masterAddr/haServerAddr for slaves)."""
        holder = self.broker_addr_table.get(broker_name)
        taken = holder.broker_addrs.get(broker_id) if holder is not None else None
        holder_live = self.broker_live_table.get(taken) if taken is not None else None
        if (
            taken is not None
            and taken != broker_addr
            and holder_live is not None
            and master_epoch <= holder_live.master_epoch
        ):
            raise BrokerConflictError(
                f"{broker_name} brokerId {broker_id} is already registered by {taken}, which is "
                f"alive: {broker_addr} cannot take it (two brokers of one brokerName need "
                "different brokerIds, and only one is the master, brokerId 0)"
            )
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        bd = self.broker_addr_table.get(broker_name)
        if bd is None:
            bd = self.broker_addr_table[broker_name] = BrokerData(cluster, broker_name)
        # One address per broker id; an address that moved ids is replaced.
        for bid, addr in list(bd.broker_addrs.items()):
            if addr == broker_addr and bid != broker_id:
                del bd.broker_addrs[bid]
        first = bd.broker_addrs.get(broker_id) != broker_addr
        bd.broker_addrs[broker_id] = broker_addr
        prev = self.broker_live_table.get(broker_addr)
        changed = first or prev is None or prev.data_version != data_version
        if holder_live is not None and taken != broker_addr:
            # a newer master's registration (controller mode): the deposed
            # one no longer holds the master's place
            self.broker_live_table.pop(str(taken), None)
            log.warning(
                "%s brokerId %d moves from %s (epoch %d) to %s (epoch %d)",
                broker_name,
                broker_id,
                taken,
                holder_live.master_epoch,
                broker_addr,
                master_epoch,
            )
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            self._clock(), data_version, ha_server_addr, channel, master_epoch
        )
        if broker_id == 0 and changed:
            names = set()
            for name, tc in topic_configs.items():
                names.add(name)
                self.topic_queue_table.setdefault(name, {})[broker_name] = QueueData(
                    broker_name,
                    int(tc.get("readQueueNums", 0)),
                    int(tc.get("writeQueueNums", 0)),
                    int(tc.get("perm", 6)),
                    int(tc.get("topicSysFlag", tc.get("topicSynFlag", 0)) or 0),
                )
            # Topics this master no longer has lose its queues.
            for name in list(self.topic_queue_table):
                if name not in names:
                    self._remove_queue(name, broker_name)
        if first:
            log.info(
                "registered broker %s %s id %d (%s)", cluster, broker_name, broker_id, broker_addr
            )
        out: dict[str, str] = {}
        if broker_id != 0:
            master = bd.broker_addrs.get(0)
            if master:
                live = self.broker_live_table.get(master)
                out = {"masterAddr": master, "haServerAddr": live.ha_server_addr if live else ""}
        return out

    def _remove_queue(self, topic: str, broker_name: str) -> None:
        q = self.topic_queue_table.get(topic)
        if q is not None and q.pop(broker_name, None) is not None and not q:
            del self.topic_queue_table[topic]

    def touch(self, broker_addr: str) -> bool:
        live = self.broker_live_table.get(broker_addr)
        if live is None:
            return False
        live.last_update = self._clock()
        return True

    def unregister_broker(
        self, cluster: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> None:
        self.broker_live_table.pop(broker_addr, None)
        bd = self.broker_addr_table.get(broker_name)
        if bd is not None and bd.broker_addrs.get(broker_id) == broker_addr:
            del bd.broker_addrs[broker_id]
        self._drop_name_if_empty(broker_name, cluster)
        log.info(
            "unregistered broker %s %s id %d (%s)", cluster, broker_name, broker_id, broker_addr
        )

    def _drop_name_if_empty(self, broker_name: str, cluster: str | None = None) -> None:
        bd = self.broker_addr_table.get(broker_name)
        if bd is None or bd.broker_addrs:
            return
        del self.broker_addr_table[broker_name]
        for c, names in list(self.cluster_addr_table.items()):
            if cluster is not None and c != cluster and c != bd.cluster:
                continue
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[c]
        for topic in list(self.topic_queue_table):
            self._remove_queue(topic, broker_name)

    def _drop_addr(self, broker_addr: str, reason: str) -> None:
        self.broker_live_table.pop(broker_addr, None)
        for name, bd in list(self.broker_addr_table.items()):
            for bid, addr in list(bd.broker_addrs.items()):
                if addr == broker_addr:
                    del bd.broker_addrs[bid]
                    log.warning("dropped broker %s (%s id %d): %s", addr, name, bid, reason)
            self._drop_name_if_empty(name)

    def scan_not_active_broker(self, max_idle: float) -> list[str]:
        """Drop brokers whose last registration is older than max_idle
        seconds, with their routes (scanNotActiveBroker)."""
        now = self._clock()
        gone = [
            a for a, live in self.broker_live_table.items() if now - live.last_update > max_idle
        ]
        for addr in gone:
            self._drop_addr(addr, f"no registration for {max_idle:.0f}s")
        return gone

    def on_channel_closed(self, channel: Any) -> None:
        for addr, live in list(self.broker_live_table.items()):
            if live.channel is channel:
                self._drop_addr(addr, "its connection closed")

    def pickup_topic_route_data(self, topic: str) -> dict[str, Any] | None:
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        brokers = [
            self.broker_addr_table[name].as_json()
            for name in sorted(queues)
            if name in self.broker_addr_table
        ]
        if not brokers:
            return None
        return {
            "brokerDatas": brokers,
            "filterServerTable": {},
            "queueDatas": [queues[name].as_json() for name in sorted(queues)],
        }

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {
                n: bd.as_json() for n, bd in sorted(self.broker_addr_table.items())
            },
            "clusterAddrTable": {c: sorted(n) for c, n in sorted(self.cluster_addr_table.items())},
        }

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str] | None:
        """Topics with queues on a broker of the cluster (None: no such cluster)."""
        names = self.cluster_addr_table.get(cluster)
        if names is None:
            return None
        return sorted(t for t, qds in self.topic_queue_table.items() if names & qds.keys())

    def system_topics(self) -> tuple[list[str], str]:
        """RocketMQ's "system topics" of the name server: every cluster name
        and broker name (each broker has a topic of its name, each cluster
        one of its), and the address of one master (or "")."""
        topics = set(self.cluster_addr_table)
        addr = ""
        for name, bd in sorted(self.broker_addr_table.items()):
            topics.add(name)
            addr = addr or bd.broker_addrs.get(0, "") or next(iter(bd.broker_addrs.values()), "")
        return sorted(topics), addr

    def operate_write_perm(self, broker_name: str, *, wipe: bool) -> int:
        """wipe: every queue data of broker_name loses PERM_WRITE; else each
        becomes PERM_READ | PERM_WRITE (RocketMQ's operateWritePermOfBroker,
        which drops any other bit too). The number of topics it touched."""
        count = 0
        for queues in self.topic_queue_table.values():
            qd = queues.get(broker_name)
            if qd is None:
                continue
            qd.perm = qd.perm & ~PERM_WRITE if wipe else PERM_READ | PERM_WRITE
            count += 1
        return count

    def delete_topic(self, topic: str) -> None:
        self.topic_queue_table.pop(topic, None)

    def data_version_of(self, broker_addr: str) -> dict[str, Any] | None:
        live = self.broker_live_table.get(broker_addr)
        return live.data_version if live else None
