"""Producer (DefaultMQProducer + DefaultMQProducerImpl), asyncio-native.

    async with Producer("my-group", namesrv_addr="127.0.0.1:9876") as producer:
        result = await producer.send(Message("TopicTest", b"hello"))

Sends go as SEND_MESSAGE_V2 (one message) or SEND_BATCH_MESSAGE (a batch in
one request), what a Java 4.x broker accepts. Topic routes come from the
name server on first use, every 30 s after and again after a failure; a
topic with no route yet is published through TBW102 (the broker creates it
when autoCreateTopicEnable is on). A failed synchronous send is retried on
another broker (retry_times_when_send_failed, 2 by default) within the
send's deadline."""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

import rmqcore
from pyrmq.acl.signing import AclClientRPCHook
from pyrmq.client.api import DEFAULT_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, SEND_CODE
from pyrmq.client.instance import ClientInstance
from pyrmq.common.errors import BrokerError, ClientError, RemotingError, RMQError
from pyrmq.common.message import COMPRESS_LEVEL, Message, MessageQueue
from pyrmq.common.results import SendResult, SendStatus
from pyrmq.common.route import TopicPublishInfo, TopicRouteData
from pyrmq.producer.attempt import FirstAttempt, route_suspect
from pyrmq.producer.batching import DEFAULT_MAX_DELAY_MS, SendAccumulator
from pyrmq.producer.fault import MQFaultStrategy
from pyrmq.producer.prepare import SendJob, make_job
from pyrmq.producer.selector import MessageQueueSelector
from pyrmq.producer.trace import TraceDispatcher
from pyrmq.remoting import RemotingCommand, ResponseCode
from pyrmq.remoting.connection import next_opaque
from pyrmq.remoting.tls import resolve_client_tls
from rmqcore import send_request_fields

log = logging.getLogger("pyrmq.producer")

DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
MAX_MESSAGE_SIZE = 4 * 1024 * 1024

#: seconds before a send answered SYSTEM_BUSY is tried again on the same
#: broker, doubled for each further SYSTEM_BUSY of that send (RocketMQ 5's
#: clients back off on TOO_MANY_REQUESTS); retrying at once only fed the
#: overload (a producer pipelining thousands of sends spun on refusals)
BUSY_BACKOFF = 0.1

#: send_async's callback: called once with (result, None) or (None, error)
SendCallback = Callable[[SendResult | None, BaseException | None], Any]


def _is_busy(e: BaseException | None) -> bool:
    return isinstance(e, BrokerError) and e.code == ResponseCode.SYSTEM_BUSY


class Producer:
    """Sends messages to the brokers of a RocketMQ cluster.

    Parameters keep the Java names in snake_case; times are seconds.
    Bodies of `compress_msg_body_over_howmuch` bytes or more (4096) are
    zlib-compressed at `compress_level` (RocketMQ 5's compressLevel, 5).
    `send_latency_fault_enable` turns on latency fault tolerance (brokers
    that answered slowly or failed are avoided for a while); `clock` is the
    time source of that bookkeeping (tests inject one). `tls=True` (the
    Java client's useTLS) makes every connection TLS: servers' certificates
    must chain to `tls_ca` (PEM; the system's CAs when None) and match the
    address dialed; `tls_cert` + `tls_key` answer a server that asks for a
    client certificate. An `ssl.SSLContext` may be given as `tls` instead.

    `auto_batch` (RocketMQ 5's autoBatch; on by default) coalesces
    concurrent send() / send_async() calls of single messages to one queue
    into one SEND_BATCH_MESSAGE; every caller still gets its own SendResult
    (its msg_id, offset id and queue offset) or its own error. A send with
    nothing of its queue in flight leaves at once, alone; sends that come
    while one is in flight fill a batch, which leaves when it holds
    `batch_max_bytes` (32 KiB, at most max_message_size) or 1,024
    messages, when the request in flight is answered, or
    `batch_max_delay_ms` (10; 0: at the end of the loop iteration) after
    its first message. Delayed, transactional and compressed messages,
    %RETRY% topics, oneway sends and explicit batches are sent as without
    it (pyrmq.producer.batching says which and why). `auto_batch_stats` counts
    what went out batched."""

    def __init__(
        self,
        producer_group: str = DEFAULT_PRODUCER_GROUP,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        send_msg_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        compress_msg_body_over_howmuch: int = 4096,
        compress_level: int = COMPRESS_LEVEL,
        max_message_size: int = MAX_MESSAGE_SIZE,
        send_latency_fault_enable: bool = False,
        default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
        instance_name: str | None = None,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        enable_msg_trace: bool = False,
        custom_trace_topic: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        tls: bool | ssl.SSLContext = False,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        rpc_hook: AclClientRPCHook | None = None,
        client_instance: ClientInstance | None = None,
        auto_batch: bool = True,
        batch_max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
        batch_max_bytes: int | None = None,
    ) -> None:
        if not producer_group or len(producer_group) > 255:
            raise ValueError("producer_group must be 1..255 characters")
        if retry_times_when_send_failed < 0 or retry_times_when_send_async_failed < 0:
            raise ValueError("retry counts must be >= 0")
        if not 0 <= compress_level <= 9:
            raise ValueError(f"compress_level must be 0..9 (zlib), got {compress_level}")
        self.producer_group = producer_group
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        #: zlib level of compressed bodies (RocketMQ's compressLevel, 5)
        self.compress_level = compress_level
        #: one deflate stream for the producer's life (zlib.compress sets
        #: up and frees 150 KB and more of state for every body)
        self._deflate = rmqcore.Deflater(compress_level).compress
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.fault_strategy = MQFaultStrategy(send_latency_fault_enable, clock)
        #: client_instance: another client's connections, routes and
        #: heartbeat, shared (it joins their heartbeat as a second producer
        #: group); their owner starts and stops them (a trace dispatcher's
        #: producer, whose sends then ride the traced client's connections)
        self._owns_client = client_instance is None
        self.client = client_instance or ClientInstance(
            namesrv_addr,
            instance_name=instance_name,
            poll_name_server_interval=poll_name_server_interval,
            heartbeat_broker_interval=heartbeat_broker_interval,
            ssl_context=resolve_client_tls(tls, tls_ca, tls_cert, tls_key),
            access_key=access_key,
            secret_key=secret_key,
            rpc_hook=rpc_hook,
        )
        self.topic_publish_info_table: dict[str, TopicPublishInfo] = {}
        #: topics whose route is being looked up again after a failed send
        self._route_checks: set[str] = set()
        self._inflight = 0
        self._idle: asyncio.Event | None = None
        self._state = "CREATED"
        #: the loop start() ran on, where every send's future is made: on
        #: Python 3.11 asyncio.get_running_loop() is a getpid() system call
        #: (185 ns here), once per send otherwise
        self._loop: asyncio.AbstractEventLoop | None = None
        self._heartbeat_sent = False
        #: enable_msg_trace: Pub records of successful sends to the trace
        #: topic (RMQ_SYS_TRACE_TOPIC or custom_trace_topic), off the send path
        self.enable_msg_trace = enable_msg_trace
        self.custom_trace_topic = custom_trace_topic
        self.tracer: TraceDispatcher | None = None
        #: auto_batch: the open batches of concurrent single sends
        self.accumulator = (
            SendAccumulator(self, batch_max_delay_ms, batch_max_bytes) if auto_batch else None
        )

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def send_latency_fault_enable(self) -> bool:
        return self.fault_strategy.send_latency_fault_enable

    @send_latency_fault_enable.setter
    def send_latency_fault_enable(self, on: bool) -> None:
        self.fault_strategy.send_latency_fault_enable = on

    @property
    def auto_batch(self) -> bool:
        return self.accumulator is not None

    @property
    def auto_batch_stats(self) -> dict[str, int]:
        """SendAccumulator.stats; zeros when auto_batch is off."""
        a = self.accumulator
        return a.stats if a is not None else {"batches": 0, "batched": 0, "singles": 0}

    @property
    def client_id(self) -> str:
        return self.client.client_id

    async def start(self) -> None:
        """Start the route refresh and heartbeat jobs."""
        if self._state == "RUNNING":
            return
        if self._state != "CREATED":
            raise ClientError(f"the producer is {self._state.lower()}; create a new one")
        if self._owns_client:
            self.client.producer_data = [{"groupName": self.producer_group}]
        else:
            self.client.producer_data.append({"groupName": self.producer_group})
        self.client.members.append(self)
        await self.client.start()
        if self.enable_msg_trace:
            self.tracer = TraceDispatcher(self.client, self.producer_group, self.custom_trace_topic)
            await self.tracer.start()
        self._loop = asyncio.get_running_loop()
        self._state = "RUNNING"

    async def shutdown(self) -> None:
        """Wait for async sends in flight (up to their deadlines), unregister
        from the brokers and close every connection."""
        if self._state != "RUNNING":
            self._state = "SHUTDOWN"
            return
        self._state = "STOPPING"
        if self.accumulator is not None:
            self.accumulator.flush_all()
        if self._inflight:
            self._idle = asyncio.Event()
            try:
                async with asyncio.timeout(self.send_msg_timeout * 3 + 1):
                    await self._idle.wait()
            except TimeoutError:
                log.warning("%d async send(s) still unanswered at shutdown", self._inflight)
        try:
            if self.tracer is not None:
                await self.tracer.shutdown()
            await self.client.unregister(producer_group=self.producer_group)
        finally:
            if self._owns_client:
                await self.client.shutdown()
            else:
                self._leave_shared_client()
            self._state = "SHUTDOWN"

    def _leave_shared_client(self) -> None:
        client = self.client
        client.producer_data = [
            d for d in client.producer_data if d.get("groupName") != self.producer_group
        ]
        if self in client.members:
            client.members.remove(self)

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _check_running(self) -> None:
        if self._state != "RUNNING":
            raise ClientError(
                f"the producer is {self._state.lower()}: call `await producer.start()` "
                "(or use `async with`) before sending"
            )

    # -- ClientMember --------------------------------------------------------------------

    def topics_of_interest(self) -> list[str]:
        return [*self.topic_publish_info_table, DEFAULT_TOPIC]

    def on_route_changed(self, topic: str, route: TopicRouteData | None) -> None:
        if route is None:
            return
        info = self.topic_publish_info_table.get(topic)
        if info is None:
            return
        queues = route.publish_queues(topic)
        if queues:
            info.queues, info.route = queues, route
            info.order_topic = bool(route.order_topic_conf)

    # -- routes ----------------------------------------------------------------------------

    async def _publish_info(self, topic: str) -> TopicPublishInfo:
        """tryToFindTopicPublishInfo: the cached route, the name server's,
        or TBW102's queues (auto-created topics)."""
        info = self.topic_publish_info_table.get(topic)
        if info is not None and info.queues:
            return info
        route = await self.client.update_topic_route(topic)
        queues = route.publish_queues(topic) if route is not None else []
        if route is None or not queues:
            default = await self.client.update_topic_route(DEFAULT_TOPIC)
            if default is not None:
                qn = self.default_topic_queue_nums
                route = TopicRouteData(
                    tuple(
                        type(q)(
                            q.broker_name,
                            min(qn, q.read_queue_nums),
                            min(qn, q.write_queue_nums),
                            q.perm,
                            q.topic_sys_flag,
                        )
                        for q in default.queue_datas
                    ),
                    default.broker_datas,
                )
                queues = route.publish_queues(topic)
        if route is None or not queues:
            raise ClientError(
                f"No route info of this topic: {topic} (create it with `pyrmq admin updateTopic "
                f"-t {topic}` or enable autoCreateTopicEnable on the broker); name servers "
                f"{';'.join(self.client.namesrv_addrs)}"
            )
        info = TopicPublishInfo(queues, route, bool(route.order_topic_conf))
        self.topic_publish_info_table[topic] = info
        return info

    def _check_route_soon(self, topic: str) -> None:
        """A send failed in a way a stale route could explain (broker gone,
        topic moved): look the route up again, in the background. The cached
        route stays in use meanwhile, and for good when no name server
        answers: RocketMQ's producers keep sending on the routes they have
        while the name servers are away. (Dropping it instead made every later
        send ask the name servers first, so one failed send during a name
        server outage stopped the producer until they came back.) A changed
        route reaches the cache through on_route_changed."""
        if topic in self._route_checks or not self.client.started:
            return
        self._route_checks.add(topic)

        async def check() -> None:
            try:
                await self.client.update_topic_route(topic)
            except RMQError as e:
                log.info("route of %s not checked after a failed send: %s", topic, e)
            finally:
                self._route_checks.discard(topic)

        self.client.spawn(check(), f"pyrmq:producer:route-check:{topic}")

    async def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues (fetchPublishMessageQueues)."""
        self._check_running()
        return list((await self._publish_info(topic)).queues)

    # -- message preparation ------------------------------------------------------------------

    def _job(
        self,
        msg: Message | list[Message],
        mq: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
        deflated: bool = False,
        checked: bool = False,
    ) -> SendJob:
        return make_job(
            msg,
            mq,
            selector,
            arg,
            self.max_message_size,
            self.compress_msg_body_over_howmuch,
            self._deflate,
            deflated,
            checked,
        )

    def _fields(self, job: SendJob, target: MessageQueue, born: int) -> dict[str, str]:
        """The send request's header fields for job sent to target."""
        return send_request_fields(
            self.producer_group,
            target.topic,
            DEFAULT_TOPIC,
            self.default_topic_queue_nums,
            target.queue_id,
            job.sys_flag,
            born,
            job.flag,
            job.props,
            job.batch,
            target.broker_name,
        )

    def _command(self, job: SendJob, target: MessageQueue, born: int) -> RemotingCommand:
        return self.client.api.send_command(job.batch, self._fields(job, target, born), job.body)

    # -- sending ------------------------------------------------------------------------------

    async def send(
        self,
        msg: Message,
        *,
        mq: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer.

        Give `mq` to send to that queue, or `selector` (and its `arg`, such
        as a sharding key) to pick the queue; otherwise queues are chosen
        round robin, avoiding slow brokers when latency fault tolerance is
        on. Raises BrokerError subclasses for broker refusals, RemotingError
        when no broker answered in time, ClientError for bad input."""
        self._check_running()
        if self.accumulator is not None:
            retries = self.retry_times_when_send_failed
            fut = self.accumulator.offer(msg, mq, selector, arg, timeout, retries, None, False)
            if fut is not None:
                return await fut
        return await self._send_future(
            self._job(msg, mq, selector, arg), timeout, self.retry_times_when_send_failed
        )

    async def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        mq: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send messages of one topic in one request (SEND_BATCH_MESSAGE);
        they get consecutive offsets in one queue. `msg_id` of the result is
        the messages' unique ids joined by commas."""
        self._check_running()
        return await self._send_future(
            self._job(list(msgs), mq, selector, arg), timeout, self.retry_times_when_send_failed
        )

    def send_encoded_batch(
        self,
        topic: str,
        body: bytes,
        msg_ids: Sequence[str],
        *,
        mq: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future[SendResult]:
        """Send a batch body already encoded by rmqcore.encode_batch whose
        entries carry the UNIQ_KEY properties `msg_ids` (for callers that
        build bodies from columns without a Message per row, such as the
        Spark integration). Sent to `mq`, or the next queue round robin;
        retried as send_async is. A future of the SendResult."""
        self._check_running()
        rmqcore.validate_topic(topic)
        if not body:
            raise ClientError("the batch is empty")
        if len(body) > self.max_message_size:
            raise ClientError(
                f"the batch is {len(body)} bytes; max_message_size is {self.max_message_size}: "
                "split it into smaller batches"
            )
        job = SendJob(
            topic, body, "", 0, ",".join(msg_ids), 0, True, Message(topic, b""), mq, None, None
        )
        self._inflight += 1
        return self._send_future(job, timeout, self.retry_times_when_send_async_failed, None, True)

    def send_async(
        self,
        msg: Message | Sequence[Message],
        callback: SendCallback | None = None,
        *,
        mq: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> asyncio.Future[SendResult]:
        """Start sending and return at once: a future of the SendResult
        (await it), and/or `callback(result, error)` when it completes.
        A list of messages is sent as a batch. Retried up to
        retry_times_when_send_async_failed times."""
        self._check_running()
        if self.accumulator is not None and isinstance(msg, Message):
            retries = self.retry_times_when_send_async_failed
            fut = self.accumulator.offer(msg, mq, selector, arg, timeout, retries, callback, True)
            if fut is not None:
                return fut
        job = self._job(msg if isinstance(msg, Message) else list(msg), mq, selector, arg)
        self._inflight += 1
        return self._send_future(
            job, timeout, self.retry_times_when_send_async_failed, callback, True
        )

    def send_deflated_async(
        self, msg: Message, callback: SendCallback | None = None
    ) -> asyncio.Future[SendResult]:
        """send_async of a message whose body is a zlib stream already
        (compressed off the event loop, as the trace dispatcher's are on a
        rmqcore.DeflateWorker): sent as it is, with sysFlag COMPRESSED, so
        consumers get the body inflated."""
        self._check_running()
        job = self._job(msg, None, None, None, deflated=True)
        self._inflight += 1
        return self._send_future(job, None, self.retry_times_when_send_async_failed, callback, True)

    async def send_oneway(
        self,
        msg: Message,
        *,
        mq: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> None:
        """Send without waiting for an answer (no retry, no result)."""
        self._check_running()
        job = self._job(msg, mq, selector, arg)
        target = await self._pick_queue(msg.topic, mq, selector, arg, msg, None)
        addr = await self._broker_addr(target)
        cmd = self._command(job, target, int(time.time() * 1000))
        await self.client.remoting.invoke_oneway(addr, cmd)

    async def _pick_queue(
        self,
        topic: str,
        mq: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
        msg: Message,
        last_broker: str | None,
    ) -> MessageQueue:
        if mq is not None:
            if mq.topic != topic:
                raise ClientError(f"queue {mq} is not a queue of topic {topic!r}")
            return mq
        info = await self._publish_info(topic)
        if selector is not None:
            picked = selector(list(info.queues), msg, arg)
            if not isinstance(picked, MessageQueue):
                raise ClientError(f"the selector returned {picked!r}, not a MessageQueue")
            return picked
        return self.fault_strategy.select_one_message_queue(info, last_broker)

    async def _broker_addr(self, mq: MessageQueue) -> str:
        addr = await self.client.find_broker_addr_or_refresh(mq.broker_name, mq.topic)
        if addr is None:
            # a queue the caller named, of a topic with no route yet: TBW102's
            # route names the brokers that auto-create it (findBrokerAddressInPublish)
            await self._publish_info(mq.topic)
            addr = self.client.find_broker_addr(mq.broker_name)
        if addr is None:
            raise ClientError(f"the broker {mq.broker_name} of {mq} is not in the topic's route")
        if not self._heartbeat_sent:
            self._heartbeat_sent = True
            self.client.spawn(self.client.send_heartbeat_to_all_brokers(), "pyrmq:producer:hb")
        return addr

    def _send_future(
        self,
        job: SendJob,
        timeout: float | None,
        retries: int,
        callback: SendCallback | None = None,
        counted: bool = False,
        out: asyncio.Future[SendResult] | None = None,
    ) -> asyncio.Future[SendResult]:
        """A future of the send (`out`, when given). The first attempt runs on a response
        callback, with no coroutine, task or timer, when the route, the
        broker address and its connection are at hand (the pipelined hot
        path); anything else, and every retry, goes through _send. The
        callback, if any, runs as soon as the outcome is known; `counted`
        sends are in self._inflight until then."""
        timeout = self.send_msg_timeout if timeout is None else timeout
        mq, selector = job.mq, job.selector
        if out is None:
            out = (self._loop or asyncio.get_running_loop()).create_future()
        info = self.topic_publish_info_table.get(job.topic)
        conn = None
        addr: str | None = None
        if (
            mq is None
            and selector is None
            and info is not None
            and info.queues
            and self._heartbeat_sent
        ):
            turn = info.index
            target = self.fault_strategy.select_one_message_queue(info, None)
            addr = self.client.find_broker_addr(target.broker_name)
            if addr is not None:
                conn = self.client.remoting.open_connection(addr)
            if conn is None:
                # _send picks again: give the turn back, or this broker is
                # skipped for as long as it has no open connection
                info.index = turn
        if conn is None or addr is None:
            slow = asyncio.ensure_future(self._send(job, timeout, retries))
            slow.add_done_callback(functools.partial(self._settle_from, out, callback, counted))
            return out
        born = int(time.time() * 1000)
        attempt = FirstAttempt(
            self, job, out, callback, counted, retries, timeout, target, addr, born
        )
        try:
            if conn.rpc_hook is None:
                opaque = next_opaque()
                fields = self._fields(job, target, born)
                frame = self.client.api.send_frame(opaque, job.batch, fields, job.body)
                conn.request_frame(opaque, SEND_CODE[job.batch], frame, timeout, attempt)
            else:  # the hook signs the command
                conn.request_cb(self._command(job, target, born), timeout, attempt)
        except RemotingError as e:
            attempt(None, e)
        return out

    def _settle(
        self,
        out: asyncio.Future[SendResult],
        callback: SendCallback | None,
        counted: bool,
        result: SendResult | None,
        exc: BaseException | None,
    ) -> None:
        if counted:
            self._inflight -= 1
            if self._inflight == 0 and self._idle is not None:
                self._idle.set()
        if not out.done():
            if exc is not None:
                out.set_exception(exc)
                if callback is not None:
                    out.exception()  # the callback receives it
            else:
                out.set_result(result)  # type: ignore[arg-type]
        if callback is not None:
            try:
                callback(result, exc)
            except Exception:
                log.exception("send callback raised")

    def _settle_from(
        self,
        out: asyncio.Future[SendResult],
        callback: SendCallback | None,
        counted: bool,
        src: asyncio.Future[SendResult],
    ) -> None:
        if src.cancelled():
            self._settle(out, callback, counted, None, asyncio.CancelledError())
        elif src.exception() is not None:
            self._settle(out, callback, counted, None, src.exception())
        else:
            self._settle(out, callback, counted, src.result(), None)

    async def _send(
        self,
        job: SendJob,
        timeout: float | None,
        retries: int,
        avoid: str | None = None,
        born: int | None = None,
        first_error: BaseException | None = None,
    ) -> SendResult:
        """sendDefaultImpl: pick a queue, send, and on failure try again on
        another broker while attempts and the deadline last. A queue the
        caller chose (mq or selector) is not rotated away from. `avoid` is
        the broker a previous attempt failed on."""
        timeout = self.send_msg_timeout if timeout is None else timeout
        topic, uniq, msg, mq, selector, arg = (
            job.topic,
            job.uniq,
            job.msg,
            job.mq,
            job.selector,
            job.arg,
        )
        loop = asyncio.get_running_loop()
        begin = loop.time()
        deadline = begin + timeout
        attempts = 1 + retries
        last_broker: str | None = avoid
        last_error: BaseException | None = first_error
        made = 0 if first_error is None else 1  # the callback path's attempt
        busy_pauses = 0
        if born is None:
            born = int(time.time() * 1000)
        for attempt in range(attempts):
            left = deadline - loop.time()
            if left <= 0:
                break
            made += 1
            info = self.topic_publish_info_table.get(topic)
            if mq is None and selector is None and info is not None and info.queues:
                target = self.fault_strategy.select_one_message_queue(info, last_broker)
            else:
                # the deadline covers the route lookup (a name server call,
                # a new broker's heartbeat), not only the request
                try:
                    async with asyncio.timeout_at(deadline):
                        target = await self._pick_queue(topic, mq, selector, arg, msg, last_broker)
                except TimeoutError:
                    break
            if target.broker_name == last_broker and _is_busy(last_error):
                # the broker said it is overloaded: give it a moment before
                # asking it again (another broker is tried at once)
                pause = min(BUSY_BACKOFF * 2**busy_pauses, deadline - loop.time())
                busy_pauses += 1
                if pause > 0:
                    await asyncio.sleep(pause)
            last_broker = target.broker_name
            t0 = loop.time()
            try:
                async with asyncio.timeout_at(deadline):
                    addr = self.client.find_broker_addr(target.broker_name)
                    if addr is None or not self._heartbeat_sent:
                        addr = await self._broker_addr(target)
                    result = await self.client.api.send_message(
                        addr,
                        self._command(job, target, born),
                        target,
                        uniq,
                        max(deadline - loop.time(), 0.0),
                    )
            except (RemotingError, BrokerError, ClientError, TimeoutError) as e:
                if isinstance(e, TimeoutError):  # connecting or the heartbeat used it up
                    e = RemotingError(f"send to {target} timed out after {timeout:.3f}s")
                elapsed_ms = int((loop.time() - t0) * 1000)
                self.fault_strategy.update_fault_item(target.broker_name, elapsed_ms, True)
                last_error = e
                if isinstance(e, BrokerError) and not e.retriable:
                    raise
                if isinstance(e, ClientError) and mq is not None:
                    raise
                log.info(
                    "send to %s failed (attempt %d of %d): %s", target, attempt + 1, attempts, e
                )
                if route_suspect(e):
                    self._check_route_soon(topic)
                continue
            elapsed_ms = int((loop.time() - t0) * 1000)
            self.fault_strategy.update_fault_item(target.broker_name, elapsed_ms, False)
            if self.tracer is not None and not job.batch:
                self.tracer.append_pub(job.msg, result, addr, born, elapsed_ms)
            if (
                result.send_status is not SendStatus.SEND_OK
                and self.retry_another_broker_when_not_store_ok
                and attempt + 1 < attempts
            ):
                continue
            return result
        if last_error is None:
            raise RemotingError(f"sending to {topic} timed out after {timeout:.3f}s")
        last_error.add_note(f"send to {topic}: {made} attempt(s) failed")
        raise last_error
