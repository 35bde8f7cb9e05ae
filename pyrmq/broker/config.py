"""BrokerConfig: the broker's settings, loadable from RocketMQ's broker.conf
(Java camelCase keys). Store settings in the same file go to
MessageStoreConfig.from_properties."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from typing import Any

import rmqcore
from pyrmq.broker.busy_poll import (
    DEFAULT_SPARE_PERCENT,
    POLL_MAX_US,
    SPARE_PERCENT_MAX,
    default_poll_us,
)
from pyrmq.common.config_file import camel_case, read_properties, settings_from_properties
from pyrmq.common.errors import ClientError
from pyrmq.common.message import local_ip
from pyrmq.common.route import PERM_INHERIT, PERM_PRIORITY, PERM_READ, PERM_WRITE
from pyrmq.metrics.config import (
    DEFAULT_LABEL_VALUE_LIMIT,
    DEFAULT_PROM_PORT,
    DEFAULT_RPC_LATENCY_SAMPLE_EVERY,
    MetricsConfig,
)
from pyrmq.storage.config import MessageStoreConfig

#: every PermName bit (brokerPermission takes no other)
PERM_ALL = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str) -> tuple[int, ...]:
    """messageDelayLevel ("1s 5s ... 2h") -> delays in ms, level 1 first."""
    out = []
    for item in spec.split():
        unit = item[-1:]
        if unit not in _UNITS or not item[:-1].isdigit():
            raise ClientError(
                f"messageDelayLevel item {item!r}: expected a number and one of s, m, h, d"
            )
        out.append(int(item[:-1]) * _UNITS[unit])
    if not out:
        raise ClientError("messageDelayLevel is empty")
    return tuple(out)


BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


def _is_host_port(addr: str) -> bool:
    host, _, port = addr.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) <= 65535


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Broker settings (RocketMQ BrokerConfig + NettyServerConfig)."""

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    #: ";"-separated name server addresses
    namesrv_addr: str = ""
    #: the IPv4 address clients are told to use; default: this host's
    broker_ip1: str = ""
    listen_port: int = 10911
    #: the address to listen on (pyrmq; Java listens on all addresses)
    listen_host: str = "0.0.0.0"
    auto_create_topic_enable: bool = True
    default_topic_queue_nums: int = 8
    broker_permission: int = 6
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    #: SQL92 subscriptions (MessageSelector.bySql) evaluated on message
    #: properties; off, as in RocketMQ, a SQL92 pull is refused
    enable_property_filter: bool = False
    register_name_server_period: int = 30_000
    flush_consumer_offset_interval: int = 5000
    flush_delay_offset_interval: int = 10_000
    client_channel_max_idle_time_ms: int = 120_000
    #: pyrmq: a connection whose frame is still incomplete this long after
    #: its first byte is closed (slowloris: a byte now and then keeps a
    #: connection from ever being idle); as long as the idle limit, so such
    #: a sender holds a connection no longer than an idle one
    server_frame_read_timeout_ms: int = 120_000
    rebalance_lock_max_live_time_ms: int = 60_000
    #: sends that may wait for the disk at once (SYNC_FLUSH) before more are
    #: answered SYSTEM_BUSY [OVERLOAD]: bounds what the broker holds for them
    send_thread_pool_queue_capacity: int = 10_000
    #: answer sends SYSTEM_BUSY [PCBUSY_CLEAN_QUEUE] while the disk lags
    #: osPageCacheBusyTimeOutMills behind SYNC_FLUSH sends
    broker_fast_failure_enable: bool = True
    #: retryMaxTimes of auto-created subscription groups
    max_reconsume_times: int = 16
    #: retryQueueNums of auto-created subscription groups
    retry_queue_nums: int = 1
    #: a consumer group the subscription group table lacks is created on
    #: its first pull or heartbeat (off: its pulls and send-backs are
    #: refused SUBSCRIPTION_GROUP_NOT_EXIST until updateSubGroup creates it)
    auto_create_subscription_group: bool = True
    #: pull answers at least this large go by sendfile (smaller ones are
    #: copied: one gathered copy beats per-range sendfile below ~16 KiB here)
    transfer_by_sendfile_min_bytes: int = 16 * 1024
    #: ASYNC_MASTER | SYNC_MASTER (a send is answered once a slave holds
    #: it) | SLAVE (copies its master's CommitLog, takes no sends)
    broker_role: str = "ASYNC_MASTER"
    #: the master's replication port; -1: listenPort + 1 (any free port when
    #: listenPort is 0), 0: any free port
    ha_listen_port: int = -1
    #: a slave's master (its haListenPort, "ip:port"); empty: as the name
    #: servers tell
    ha_master_address: str = ""
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    #: a slave more than this many bytes behind is not waited for: a
    #: SYNC_MASTER answers SLAVE_NOT_AVAILABLE
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    #: let consumers read from a slave when the master suggests it (the data
    #: they pull is no longer in the master's memory)
    slave_read_enable: bool = False
    #: % of RAM: pulls of data further behind the CommitLog's end than this
    #: are suggested to go to a slave (with slaveReadEnable)
    access_message_in_memory_max_ratio: int = 40
    #: RocketMQ 5 controller mode: the controllers elect the group's master
    #: (brokerRole then only says whether a master waits for a slave:
    #: SYNC_MASTER; brokerId is assigned by the controllers)
    enable_controller_mode: bool = False
    #: ";"-separated controller addresses (their listenPort)
    controller_addr: str = ""
    broker_heartbeat_interval: int = 1000
    controller_heart_beat_timeout_mills: int = 10_000
    sync_broker_metadata_period: int = 5000
    check_sync_state_set_period: int = 5000
    ha_max_time_slave_not_catchup: int = 15_000
    #: controller mode: a send is answered once every SyncStateSet member
    #: has it (true) or inSyncReplicas replicas, the master included, do
    all_ack_in_sync_state_set: bool = False
    in_sync_replicas: int = 1
    #: transactions: a half message unresolved this long (ms since it was
    #: born) is asked about, every transactionCheckInterval ms, at most
    #: transactionCheckMax times, then given up on
    transaction_time_out: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval: int = 60_000
    #: refuse half messages (NO_PERMISSION), as RocketMQ's switch
    reject_transaction_message: bool = False
    #: create the message trace topic (msgTraceTopicName, 1 queue) at start
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    #: pyrmq's exactly-once produce: a send whose UNIQ_KEY this broker stored
    #: in the topic within the window is answered with the first send's
    #: result, not stored again (pyrmq/broker/dedup.py)
    duplicate_detection: bool = False
    #: pyrmq: the common send (SEND_MESSAGE/V2, not a batch, delayed, timed,
    #: transactional or retry) is stored and answered in C
    #: (pyrmq/broker/processor/send_fast.py); false: every send in Python
    send_fast_path_enable: bool = True
    #: pyrmq: a pull that finds messages (JSON header, no SQL92 filter, a
    #: body below transferBySendfileMinBytes) is answered with one frame
    #: built in C (rmqcore/_pullpath.pyx); false: every answer in Python
    pull_fast_path_enable: bool = True
    #: threads that serve sends (RocketMQ's key; 1 as in RocketMQ 4.x): the
    #: event loop and sendMessageThreadPoolNums - 1 C send threads, which
    #: store and answer the C path's large chunks of pipelined sends on
    #: other cores (pyrmq/broker/processor/send_fast.py). On a 2-vCPU
    #: machine they did not pay (bench/README.md, "More than one core")
    send_message_thread_pool_nums: int = 1
    #: pyrmq: the time slice, in µs, that `pyrmq broker` and `pyrmq
    #: standalone` ask Linux for on their event loop's thread while the loop
    #: is mostly idle (busy < 30%; the kernel's default above 50%:
    #: pyrmq/broker/loop_slice.py). Linux 6.12+ honours it: a client the
    #: loop just answered no longer takes its CPU mid-turn, and a request
    #: that arrives runs sooner. 0: always the kernel's default (0.75 ms
    #: times 1 + log2(CPUs)), or rmqcore.SCHED_SLICE_MIN_US..MAX_US (100..100000)
    event_loop_sched_slice_us: int = 400
    #: pyrmq: how long, in µs, the broker's event loop polls its sockets
    #: before it sleeps, the window adapting to how close together requests
    #: come (pyrmq/broker/busy_poll.py). It spends the broker's idle CPU on
    #: a lone client's round trips: 0 (off) or 1..1000; by default 100 where
    #: the broker can use two CPUs or more, 0 where it has one
    event_loop_busy_poll_us: int = dataclasses.field(default_factory=default_poll_us)
    #: pyrmq: the CPU, in percent of one CPU, that must have been idle (or
    #: spent polling) over the last 0.2 s on the CPUs the broker may run on
    #: for its loop to poll: 100, a whole CPU to spare, by default; 0 polls
    #: whatever the load (pyrmq/broker/busy_poll.py)
    event_loop_busy_poll_spare_percent: int = DEFAULT_SPARE_PERCENT
    duplicate_detection_window_seconds: int = 120
    #: UNIQ_KEY (the client's message id, kept across retries by Java's and
    #: pyrmq's clients) or KEYS (the message's keys; for the C++ client,
    #: which makes a new UNIQ_KEY for every attempt)
    duplicate_detection_key: str = "UNIQ_KEY"
    #: ACL 1.0: check every request against plain_acl.yml (pyrmq/acl/)
    acl_enable: bool = False
    #: RocketMQ's home: plain_acl.yml is <rocketmqHome>/conf/plain_acl.yml
    #: (default: $ROCKETMQ_HOME)
    rocketmq_home: str = ""
    #: pyrmq (Java: -Drocketmq.acl.plain.file): plain_acl.yml's path, relative
    #: to rocketmqHome; by default conf/plain_acl.yml there, or, without a
    #: home, plain_acl.yml beside the broker.conf
    acl_plain_file: str = ""
    #: metrics (RocketMQ 5's keys; docs/METRICS.md): DISABLE (no port
    #: opened) or PROM (a Prometheus endpoint on host:port, port 0: any)
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: int = DEFAULT_PROM_PORT
    #: pyrmq: distinct topic (topic+group) label values per metric; the
    #: rest are counted under _other
    metrics_label_value_limit: int = DEFAULT_LABEL_VALUE_LIMIT
    #: pyrmq: rocketmq_rpc_latency times one request in this many (1: all)
    metrics_rpc_latency_sample_every: int = DEFAULT_RPC_LATENCY_SAMPLE_EVERY
    #: RocketMQ 5's timer (pyrmq/broker/timer.py): messages with a delivery
    #: time (5.x delivery_timestamp, TIMER_DELIVER_MS, TIMER_DELAY_SEC) are
    #: held until then, at most timerMaxDelaySec ahead
    timer_wheel_enable: bool = True
    timer_max_delay_sec: int = 3 * 24 * 3600
    #: RocketMQ 5's proxy in local mode (mqbroker --enable-proxy): the gRPC
    #: endpoint of the 5.x SDKs inside this broker, on grpcServerPort
    #: (0: any free port; pyrmq/proxy)
    enable_proxy: bool = False
    grpc_server_port: int = 8081
    #: pyrmq: store path of the CommitLog if not <storePathRootDir>/commitlog
    store_path_commit_log: str = ""
    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")

    def __post_init__(self) -> None:
        self.metrics_config  # noqa: B018  (validates the metrics keys)
        if self.duplicate_detection_key not in ("UNIQ_KEY", "KEYS"):
            raise ClientError(
                f"duplicateDetectionKey={self.duplicate_detection_key!r}: expected UNIQ_KEY or KEYS"
            )
        if self.duplicate_detection_window_seconds <= 0:
            raise ClientError(
                f"duplicateDetectionWindowSeconds={self.duplicate_detection_window_seconds}: "
                "expected a positive number of seconds"
            )
        if self.broker_role not in BROKER_ROLES:
            raise ClientError(
                f"brokerRole={self.broker_role!r}: expected one of {', '.join(BROKER_ROLES)}"
            )
        if self.enable_controller_mode and not self.controller_addr.strip():
            raise ClientError("enableControllerMode=true needs controllerAddr=host:port;...")
        if self.enable_controller_mode and self.broker_role == "SLAVE":
            raise ClientError(
                "enableControllerMode=true: the controllers choose the master; set brokerRole "
                "to SYNC_MASTER or ASYNC_MASTER (whether the master waits for a slave)"
            )
        if self.broker_role == "SLAVE" and self.broker_id <= 0:
            raise ClientError("brokerRole=SLAVE needs brokerId > 0 (brokerId 0 is the master)")
        if self.broker_role != "SLAVE" and self.broker_id != 0 and not self.enable_controller_mode:
            # RocketMQ's BrokerStartup sets a master's id to 0 whatever is set
            object.__setattr__(self, "broker_id", 0)
        if not -1 <= self.ha_listen_port <= 65535:
            raise ClientError(f"haListenPort {self.ha_listen_port} is not a TCP port")
        if self.ha_master_address and not _is_host_port(self.ha_master_address):
            raise ClientError(
                f"haMasterAddress={self.ha_master_address!r}: expected host:port of the "
                "master's haListenPort"
            )
        if min(self.ha_send_heartbeat_interval, self.ha_housekeeping_interval) <= 0:
            raise ClientError("haSendHeartbeatInterval and haHousekeepingInterval must be > 0")
        if self.ha_transfer_batch_size <= 0 or self.ha_max_gap_not_in_sync <= 0:
            raise ClientError("haTransferBatchSize and haMaxGapNotInSync must be > 0")
        if not 0 <= self.grpc_server_port <= 65535:
            raise ClientError(f"grpcServerPort {self.grpc_server_port} is not a TCP port")
        if not 0 <= self.listen_port <= 65535:
            raise ClientError(f"listenPort {self.listen_port} is not a TCP port")
        if self.broker_id < 0:
            raise ClientError("brokerId must be >= 0")
        if not 1 <= self.default_topic_queue_nums <= 1024:
            raise ClientError("defaultTopicQueueNums must be within 1..1024")
        # the keys UPDATE_BROKER_CONFIG changes at runtime: a value outside
        # these is refused there (whole) as in broker.conf
        if not 0 <= self.broker_permission <= PERM_ALL:
            raise ClientError(
                f"brokerPermission={self.broker_permission}: expected permission bits within "
                f"0..{PERM_ALL} (6: read and write, 4: read only, 2: write only)"
            )
        if self.retry_queue_nums < 0 or self.max_reconsume_times < -1:
            raise ClientError("retryQueueNums must be >= 0 and maxReconsumeTimes >= -1")
        if self.short_polling_time_mills < 0 or self.transfer_by_sendfile_min_bytes < 0:
            raise ClientError("shortPollingTimeMills and transferBySendfileMinBytes must be >= 0")
        parse_delay_levels(self.message_delay_level)
        if self.send_thread_pool_queue_capacity <= 0:
            raise ClientError("sendThreadPoolQueueCapacity must be > 0")
        if not 1 <= self.send_message_thread_pool_nums <= 65:
            raise ClientError(
                f"sendMessageThreadPoolNums={self.send_message_thread_pool_nums}: expected 1..65 "
                "(the event loop and up to 64 C send threads)"
            )
        slice_us = self.event_loop_sched_slice_us
        low, high = rmqcore.SCHED_SLICE_MIN_US, rmqcore.SCHED_SLICE_MAX_US
        if slice_us != 0 and not low <= slice_us <= high:
            raise ClientError(
                f"eventLoopSchedSliceUs={slice_us}: expected 0 (the kernel's default) "
                f"or {low}..{high} µs (the range Linux takes)"
            )
        if not 0 <= self.event_loop_busy_poll_us <= POLL_MAX_US:
            raise ClientError(
                f"eventLoopBusyPollUs={self.event_loop_busy_poll_us}: expected 0 (off) "
                f"or 1..{POLL_MAX_US} µs"
            )
        if not 0 <= self.event_loop_busy_poll_spare_percent <= SPARE_PERCENT_MAX:
            raise ClientError(
                f"eventLoopBusyPollSparePercent={self.event_loop_busy_poll_spare_percent}: "
                f"expected 0 (poll whatever the load) to {SPARE_PERCENT_MAX} (percent of one CPU)"
            )
        if self.client_channel_max_idle_time_ms <= 0 or self.server_frame_read_timeout_ms <= 0:
            raise ClientError("clientChannelMaxIdleTimeMs and serverFrameReadTimeoutMs must be > 0")
        if self.broker_ip1:
            try:
                socket.inet_aton(self.broker_ip1)
            except OSError:
                raise ClientError(
                    f"brokerIP1 {self.broker_ip1!r} must be a dotted IPv4 address "
                    "(clients reach the broker by it; RocketMQ's C++ client needs IPv4)"
                ) from None

    @property
    def acl_file_path(self) -> str:
        """Where plain_acl.yml is ("" when neither a file nor a home is set)."""
        home = self.rocketmq_home or os.environ.get("ROCKETMQ_HOME", "")
        if self.acl_plain_file:
            if os.path.isabs(self.acl_plain_file) or not home:
                return self.acl_plain_file
            return os.path.join(home, self.acl_plain_file)
        return os.path.join(home, "conf", "plain_acl.yml") if home else ""

    @property
    def metrics_config(self) -> MetricsConfig:
        return MetricsConfig(
            self.metrics_exporter_type,
            self.metrics_prom_exporter_host,
            self.metrics_prom_exporter_port,
            self.metrics_label_value_limit,
            self.metrics_rpc_latency_sample_every,
        )

    @property
    def ha_port(self) -> int:
        """The port the HAService listens on (0: any free one)."""
        if self.ha_listen_port >= 0:
            return self.ha_listen_port
        return self.listen_port + 1 if self.listen_port else 0

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.message_delay_level)

    @property
    def advertised_ip(self) -> str:
        if self.broker_ip1:
            return self.broker_ip1
        if self.listen_host not in ("", "0.0.0.0"):
            return self.listen_host
        return local_ip()

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> BrokerConfig:
        return cls(**settings_from_properties(cls, props, {"brokerIP1": "broker_ip1"}))


def load_broker_conf(
    path: str | None, overrides: Mapping[str, Any] | None = None
) -> tuple[BrokerConfig, MessageStoreConfig]:
    """Both configs from a broker.conf (or defaults), then overrides."""
    props: dict[str, Any] = dict(read_properties(path)) if path else {}
    props.update(overrides or {})
    acl_keys = ("aclPlainFile", "acl_plain_file", "rocketmqHome", "rocketmq_home")
    if path and not any(props.get(k) for k in acl_keys) and not os.environ.get("ROCKETMQ_HOME"):
        # no home: plain_acl.yml lives beside the broker.conf
        props["aclPlainFile"] = os.path.join(
            os.path.dirname(os.path.abspath(path)), "plain_acl.yml"
        )
    known = {f.name for f in dataclasses.fields(BrokerConfig)} | {
        f.name for f in dataclasses.fields(MessageStoreConfig)
    }
    known |= {camel_case(n) for n in known} | {"brokerIP1", "brokerIP2"}
    known |= {camel_case(n[:-3]) for n in known if n.endswith("_ms")}
    # tls.* keys belong to TlsConfig (pyrmq.remoting.tls), read by the caller
    unknown = sorted(k for k in props if k not in known and not k.startswith("tls."))
    if unknown:
        import logging

        logging.getLogger("pyrmq.broker").warning(
            "ignoring broker.conf keys pyrmq does not use: %s", ", ".join(unknown)
        )
    broker = BrokerConfig.from_properties(props)
    store = MessageStoreConfig.from_properties(props)
    return broker, store
