"""Broker: wiring and lifecycle only (RocketMQ BrokerController)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from typing import Any

from pyrmq.acl import PlainAccessValidator
from pyrmq.broker import busy_poll
from pyrmq.broker.busy_poll import PollWindow
from pyrmq.broker.client_manager import ConsumerManager, ProducerManager, RebalanceLockManager
from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.dedup import DuplicateDetector
from pyrmq.broker.ha.client import HAClient
from pyrmq.broker.ha.roles import BrokerRoles
from pyrmq.broker.ha.service import HAService
from pyrmq.broker.metrics import BrokerMetrics
from pyrmq.broker.offset_manager import ConsumerOffsetManager
from pyrmq.broker.pop import PopService
from pyrmq.broker.processor.acl import AclAdminProcessor
from pyrmq.broker.processor.admin import AdminBrokerProcessor
from pyrmq.broker.processor.admin_groups import AdminGroupProcessor
from pyrmq.broker.processor.admin_queue import AdminQueueProcessor
from pyrmq.broker.processor.admin_stats import AdminStatsProcessor
from pyrmq.broker.processor.consumer_manage import ConsumerManageProcessor
from pyrmq.broker.processor.pop import PopMessageProcessor
from pyrmq.broker.processor.pull import PullMessageProcessor
from pyrmq.broker.processor.send import SendMessageProcessor
from pyrmq.broker.processor.send_fast import SendFastPath
from pyrmq.broker.registration import BrokerOuterAPI
from pyrmq.broker.runtime_config import BrokerRuntimeConfig
from pyrmq.broker.schedule import ScheduleMessageService
from pyrmq.broker.stats import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    SAMPLE_INTERVAL,
    BrokerStatsManager,
)
from pyrmq.broker.subscription_group import SubscriptionGroupManager
from pyrmq.broker.timer import TIMER_TOPIC, TimerMessageService
from pyrmq.broker.topic_config import PERM_READ, PERM_WRITE, TopicConfigManager
from pyrmq.broker.transaction import (
    EndTransactionProcessor,
    TransactionalMessageCheckService,
    TransactionalMessageService,
)
from pyrmq.common.errors import ClientError
from pyrmq.remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    ResponseCode,
    TlsConfig,
)
from pyrmq.remoting.connection import Connection
from pyrmq.storage import MessageStore, MessageStoreConfig
from pyrmq.storage.clean import disk_used_ratio

log = logging.getLogger("pyrmq.broker")


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


class Broker:
    """`async with Broker(broker_config, store_config) as broker:`. Listens on
    broker_config.listen_port (0 = any free port; see `port`/`addr`).
    `tls`: TLS on its port (tls.server.*) and on its own connections to the
    name servers (tls.enable, tls.client.*); the files are read here."""

    def __init__(
        self,
        config: BrokerConfig,
        store_config: MessageStoreConfig,
        *,
        tls: TlsConfig | None = None,
        config_path: str | None = None,
    ) -> None:
        self.config = config
        self.store_config = store_config
        #: the broker.conf it was started from (-c), where UPDATE_BROKER_CONFIG
        #: writes accepted changes back; None: started from flags or defaults
        self.config_path = config_path
        self.tls = tls
        if tls is not None:
            tls.server_context()  # a bad file fails now, before the store opens
        self.server: RemotingServer | None = None
        self.store: MessageStore | None = None
        self.client = RemotingClient(
            name="broker-outer", ssl_context=tls.client_context() if tls is not None else None
        )
        self.port = config.listen_port
        self.ip = config.advertised_ip
        self._tasks: list[asyncio.Task[None]] = []
        self._next_publish: asyncio.Task[None] | None = None
        self._started_at = time.time()
        #: the busy poller of the loop the broker runs on (eventLoopBusyPollUs,
        #: pyrmq/broker/busy_poll.py; found at start); the send processor
        #: touches it as it serves sends
        self.busy_poller: PollWindow | None = None
        #: "asyncio" or "uvloop": the event loop the broker runs on (found at start)
        self.event_loop = ""
        #: master or slave, replication, controller mode's role changes
        self.roles = BrokerRoles(self)
        #: aclEnable=true: the check of every request (pyrmq/acl/validator.py)
        self.acl: PlainAccessValidator | None = None
        #: the Prometheus endpoint (metricsExporterType=PROM), else None
        self.metrics: BrokerMetrics | None = None

    @property
    def ha(self) -> HAService | None:
        """A master's replication service (None on a slave)."""
        return self.roles.ha

    @property
    def ha_client(self) -> HAClient | None:
        """A slave's replication client (None on a master)."""
        return self.roles.ha_client

    @property
    def addr(self) -> str:
        """The address clients use (brokerIP1:listenPort)."""
        return f"{self.ip}:{self.port}"

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _prepare_commit_log_path(self) -> None:
        root = self.store_config.store_path_root_dir
        want = self.config.store_path_commit_log
        default = os.path.join(root, "commitlog")
        if not want or os.path.abspath(want) == os.path.abspath(default):
            return
        # storePathCommitLog elsewhere: the store opens <root>/commitlog, a
        # link to the configured folder.
        os.makedirs(want, exist_ok=True)
        os.makedirs(root, exist_ok=True)
        if os.path.islink(default):
            if os.path.realpath(default) == os.path.realpath(want):
                return
            raise ClientError(
                f"{default} links to {os.path.realpath(default)}, not storePathCommitLog={want}"
            )
        if os.path.exists(default):
            raise ClientError(
                f"storePathCommitLog={want} but {default} already holds a CommitLog; "
                "move it there or drop storePathCommitLog"
            )
        os.symlink(os.path.abspath(want), default)

    async def _open_acl(self) -> None:
        """aclEnable=true: load plain_acl.yml (a startup error when it is
        missing or malformed) and check every request against it."""
        cfg = self.config
        path = cfg.acl_file_path
        if not path:
            raise ClientError(
                "aclEnable=true needs plain_acl.yml: set rocketmqHome (it is then "
                "<rocketmqHome>/conf/plain_acl.yml) or aclPlainFile in broker.conf"
            )
        self.acl = await PlainAccessValidator.open(path)
        log.info(
            "acl: enabled, %d accounts from %s",
            len(self.acl.config.accounts),
            os.path.abspath(path),
        )

    def _acl_hook(self, conn: Connection, cmd: RemotingCommand) -> None:
        acl = self.acl
        # the gRPC proxy's in-process channels: their requests were checked
        # against the 5.x signature before they got here (pyrmq/proxy/auth.py)
        if acl is not None and not conn.attrs.get("acl_checked"):
            acl.validate(conn.peer, cmd.code, cmd.ext_fields, cmd.body)

    async def start(self) -> None:
        cfg = self.config
        if cfg.acl_enable:
            await self._open_acl()
        if cfg.duplicate_detection and not self.store_config.message_index_enable:
            raise ClientError(
                "duplicateDetection=true needs the IndexFiles: set messageIndexEnable=true"
            )
        sock = socket.create_server((cfg.listen_host, cfg.listen_port), backlog=1024)
        try:
            self.port = sock.getsockname()[1]
            if cfg.metrics_config.enabled:
                self.metrics = BrokerMetrics(self, cfg.metrics_config)
                await self.metrics.listen()
            self._prepare_commit_log_path()
            self.store = store = MessageStore(self.store_config, store_host=(self.ip, self.port))
            await store.start()
            await self.roles.open(store)
        except BaseException:
            sock.close()
            if self.metrics is not None:
                await self.metrics.shutdown()
            if self.store is not None:
                await self.store.shutdown()
            raise
        root = self.store_config.store_path_root_dir
        self.topics = TopicConfigManager(
            root,
            cluster_name=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            default_topic_queue_nums=cfg.default_topic_queue_nums,
            auto_create_topic_enable=cfg.auto_create_topic_enable,
            max_queue_nums=self.store_config.max_queue_nums,
            on_change=self._topics_changed,
            delay_levels=len(cfg.delay_levels_ms),
        )
        if cfg.trace_topic_enable:
            # where clients with message trace on write their records
            self.topics.create_system_group_topic(
                cfg.msg_trace_topic_name, 1, PERM_READ | PERM_WRITE
            )
        self.offsets = ConsumerOffsetManager(os.path.join(root, "config", "consumerOffset.json"))
        self.groups = SubscriptionGroupManager(
            root,
            auto_create_subscription_group=cfg.auto_create_subscription_group,
            retry_queue_nums=cfg.retry_queue_nums,
            retry_max_times=cfg.max_reconsume_times,
        )
        self.stats = BrokerStatsManager(cfg.broker_cluster_name)
        channel_idle = cfg.client_channel_max_idle_time_ms / 1000
        self.consumers = ConsumerManager(self._notify_consumer_ids_changed, channel_idle)
        self.producers = ProducerManager(channel_idle)
        self.locks = RebalanceLockManager(cfg.rebalance_lock_max_live_time_ms / 1000)
        self.transactions = TransactionalMessageService(store, self.topics, self.offsets)
        self.transaction_check = TransactionalMessageCheckService(
            self.transactions,
            self.producers,
            timeout_ms=cfg.transaction_time_out,
            check_max=cfg.transaction_check_max,
            check_interval_ms=cfg.transaction_check_interval,
        )
        self.end_transaction = EndTransactionProcessor(self.transactions, slave=self.roles.slave)
        self.dedup = None
        if cfg.duplicate_detection:
            self.dedup = DuplicateDetector(
                store, cfg.duplicate_detection_window_seconds, cfg.duplicate_detection_key
            )
            await self.dedup.start()
        self.send_processor = SendMessageProcessor(
            store,
            self.topics,
            delay_levels=len(cfg.delay_levels_ms),
            max_reconsume_times=cfg.max_reconsume_times,
            retry_queue_nums=cfg.retry_queue_nums,
            max_message_size=self.store_config.max_message_size,
            broker_permission=cfg.broker_permission,
            send_queue_capacity=cfg.send_thread_pool_queue_capacity,
            fast_failure=cfg.broker_fast_failure_enable,
            broker_role="SLAVE" if self.roles.slave else cfg.broker_role,
            ha=self.ha,
            transactions=None if cfg.reject_transaction_message else self.transactions,
            dedup=self.dedup,
            timer_max_delay_ms=cfg.timer_max_delay_sec * 1000 if cfg.timer_wheel_enable else None,
        )
        self.pull_processor = PullMessageProcessor(
            store,
            self.topics,
            self.consumers,
            self.offsets,
            long_polling_enable=cfg.long_polling_enable,
            short_polling_time_ms=cfg.short_polling_time_mills,
            enable_property_filter=cfg.enable_property_filter,
            sendfile_min_bytes=cfg.transfer_by_sendfile_min_bytes,
            broker_permission=cfg.broker_permission,
            broker_role="SLAVE" if self.roles.slave else cfg.broker_role,
            slave_read_enable=cfg.slave_read_enable,
            memory_limit_bytes=_physical_memory() * cfg.access_message_in_memory_max_ratio // 100,
            answer_in_c=cfg.pull_fast_path_enable,
        )
        cm = ConsumerManageProcessor(
            store,
            self.topics,
            self.consumers,
            self.producers,
            self.offsets,
            self.locks,
            broker_name=cfg.broker_name,
            retry_queue_nums=cfg.retry_queue_nums,
            publish_topics=self._topics_published,
            enable_property_filter=cfg.enable_property_filter,
        )
        admin = AdminBrokerProcessor(
            store,
            self.topics,
            self.offsets,
            runtime_info=self.runtime_info,
            publish_topics=self._topics_published,
            consumers=self.consumers,
            broker_name=cfg.broker_name,
        )
        for proc in (self.send_processor, self.pull_processor, cm):
            proc.groups = self.groups
        self.send_processor.stats = self.pull_processor.stats = self.stats
        groups_admin = AdminGroupProcessor(
            store,
            self.topics,
            self.offsets,
            self.groups,
            self.consumers,
            self.producers,
            self.stats,
            broker_name=cfg.broker_name,
        )
        self._start_busy_poll()
        self.runtime_config = self._runtime_config(cm)
        stats_admin = AdminStatsProcessor(
            store,
            self.topics,
            self.stats,
            self.runtime_config,
            groups_admin,
            broker_name=cfg.broker_name,
            broker_addr=lambda: self.addr,
        )
        self.pop = PopService(
            store,
            self.topics,
            self.offsets,
            self.groups,
            broker_name=cfg.broker_name,
            cluster=cfg.broker_cluster_name,
        )
        self.timer = TimerMessageService(store, root)
        self.topics.create_system_group_topic(TIMER_TOPIC, 1, PERM_READ | PERM_WRITE)
        self.schedule = ScheduleMessageService(
            store,
            cfg.delay_levels_ms,
            root,
            persist_interval=cfg.flush_delay_offset_interval / 1000,
        )
        server = self.server = RemotingServer(
            cfg.listen_host,
            self.port,
            name="broker",
            channel_max_idle=channel_idle,
            frame_read_timeout=cfg.server_frame_read_timeout_ms / 1000,
            tls=self.tls,
        )
        sp = self.send_processor
        sp.on_send = self.busy_poller.touch if self.busy_poller is not None else None
        if cfg.send_fast_path_enable:
            sp.fast = server.fast_path = SendFastPath(sp, server, store, self.topics)
            sp.fast.lanes = cfg.send_message_thread_pool_nums - 1
            sp.fast.wake_pulls = self.pull_processor.wake_held
        for code in (
            RequestCode.SEND_MESSAGE,
            RequestCode.SEND_MESSAGE_V2,
            RequestCode.SEND_BATCH_MESSAGE,
        ):
            server.register(code, sp.process_send)
        PopMessageProcessor(
            self.pop,
            store,
            self.topics,
            self.groups,
            self.offsets,
            broker_name=cfg.broker_name,
            send_back=sp.process_send_back,
        ).register(server)  # POP_MESSAGE & co, and CONSUMER_SEND_MSG_BACK
        server.register(RequestCode.END_TRANSACTION, self.end_transaction.process)
        server.register(RequestCode.GET_PENDING_TRANSACTIONS, self.end_transaction.pending)
        server.register(RequestCode.PULL_MESSAGE, self.pull_processor.process)
        server.register(RequestCode.HEART_BEAT, cm.heart_beat)
        server.register(RequestCode.CHECK_CLIENT_CONFIG, cm.check_client_config)
        server.register(RequestCode.UNREGISTER_CLIENT, cm.unregister_client)
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, cm.consumer_list)
        server.register(RequestCode.QUERY_CONSUMER_OFFSET, cm.query_offset)
        server.register(RequestCode.UPDATE_CONSUMER_OFFSET, cm.update_offset)
        server.register(RequestCode.LOCK_BATCH_MQ, cm.lock_batch)
        server.register(RequestCode.UNLOCK_BATCH_MQ, cm.unlock_batch)
        server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, admin.update_and_create_topic)
        server.register(RequestCode.DELETE_TOPIC_IN_BROKER, admin.delete_topic)
        server.register(RequestCode.GET_ALL_TOPIC_CONFIG, admin.all_topic_config)
        server.register(RequestCode.GET_MAX_OFFSET, admin.max_offset)
        server.register(RequestCode.GET_MIN_OFFSET, admin.min_offset)
        server.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, admin.search_offset)
        server.register(RequestCode.GET_EARLIEST_MSG_STORETIME, admin.earliest_msg_store_time)
        server.register(RequestCode.VIEW_MESSAGE_BY_ID, admin.view_message_by_id)
        server.register(RequestCode.QUERY_MESSAGE, admin.query_message)
        server.register(RequestCode.GET_BROKER_RUNTIME_INFO, admin.runtime_info)
        server.register(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, admin.invoke_broker_to_reset_offset
        )
        self._register_admin(server, groups_admin, stats_admin)
        queue_admin = AdminQueueProcessor(store, self.topics, self.consumers)
        server.register(RequestCode.QUERY_CONSUME_QUEUE, queue_admin.query_consume_queue)
        server.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self._all_consumer_offsets)
        server.register(RequestCode.GET_ALL_DELAY_OFFSET, self._all_delay_offsets)
        server.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self.roles.role_changed)
        server.add_close_listener(self._channel_closed)
        AclAdminProcessor(
            self.acl,
            broker_name=cfg.broker_name,
            broker_addr=self.addr,
            cluster_name=cfg.broker_cluster_name,
        ).register(server)
        if self.acl is not None:
            server.add_rpc_hook(self._acl_hook)
            await self.acl.start()
        self.outer = BrokerOuterAPI(
            self.client,
            cfg.namesrv_addrs,
            cluster=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            broker_id=cfg.broker_id,
            broker_addr=self.addr,
            ha_server_addr=f"{self.ip}:{self.ha.port if self.ha else self.port + 1}",
            topic_wrapper=self._registered_topics,
            on_master=self.roles.master_learned,
        )
        if self.roles.slave:
            # delivery of delayed messages is the master's; a slave keeps
            # the offsets only (SlaveSynchronize)
            self.schedule.load_offsets()
        else:
            await self.schedule.start()
            await self.start_transactions()
            await self.pop.start()
            await self.timer.start()
        await server.start(sock=sock)
        if self.metrics is not None:
            self.metrics.attach()
        await self.topics.persist()
        log.info(
            "broker %s (%s) %s id %d listening on %s:%d; clients use %s; store %s (%s)",
            cfg.broker_name,
            cfg.broker_cluster_name,
            cfg.broker_role,
            cfg.broker_id,
            cfg.listen_host,
            self.port,
            self.addr,
            os.path.abspath(root),
            self.store_config.flush_disk_type.value,
        )
        # controller mode: registered once the controllers gave it a role
        await self.roles.start(store)
        if cfg.namesrv_addrs and not self.roles.controller_mode:
            await self.outer.register_all()
        elif not cfg.namesrv_addrs:
            log.warning("no namesrvAddr configured: clients cannot find this broker by route")
        self._tasks += [
            asyncio.create_task(
                self._every(cfg.register_name_server_period / 1000, self.outer.register_all),
                name="pyrmq:broker:register",
            ),
            asyncio.create_task(
                self._every(cfg.flush_consumer_offset_interval / 1000, self._persist_offsets),
                name="pyrmq:broker:offsets",
            ),
            asyncio.create_task(
                self._every(10.0, self._scan_clients), name="pyrmq:broker:scan-clients"
            ),
            asyncio.create_task(
                self._every(SAMPLE_INTERVAL, self._sample_stats), name="pyrmq:broker:stats"
            ),
        ]

    async def start_transactions(self) -> None:
        """A master serves transactions: what is pending is rebuilt from the
        half and op queues, and the check-back runs."""
        self.end_transaction.slave = False
        await self.transactions.start()
        self.transaction_check.start()

    async def stop_transactions(self) -> None:
        """A slave leaves them to its master."""
        self.end_transaction.slave = True
        await self.transaction_check.shutdown()
        self.transactions.stop()

    async def _persist_offsets(self) -> None:
        await self.offsets.persist()
        await self.groups.persist()  # groups auto-created since the last save
        if self.roles.slave:
            await self.schedule.persist()

    def _all_consumer_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_ALL_CONSUMER_OFFSET (43): consumerOffset.json's content."""
        body = json.dumps(self.offsets.snapshot()).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def _all_delay_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET (45): delayOffset.json's content."""
        body = json.dumps(self.schedule.snapshot()).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    async def _every(self, interval: float, job: Any) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("broker: periodic job %s failed", getattr(job, "__name__", job))

    @staticmethod
    def _register_admin(
        server: RemotingServer, groups: AdminGroupProcessor, stats: AdminStatsProcessor
    ) -> None:
        """The requests of mqadmin and rocketmq-dashboard (groups, stats, config)."""
        for code, handler in (
            (
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                groups.update_and_create_subscription_group,
            ),
            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, groups.all_subscription_group),
            (RequestCode.DELETE_SUBSCRIPTIONGROUP, groups.delete_subscription_group),
            (RequestCode.GET_CONSUMER_CONNECTION_LIST, groups.consumer_connection_list),
            (RequestCode.GET_PRODUCER_CONNECTION_LIST, groups.producer_connection_list),
            (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, groups.query_topic_consume_by_who),
            (RequestCode.GET_CONSUME_STATS, groups.get_consume_stats),
            (RequestCode.QUERY_CONSUME_TIME_SPAN, groups.query_consume_time_span),
            (RequestCode.CLONE_GROUP_OFFSET, groups.clone_group_offset),
            (RequestCode.GET_CONSUMER_RUNNING_INFO, groups.consumer_running_info),
            (RequestCode.CONSUME_MESSAGE_DIRECTLY, groups.consume_message_directly),
            (RequestCode.GET_TOPIC_STATS_INFO, stats.topic_stats_info),
            (RequestCode.VIEW_BROKER_STATS_DATA, stats.view_broker_stats_data),
            (RequestCode.GET_BROKER_CONSUME_STATS, stats.broker_consume_stats),
            (RequestCode.GET_BROKER_CONFIG, stats.get_broker_config),
            (RequestCode.UPDATE_BROKER_CONFIG, stats.update_broker_config),
        ):
            server.register(code, handler)

    def _runtime_config(self, cm: ConsumerManageProcessor) -> BrokerRuntimeConfig:
        """The keys UPDATE_BROKER_CONFIG may change while the broker runs,
        bound to the components that read them."""
        rc = BrokerRuntimeConfig(
            self.config, self.store_config, self._config_changed, self.config_path
        )
        sp, pp = self.send_processor, self.pull_processor
        rc.bind("brokerPermission", (sp, "broker_permission"), (pp, "broker_permission"))
        rc.bind("autoCreateSubscriptionGroup", (self.groups, "auto_create_subscription_group"))
        rc.bind("longPollingEnable", (pp, "long_polling_enable"))
        rc.bind("shortPollingTimeMills", (pp, "short_polling_time_ms"))
        rc.bind("slaveReadEnable", (pp, "slave_read_enable"))
        rc.bind("transferBySendfileMinBytes", (pp, "sendfile_min_bytes"))
        rc.bind(
            "enablePropertyFilter", (pp, "enable_property_filter"), (cm, "enable_property_filter")
        )
        rc.bind(
            "maxReconsumeTimes",
            (sp, "max_reconsume_times"),
            (self.groups, "default_retry_max_times"),
        )
        rc.bind(
            "retryQueueNums",
            (sp, "retry_queue_nums"),
            (cm, "retry_queue_nums"),
            (self.groups, "default_retry_queue_nums"),
        )
        rc.bind("brokerFastFailureEnable", (sp, "fast_failure"))
        rc.bind("sendThreadPoolQueueCapacity", (sp, "send_queue_capacity"))
        if self.busy_poller is not None:
            rc.bind("eventLoopBusyPollUs", (self.busy_poller, "max_us"))
            rc.bind("eventLoopBusyPollSparePercent", (self.busy_poller, "spare_percent"))
        return rc

    def _start_busy_poll(self) -> None:
        loop = asyncio.get_running_loop()
        self.event_loop = type(loop).__module__.partition(".")[0]
        poller = self.busy_poller = busy_poll.poller_for(loop)
        us = poller.max_us = self.config.event_loop_busy_poll_us
        spare = poller.spare_percent = self.config.event_loop_busy_poll_spare_percent
        polls = (
            f", polls for up to {us} µs before it sleeps (eventLoopBusyPollUs) while "
            f"{spare}% of a CPU is spare (eventLoopBusyPollSparePercent)"
            if us
            else ""
        )
        log.info("event loop: %s%s", self.event_loop, polls)

    def _config_changed(self, config: BrokerConfig, keys: set[str]) -> None:
        self.config = config
        if "brokerPermission" in keys:
            # the name servers route reads and writes by it (registerBrokerAll)
            self.topics.bump_version()

    def _registered_topics(self) -> dict[str, Any]:
        """The topic table as registered: a broker that takes no writes (or
        reads) now registers every topic with its brokerPermission, so the
        name servers route none there (RocketMQ's registerBrokerAll)."""
        wrapper = self.topics.serialize_wrapper()
        perm = self.config.broker_permission
        if perm & (PERM_READ | PERM_WRITE) != PERM_READ | PERM_WRITE:
            for tc in wrapper["topicConfigTable"].values():
                tc["perm"] = perm
        return wrapper

    async def _sample_stats(self) -> None:
        self.stats.sample()

    async def _scan_clients(self) -> None:
        self.consumers.scan_not_active()
        self.producers.scan_not_active()

    def _topics_changed(self) -> None:
        """TopicConfigManager's on_change: save the topic table and register
        with the name servers once for every change made in this loop turn."""
        if self._next_publish is None:
            task = asyncio.get_running_loop().create_task(
                self._publish(), name="pyrmq:broker:topic-change"
            )
            self._next_publish = task
            self._tasks.append(task)
            task.add_done_callback(self._forget_task)

    async def _publish(self) -> None:
        await asyncio.sleep(0)  # let the changes of this turn gather
        self._next_publish = None  # changes from now on need another publish
        try:
            await self.topics.persist()
        except OSError as e:
            # out of descriptors or disk: the table stays in memory, saved at
            # the next change or at shutdown; the name servers still hear of it
            log.error("broker: the topic table was not saved: %s", e)
        if self.config.namesrv_addrs:
            await self.outer.register_all()

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    async def _topics_published(self) -> None:
        """Wait until the latest topic change is saved and registered."""
        task = self._next_publish
        if task is not None:
            await asyncio.shield(task)

    def _notify_consumer_ids_changed(self, group: str, channels: list[Any]) -> None:
        for conn in channels:
            if isinstance(conn, Connection) and conn.is_open:
                conn.invoke_oneway(
                    RemotingCommand(
                        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                        {"consumerGroup": group},
                        language="JAVA",
                    )
                )

    def _channel_closed(self, conn: Connection) -> None:
        self.pull_processor.channel_closed(conn)
        self.consumers.channel_closed(conn)
        self.producers.channel_closed(conn)

    def runtime_info(self) -> dict[str, Any]:
        store = self.store
        assert store is not None
        return {
            "brokerVersionDesc": "pyrmq",
            "bootTimestamp": int(self._started_at * 1000),
            "commitLogMinOffset": store.commit_log_min_offset,
            "commitLogMaxOffset": store.commit_log_max_offset,
            "flushedOffset": store.flushed_offset,
            "heldPulls": self.pull_processor.held_count,
            "scheduleMessageDelivered": self.schedule.delivered,
            **self.transaction_check.status(),
            **self.pop.status(),
            "timerDelivered": self.timer.delivered,
            "duplicatesDetected": self.dedup.duplicates if self.dedup else 0,
            # pyrmq: sends stored and answered by the C send path (send_fast.py)
            "sendFastPathServed": fast.served if (fast := self.send_processor.fast) else 0,
            "sendFastPathServedOnThreads": fast.served_on_lanes if fast else 0,
            "connections": len(self.server.connections) if self.server else 0,
            # pyrmq: the event loop (asyncio, uvloop: pyrmq broker --event-loop),
            # and eventLoopBusyPoll* when it can poll (busy_poll.py)
            "eventLoop": self.event_loop,
            **busy_poll.status(self.busy_poller),
            "brokerRole": self.config.broker_role,
            "brokerId": self.config.broker_id,
            # RocketMQ's keys, as mqadmin brokerStatus and the dashboards
            # read them: messages stored and pulled per second over 10 s,
            # 60 s and 600 s; the used fraction of the CommitLog's disk
            "putTps": self.stats.tps_text(BROKER_PUT_NUMS, self.config.broker_cluster_name),
            "getTransferedTps": self.stats.tps_text(
                BROKER_GET_NUMS, self.config.broker_cluster_name
            ),
            "commitLogDiskRatio": f"{disk_used_ratio(store.config.store_path_root_dir):.4f}",
            "metricsPromExporterAddr": self.metrics.addr if self.metrics else "",
            **self.roles.status(),
        }

    async def shutdown(self) -> None:
        if self.busy_poller is not None:
            self.busy_poller.max_us = 0  # the loop may run on after the broker
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        if self.acl is not None:
            await self.acl.shutdown()
        if self.store is None:
            return
        if self.config.namesrv_addrs and hasattr(self, "outer"):
            await self.outer.unregister_all()
        await self.roles.shutdown()
        if hasattr(self, "pull_processor"):
            self.pull_processor.shutdown()
            self.send_processor.shutdown()
        await self.roles.close_ha_service()
        if self.server is not None:
            await self.server.shutdown()
        if self.metrics is not None:
            await self.metrics.shutdown()
        if hasattr(self, "schedule"):
            await self.pop.shutdown()
            await self.timer.shutdown()
            await self.schedule.shutdown()
            await self.transaction_check.shutdown()
            self.transactions.stop()
        if hasattr(self, "offsets"):
            self.offsets.persist_now()
            self.topics.persist_now()
            self.groups.persist_now()
        await self.client.shutdown()
        await self.store.shutdown()
        self.store = None
        log.info("broker %s shut down", self.config.broker_name)
