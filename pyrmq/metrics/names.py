"""THE metric table: every metric the broker and the name server export,
with its type, labels and meaning. Names and labels are RocketMQ 5's
(BrokerMetricsConstant, RemotingMetricsConstant, DefaultStoreMetricsConstant)
where RocketMQ has one; `pyrmq_` names are pyrmq's own, for what RocketMQ
does not export (replication lag, disk ratio, label folding).

Every sample also carries the node labels RocketMQ puts on all of them:
`cluster` (brokerClusterName), `node_type` (broker | nameserver) and
`node_id` (brokerName; the name server's listen address).

`python -m pyrmq.metrics` prints this table as Markdown (the docs point here).
"""

from __future__ import annotations

import dataclasses

#: labels on every sample
NODE_LABELS = ("cluster", "node_type", "node_id")

#: a topic or group label value past the cardinality cap (metricsLabelValueLimit)
OTHER = "_other"

#: rocketmq_message_size buckets, bytes (RocketMQ's: 1 KiB ... 4 MiB)
MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1 << 20, 2 << 20, 4 << 20)
#: rocketmq_rpc_latency buckets, milliseconds (RocketMQ's)
RPC_LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)

_TOPIC = ("topic", "consumer_group", "is_retry", "is_system")


@dataclasses.dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    kind: str  # counter | gauge | histogram
    labels: tuple[str, ...]
    help: str
    unit: str = ""
    #: broker, nameserver or both
    node: str = "broker"


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "rocketmq_messages_in_total",
        "counter",
        ("topic", "message_type", "is_system"),
        "Messages stored by sends (a batch counts each message; message_type: normal, "
        "delay, transaction)",
    ),
    MetricSpec(
        "rocketmq_throughput_in_total",
        "counter",
        ("topic", "message_type", "is_system"),
        "Bytes of message bodies stored by sends (a batch: its encoded body)",
        "bytes",
    ),
    MetricSpec(
        "rocketmq_message_size",
        "histogram",
        ("topic", "message_type"),
        "Body size of each message sent (a batch's messages at the batch's mean size)",
        "bytes",
    ),
    MetricSpec(
        "rocketmq_messages_out_total",
        "counter",
        _TOPIC,
        "Messages answered to pulls",
    ),
    MetricSpec(
        "rocketmq_throughput_out_total",
        "counter",
        _TOPIC,
        "Bytes answered to pulls (stored record size)",
        "bytes",
    ),
    MetricSpec(
        "rocketmq_rpc_latency",
        "histogram",
        ("protocol_type", "request_code", "response_code", "result"),
        "Time a request takes to be handled until its answer is ready; result: success, "
        "oneway, or deferred (answered later: a held pull, a send waiting for the disk or "
        "a slave; its time is the handler's only, response_code -1)",
        "milliseconds",
        node="both",
    ),
    MetricSpec(
        "rocketmq_consumer_lag_messages",
        "gauge",
        _TOPIC,
        "Messages not yet committed by the group: queue max offset - committed offset, "
        "summed over the topic's queues",
    ),
    MetricSpec(
        "rocketmq_consumer_lag_latency",
        "gauge",
        _TOPIC,
        "Age of the oldest message the group has not committed (0 when caught up)",
        "milliseconds",
    ),
    MetricSpec(
        "rocketmq_consumer_inflight_messages",
        "gauge",
        _TOPIC,
        "Messages pulled but not yet committed (pull offset - committed offset)",
    ),
    MetricSpec(
        "rocketmq_consumer_ready_messages",
        "gauge",
        _TOPIC,
        "Messages not yet pulled (max offset - pull offset)",
    ),
    MetricSpec(
        "pyrmq_consumer_offset",
        "gauge",
        _TOPIC,
        "Committed offsets of the group summed over the topic's queues: it moves "
        "when the group makes progress (alerts: a queue stuck)",
    ),
    MetricSpec(
        "rocketmq_producer_connections",
        "gauge",
        ("language", "version", "protocol_type"),
        "Producer connections (one per client channel and producer group)",
    ),
    MetricSpec(
        "rocketmq_consumer_connections",
        "gauge",
        ("consumer_group", "language", "version", "consume_mode", "protocol_type", "is_system"),
        "Consumer connections per group",
    ),
    MetricSpec("rocketmq_topic_number", "gauge", (), "Topics this broker holds"),
    MetricSpec(
        "rocketmq_consumer_group_number",
        "gauge",
        (),
        "Consumer groups known to this broker (with committed offsets or connected)",
    ),
    MetricSpec("rocketmq_broker_permission", "gauge", (), "brokerPermission (6: read and write)"),
    MetricSpec(
        "rocketmq_storage_size",
        "gauge",
        (),
        "Bytes of CommitLog data kept (max offset - min offset)",
        "bytes",
    ),
    MetricSpec(
        "rocketmq_storage_flush_behind_bytes",
        "gauge",
        (),
        "CommitLog bytes written but not yet flushed to disk",
        "bytes",
    ),
    MetricSpec(
        "rocketmq_storage_dispatch_behind_bytes",
        "gauge",
        (),
        "CommitLog bytes not yet dispatched to the IndexFiles (ConsumeQueues are "
        "written with the append: never behind)",
        "bytes",
    ),
    MetricSpec(
        "pyrmq_storage_disk_used_ratio",
        "gauge",
        (),
        "Used fraction (0..1) of the file system holding the store, as df shows it "
        "(the ratio diskSpaceWarningLevelRatio is compared with)",
    ),
    MetricSpec(
        "pyrmq_storage_disk_warning_ratio",
        "gauge",
        (),
        "diskSpaceWarningLevelRatio as a fraction: past it, sends are refused",
    ),
    MetricSpec(
        "pyrmq_event_loop_busy_poll_seconds_total",
        "counter",
        (),
        "Seconds the event loop spent polling its sockets before it slept "
        "(eventLoopBusyPollUs): CPU spent on a lone client's latency. Exported by "
        "`pyrmq broker` and `pyrmq standalone`, not by an embedded broker",
        "seconds",
    ),
    MetricSpec(
        "pyrmq_replication_slave_behind_bytes",
        "gauge",
        ("slave_id",),
        "A master: CommitLog bytes each streaming slave (brokerId) has not acknowledged. "
        "A slave: bytes it lacks of its master's CommitLog (slave_id: its own brokerId)",
        "bytes",
    ),
    MetricSpec(
        "pyrmq_metrics_label_values",
        "gauge",
        ("metric",),
        "Distinct topic/group label values a metric holds; at metricsLabelValueLimit, "
        "new ones are counted under the label value _other",
        node="both",
    ),
    MetricSpec(
        "pyrmq_namesrv_brokers",
        "gauge",
        (),
        "Brokers registered with the name server",
        node="nameserver",
    ),
    MetricSpec(
        "pyrmq_namesrv_topics",
        "gauge",
        (),
        "Topics the name server has routes for",
        node="nameserver",
    ),
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}


def markdown_table() -> str:
    """The table above as Markdown (docs/METRICS.md points to this)."""
    rows = ["| name | type | labels | unit | node | meaning |", "|---|---|---|---|---|---|"]
    for m in METRICS:
        labels = ", ".join(m.labels) or "-"
        rows.append(f"| `{m.name}` | {m.kind} | {labels} | {m.unit or '-'} | {m.node} | {m.help} |")
    return "\n".join(rows)
