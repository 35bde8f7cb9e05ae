"""BrokerMetrics: the broker's side of pyrmq.metrics (RocketMQ's
BrokerMetricsManager). It hands the send and pull processors their tallies,
the remoting server its rpc observer, and at each scrape reads the broker's
tables into metric families: lag from the committed offsets and each
queue's max offset, sizes and flush/dispatch behind from the store,
connections from the client managers, replication from the HA service.

A scrape's work is bounded: one max-offset lookup per committed queue (the
offset table's size), at most LAG_LATENCY_READS message lookups for the
lag latency, and label values capped at metricsLabelValueLimit (the
rest summed under `_other`)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pyrmq.common.topics import RETRY_GROUP_TOPIC_PREFIX, is_system_topic
from pyrmq.metrics import OTHER, BrokerTallies, Family, MetricsConfig, PromExporter, RpcTally
from pyrmq.storage.clean import disk_used_ratio

if TYPE_CHECKING:
    from pyrmq.broker.broker import Broker

log = logging.getLogger("pyrmq.broker")

#: message lookups a scrape may make for rocketmq_consumer_lag_latency (the
#: store time of each lagging queue's first uncommitted message); queues
#: past it keep the latency of the last scrape that looked
LAG_LATENCY_READS = 2000

_CONSUME_MODES = {"CONSUME_PASSIVELY": "push", "CONSUME_ACTIVELY": "pull", "CONSUME_POP": "pop"}


def _bool(v: bool) -> str:
    return "true" if v else "false"


def _system_group(group: str) -> bool:
    return group.startswith(("CID_RMQ_SYS_", "TOOLS_CONSUMER", "FILTERSRV_CONSUMER")) or group in (
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
        "CID_RMQ_SYS_TRANS",
    )


class _Lag:
    __slots__ = ("committed", "inflight", "latency_ms", "messages", "ready")

    def __init__(self) -> None:
        self.committed = 0
        self.messages = 0
        self.inflight = 0
        self.ready = 0
        self.latency_ms = 0


class BrokerMetrics:
    """Created by the Broker when metricsExporterType=PROM."""

    def __init__(self, broker: Broker, config: MetricsConfig) -> None:
        self.broker = broker
        self.config = config
        self.limit = config.metrics_label_value_limit
        self.tallies = BrokerTallies(self.limit)
        self.rpc = RpcTally(config.metrics_rpc_latency_sample_every)
        cfg = broker.config
        self.exporter = PromExporter(
            config.metrics_prom_exporter_host,
            config.metrics_prom_exporter_port,
            (cfg.broker_cluster_name, "broker", cfg.broker_name),
            self.collect,
        )
        #: (topic, group, queue) -> (committed offset looked at, its store time)
        self._latency_seen: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._attached = False

    @property
    def addr(self) -> str:
        return self.exporter.addr

    async def listen(self) -> None:
        """Open the endpoint (a one-line ClientError when the port is
        taken): first thing at start, so a bad port fails fast."""
        await self.exporter.start()

    def attach(self) -> None:
        """Count from now on (the processors and the server exist)."""
        b = self.broker
        b.send_processor.tallies = self.tallies
        b.pull_processor.tallies = self.tallies
        if b.server is not None:
            b.server.rpc_sample_every = self.rpc.sample_every
            b.server.rpc_observer = self.rpc.observe
        self._attached = True

    async def shutdown(self) -> None:
        await self.exporter.shutdown()

    # -- scrape (on the event loop) -----------------------------------------------------

    def collect(self) -> list[Family]:
        if not self._attached or self.broker.store is None:
            return []  # starting or stopping
        out: list[Family] = []
        out += self._traffic()
        out += self._lag()
        out += self._clients()
        out += self._storage()
        out += self._event_loop()
        return out

    def _event_loop(self) -> list[Family]:
        poller = self.broker.busy_poller
        if poller is None:
            return []
        f_poll = Family.of("pyrmq_event_loop_busy_poll_seconds_total")
        f_poll.add((), poller.spun_s)
        return [f_poll]

    def _traffic(self) -> list[Family]:
        t = self.tallies
        f_in = Family.of("rocketmq_messages_in_total")
        f_tin = Family.of("rocketmq_throughput_in_total")
        f_size = Family.of("rocketmq_message_size")
        for topic, mtype, c in t.in_snapshot():
            labels: tuple[str, ...] = (topic, mtype, _bool(is_system_topic(topic)))
            f_in.add(labels, c[0])
            f_tin.add(labels, c[1])
            f_size.histogram.append(((topic, mtype), c[2:], float(c[1])))
        f_out = Family.of("rocketmq_messages_out_total")
        f_tout = Family.of("rocketmq_throughput_out_total")
        for (topic, group), c in t.messages_out.snapshot():
            labels = self._group_labels(topic, group)
            f_out.add(labels, c[0])
            f_tout.add(labels, c[1])
        f_rpc = Family.of("rocketmq_rpc_latency")
        for labels, c in self.rpc.snapshot():
            f_rpc.histogram.append((("remoting", *labels), c[2:], c[1] / 1000))
        f_cap = Family.of("pyrmq_metrics_label_values")
        f_cap.add(("rocketmq_messages_in_total",), t.in_label_values())
        f_cap.add(("rocketmq_messages_out_total",), len(t.messages_out.counts))
        return [f_in, f_tin, f_size, f_out, f_tout, f_rpc, f_cap]

    @staticmethod
    def _group_labels(topic: str, group: str) -> tuple[str, str, str, str]:
        retry = topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        system = is_system_topic(topic) or _system_group(group)
        return (topic, group, _bool(retry), _bool(system))

    def _lag(self) -> list[Family]:
        b = self.broker
        store = b.store
        assert store is not None
        pulled = self.tallies.pull_offsets
        now_ms = int(time.time() * 1000)
        reads = LAG_LATENCY_READS
        seen = self._latency_seen
        still: dict[tuple[str, str, int], tuple[int, int]] = {}
        lags: dict[tuple[str, str], _Lag] = {}
        for key, queues in list(b.offsets.table.items()):
            topic, sep, group = key.partition("@")
            if not sep:
                continue
            name = (topic, group)
            lag = lags.get(name)
            if lag is None:
                if len(lags) >= self.limit:
                    name = (OTHER, OTHER)
                    lag = lags.get(name)
                if lag is None:
                    lag = lags[name] = _Lag()
            for qid, committed in list(queues.items()):
                top = store.max_offset_in_queue(topic, qid)
                if top <= 0:
                    continue
                committed = max(committed, 0)
                lag.committed += committed
                behind = max(0, top - committed)
                lag.messages += behind
                p = pulled.get((group, topic, qid))
                if p is None:
                    lag.ready += behind
                else:
                    lag.inflight += max(0, min(p, top) - committed)
                    lag.ready += max(0, top - max(p, committed))
                if behind == 0:
                    continue
                qkey = (topic, group, qid)
                old = seen.get(qkey)
                if old is not None and old[0] == committed:
                    born = old[1]  # the same first message as last time
                elif reads > 0:
                    reads -= 1
                    born = self._store_time(topic, qid, committed)
                else:
                    continue
                still[qkey] = (committed, born)
                if born > 0:
                    lag.latency_ms = max(lag.latency_ms, now_ms - born)
        self._latency_seen = still
        names = (
            "rocketmq_consumer_lag_messages",
            "rocketmq_consumer_inflight_messages",
            "rocketmq_consumer_ready_messages",
            "rocketmq_consumer_lag_latency",
            "pyrmq_consumer_offset",
        )
        f_lag, f_inflight, f_ready, f_latency, f_offset = (Family.of(n) for n in names)
        for (topic, group), lag in lags.items():
            labels = self._group_labels(topic, group)
            f_lag.add(labels, lag.messages)
            f_inflight.add(labels, lag.inflight)
            f_ready.add(labels, lag.ready)
            f_latency.add(labels, lag.latency_ms)
            f_offset.add(labels, lag.committed)
        f_cap = Family.of("pyrmq_metrics_label_values")
        f_cap.add(("rocketmq_consumer_lag_messages",), len(lags))
        return [f_lag, f_inflight, f_ready, f_latency, f_offset, f_cap]

    def _store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store timestamp (ms) of the message at offset in the queue; 0
        when it is gone or cannot be read."""
        store = self.broker.store
        assert store is not None
        try:
            r = store.get_message(topic, queue_id, offset, 1)
            if not r.ranges:
                return 0
            return int(store.look_message_by_offset(r.ranges[0][0])["store_timestamp"])
        except Exception:
            return 0

    def _clients(self) -> list[Family]:
        b = self.broker
        f_prod = Family.of("rocketmq_producer_connections")
        prods: dict[tuple[str, str, str], int] = {}
        for chans in b.producers.groups.values():
            for info in chans.values():
                k = (info.language.lower(), str(info.version), "remoting")
                prods[k] = prods.get(k, 0) + 1
        for pk, n in prods.items():
            f_prod.add(pk, n)
        f_cons = Family.of("rocketmq_consumer_connections")
        cons: dict[tuple[str, str, str, str, str, str], int] = {}
        for i, (group, ginfo) in enumerate(b.consumers.groups.items()):
            name = group if i < self.limit else OTHER
            mode = _CONSUME_MODES.get(ginfo.consume_type, ginfo.consume_type.lower())
            for info in ginfo.channels.values():
                ck = (
                    name,
                    info.language.lower(),
                    str(info.version),
                    mode,
                    "remoting",
                    _bool(_system_group(group)),
                )
                cons[ck] = cons.get(ck, 0) + 1
        for ck, n in cons.items():
            f_cons.add(ck, n)
        known = set(b.consumers.groups)
        known.update(_groups_of(b.offsets.table))
        f_topics = Family.of("rocketmq_topic_number")
        f_topics.add((), len(b.topics.table))
        f_groups = Family.of("rocketmq_consumer_group_number")
        f_groups.add((), len(known))
        f_perm = Family.of("rocketmq_broker_permission")
        f_perm.add((), b.config.broker_permission)
        return [f_prod, f_cons, f_topics, f_groups, f_perm]

    def _storage(self) -> list[Family]:
        b = self.broker
        store = b.store
        assert store is not None
        top = store.commit_log_max_offset
        f_size = Family.of("rocketmq_storage_size")
        f_size.add((), max(0, top - store.commit_log_min_offset))
        f_flush = Family.of("rocketmq_storage_flush_behind_bytes")
        f_flush.add((), max(0, top - store.flushed_offset))
        f_dispatch = Family.of("rocketmq_storage_dispatch_behind_bytes")
        behind = 0
        if b.store_config.message_index_enable:
            behind = max(0, top - store.index_dispatched)
        f_dispatch.add((), behind)
        f_disk = Family.of("pyrmq_storage_disk_used_ratio")
        # the ratio the broker itself compares with diskSpaceWarningLevelRatio
        # (reserved blocks count neither as used nor as free)
        with contextlib.suppress(OSError):
            f_disk.add((), disk_used_ratio(b.store_config.store_path_root_dir))
        f_warn = Family.of("pyrmq_storage_disk_warning_ratio")
        f_warn.add((), b.store_config.disk_space_warning_level_ratio / 100)
        f_ha = Family.of("pyrmq_replication_slave_behind_bytes")
        ha, client = b.ha, b.ha_client
        if ha is not None:
            for c in ha.connections:
                if c.streaming:
                    f_ha.add((str(c.broker_id),), max(0, top - c.ack_offset))
        if client is not None:
            behind = int(client.status().get("slaveFallBehindBytes", -1))
            if behind >= 0:
                f_ha.add((str(b.config.broker_id),), behind)
        return [f_size, f_flush, f_dispatch, f_disk, f_warn, f_ha]


def _groups_of(offset_keys: Iterable[str]) -> set[str]:
    return {k.partition("@")[2] for k in offset_keys if "@" in k}
