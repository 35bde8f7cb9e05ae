"""PushConsumer (DefaultMQPushConsumer + DefaultMQPushConsumerImpl):
messages are pulled for you, with long polling, and handed to a listener.

    consumer = PushConsumer("my-group", namesrv_addr="127.0.0.1:9876")
    consumer.subscribe("TopicTest", "TagA || TagB")
    consumer.register_message_listener(lambda msgs, ctx: print(msgs))
    await consumer.start()

One pull loop per assigned queue (PullMessageService): 32 messages per pull,
held by the broker up to 15 s when there is nothing new, paused while the
queue's ProcessQueue holds more than pull_threshold_for_queue messages or
pull_threshold_size_for_queue bytes, or spans more than
consume_concurrently_max_span offsets. Offsets are committed to the broker
(clustering) or a local file (broadcasting) every 5 s and at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import ssl
import time
from collections.abc import Iterable, Sequence

from pyrmq.client.api import PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND
from pyrmq.common.errors import ClientError, RemotingError, RMQError
from pyrmq.common.message import MessageExt, MessageQueue, decode_messages
from pyrmq.common.results import PullResult, PullStatus
from pyrmq.common.route import TopicRouteData
from pyrmq.common.subscription import MessageSelector, SubscriptionData, subscription_of
from pyrmq.consumer.allocate import (
    AllocateMessageQueueStrategy,
)
from pyrmq.consumer.base import ConsumerBase
from pyrmq.consumer.consume_service import (
    ConsumeMessageConcurrentlyService,
    ConsumeMessageOrderlyService,
    Listener,
)
from pyrmq.consumer.process_queue import ProcessQueue
from pyrmq.consumer.rebalance import RebalanceImpl, compute_pull_from_where
from pyrmq.consumer.types import ConsumeFromWhere, MessageModel
from pyrmq.producer.trace import TraceDispatcher
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode
from pyrmq.remoting.connection import Connection
from pyrmq.remoting.tls import resolve_client_tls

log = logging.getLogger("pyrmq.consumer")

#: how long the broker may hold a pull (brokerSuspendMaxTimeMillis)
BROKER_SUSPEND_MAX_TIME_MILLIS = 15000
#: client-side timeout of a held pull (consumerTimeoutMillisWhenSuspend)
CONSUMER_TIMEOUT_WHEN_SUSPEND = 30.0
#: pause after a failed pull (pullTimeDelayMillsWhenException)
PULL_TIME_DELAY_WHEN_EXCEPTION = 3.0
#: pause while a queue is over a flow-control threshold
PULL_TIME_DELAY_WHEN_FLOW_CONTROL = 0.05
#: orderly: lock renewal period
LOCK_RENEW_INTERVAL = 20.0
#: orderly: next rebalance after one that could not lock a queue it was
#: given (RocketMQ's rebalanceLater(500))
REBALANCE_LATER_DELAY = 0.5


def retry_topic_of(group: str) -> str:
    return f"%RETRY%{group}"


class _QueuePuller:
    """The pull loop of one queue, as its read callbacks see it: the queue,
    its ProcessQueue, and the pull already sent from the last answer's
    read callback (PushConsumer._pull_ahead) for the loop to await next."""

    __slots__ = ("ahead", "mq", "pq")

    def __init__(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        self.mq = mq
        self.pq = pq
        self.ahead: asyncio.Future[PullResult] | None = None

    def take_ahead(self) -> asyncio.Future[PullResult] | None:
        ahead, self.ahead = self.ahead, None
        return ahead

    def cancel_ahead(self) -> None:
        """The loop ended: a pull sent ahead is no longer awaited (its
        answer, when it comes, is dropped by _pulled)."""
        ahead = self.take_ahead()
        if ahead is not None:
            ahead.cancel()


class PushConsumer(ConsumerBase):
    """A consumer group member that receives messages through a listener.

    Parameters keep RocketMQ's names in snake_case (times in seconds unless
    the name says millis). `allocate_message_queue_strategy` is a strategy
    object or a name ("AVG", "AllocateMessageQueueConsistentHash", ...).
    `consume_timestamp` (ms since the epoch) is where CONSUME_FROM_TIMESTAMP
    starts (default: 30 minutes ago)."""

    consume_type = "CONSUME_PASSIVELY"

    def __init__(
        self,
        consumer_group: str,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
        allocate_message_queue_strategy: AllocateMessageQueueStrategy | str | None = None,
        consume_thread_max: int = 20,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100 * 1024 * 1024,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        suspend_current_queue_time_millis: int = 1000,
        pull_interval: float = 0.0,
        persist_consumer_offset_interval: float = 5.0,
        rebalance_interval: float = 20.0,
        await_termination_seconds: float = 30.0,
        offset_store_path: str | None = None,
        instance_name: str | None = None,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        enable_msg_trace: bool = False,
        custom_trace_topic: str | None = None,
        tls: bool | ssl.SSLContext = False,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        if not 1 <= consume_message_batch_max_size <= 1024:
            raise ValueError("consume_message_batch_max_size must be 1..1024")
        if consume_thread_max < 1:
            raise ValueError("consume_thread_max must be >= 1")
        super().__init__(
            consumer_group,
            namesrv_addr,
            message_model=message_model,
            consume_from_where=consume_from_where,
            consume_timestamp=consume_timestamp,
            allocate_message_queue_strategy=allocate_message_queue_strategy,
            pull_batch_size=pull_batch_size,
            pull_threshold_for_queue=pull_threshold_for_queue,
            pull_threshold_size_for_queue=pull_threshold_size_for_queue,
            rebalance_interval=rebalance_interval,
            offset_store_path=offset_store_path,
            instance_name=instance_name,
            poll_name_server_interval=poll_name_server_interval,
            heartbeat_broker_interval=heartbeat_broker_interval,
            ssl_context=resolve_client_tls(tls, tls_ca, tls_cert, tls_key),
            access_key=access_key,
            secret_key=secret_key,
        )
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        self.pull_interval = pull_interval
        self.persist_consumer_offset_interval = persist_consumer_offset_interval
        self.await_termination_seconds = await_termination_seconds
        self.retry_topic = retry_topic_of(consumer_group)
        self._listener: Listener | None = None
        self.orderly = False
        self.consume_service: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService
        self.rebalance: RebalanceImpl
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self.paused = False
        #: enable_msg_trace: SubBefore/SubAfter records of every listener call
        self.enable_msg_trace = enable_msg_trace
        self.custom_trace_topic = custom_trace_topic
        self.tracer: TraceDispatcher | None = None

    # -- configuration ---------------------------------------------------------------------

    @property
    def max_reconsume_times_concurrently(self) -> int:
        return 16 if self.max_reconsume_times == -1 else self.max_reconsume_times

    @property
    def max_reconsume_times_orderly(self) -> int:
        return 2**31 - 1 if self.max_reconsume_times == -1 else self.max_reconsume_times

    def subscribe(self, topic: str, sub_expression: str | MessageSelector = "*") -> None:
        """Receive topic's messages whose tag matches sub_expression ("*" or
        "TagA || TagB"), or that a MessageSelector selects
        (``MessageSelector.by_sql("a > 5")``: the broker needs
        enablePropertyFilter=true). May be called again while running.
        SubscriptionParseFailedError for an expression that does not parse."""
        sub = subscription_of(topic, sub_expression, int(time.time() * 1000))
        self._subscriptions[topic] = sub
        if self._state == "RUNNING":
            self.rebalance.subscription_inner[topic] = sub
            self.client.spawn(self._subscription_changed(), "pyrmq:consumer:subscribe")

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        if self._state == "RUNNING":
            self.rebalance.subscription_inner.pop(topic, None)
            self._rebalance_now.set()

    def register_message_listener(self, listener: Listener, *, orderly: bool = False) -> None:
        """listener(msgs: list[MessageExt], context) -> status. Concurrent
        listeners return ConsumeConcurrentlyStatus (CONSUME_SUCCESS or
        RECONSUME_LATER); orderly ones ConsumeOrderlyStatus (SUCCESS or
        SUSPEND_CURRENT_QUEUE_A_MOMENT). None means success; an exception
        means try again. A coroutine function is awaited on the loop; a
        plain function runs in a pool of consume_thread_max threads."""
        if self._state != "CREATED":
            raise ClientError("register the listener before start()")
        if not callable(listener):
            raise TypeError("the listener must be callable: listener(msgs, context)")
        self._listener = listener
        self.orderly = orderly

    def register_message_listener_orderly(self, listener: Listener) -> None:
        self.register_message_listener(listener, orderly=True)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state == "RUNNING":
            return
        if self._state != "CREATED":
            raise ClientError(f"the consumer is {self._state.lower()}; create a new one")
        if self._listener is None:
            raise ClientError("register a message listener before start()")
        if not self._subscriptions:
            raise ClientError("subscribe to at least one topic before start()")
        subs = dict(self._subscriptions)
        if self.message_model is MessageModel.CLUSTERING:
            subs[self.retry_topic] = SubscriptionData.parse(
                self.retry_topic, "*", int(time.time() * 1000)
            )
        self.rebalance = RebalanceImpl(
            self.client,
            self.consumer_group,
            self.message_model,
            self.allocate_message_queue_strategy,
            self,
            self.orderly,
        )
        self.rebalance.subscription_inner = subs
        if self.orderly:
            self.consume_service = ConsumeMessageOrderlyService(self, self._listener)
        else:
            self.consume_service = ConsumeMessageConcurrentlyService(self, self._listener)
        await self.offset_store.load()
        self.client.members.append(self)
        self.client.consumer_data = self._consumer_data
        self.client.request_handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = self._on_notify
        self.client.request_handlers[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] = self._on_reset
        self.client.request_handlers[RequestCode.GET_CONSUMER_RUNNING_INFO] = self._on_running_info
        self.client.request_handlers[RequestCode.CONSUME_MESSAGE_DIRECTLY] = (
            self._on_consume_directly
        )
        await self.client.start()
        if self.enable_msg_trace:
            self.tracer = TraceDispatcher(self.client, self.consumer_group, self.custom_trace_topic)
            await self.tracer.start()
        self._state = "RUNNING"
        for topic in list(subs):
            try:
                await self.client.update_topic_route(topic)
            except RMQError as e:
                log.warning("%s: route of %s: %s", self.consumer_group, topic, e)
        await self.client.send_heartbeat_to_all_brokers()
        self._tasks = [
            asyncio.create_task(self._rebalance_loop(), name="pyrmq:consumer:rebalance"),
            asyncio.create_task(self._persist_loop(), name="pyrmq:consumer:offsets"),
        ]
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            self._tasks.append(asyncio.create_task(self._lock_loop(), name="pyrmq:consumer:locks"))
        self._rebalance_now.set()

    async def shutdown(self) -> None:
        """Stop pulling, let messages already pulled be consumed (up to
        await_termination_seconds), commit offsets, leave the group."""
        if self._state != "RUNNING":
            self._state = "SHUTDOWN"
            return
        self._state = "STOPPING"
        await self._cancel_tasks()
        pulls = list(self._pull_tasks.values())
        self._pull_tasks.clear()
        for t in pulls:
            t.cancel()
        for t in pulls:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        drained = await self.consume_service.shutdown(self.await_termination_seconds)
        if not drained:
            log.warning(
                "%s: listeners still running after %.0fs; their messages will be redelivered",
                self.consumer_group,
                self.await_termination_seconds,
            )
        await self._persist_offsets()
        if self.tracer is not None:
            await self.tracer.shutdown()
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            await self.rebalance.unlock(list(self.rebalance.process_queue_table))
        for pq in self.rebalance.process_queue_table.values():
            pq.dropped = True
        try:
            await self._leave_group()
        finally:
            self._state = "SHUTDOWN"

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def suspend(self) -> None:
        """Pause pulling (messages already pulled are still consumed)."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    # -- ClientMember ---------------------------------------------------------------------

    def topics_of_interest(self) -> list[str]:
        return list(self.rebalance.subscription_inner) if self._state == "RUNNING" else []

    def on_route_changed(self, topic: str, route: TopicRouteData | None) -> None:
        if self._state != "RUNNING" or topic not in self.rebalance.subscription_inner:
            return
        mqs = route.subscribe_queues(topic) if route is not None else []
        old = self.rebalance.topic_subscribe_info_table.get(topic)
        self.rebalance.on_route_changed(topic, mqs)
        if old != set(mqs):
            self._rebalance_now.set()

    def _heartbeat_subscriptions(self) -> Iterable[SubscriptionData]:
        return self.rebalance.subscription_inner.values()

    async def _subscription_changed(self) -> None:
        for topic in list(self.rebalance.subscription_inner):
            if topic not in self.rebalance.topic_subscribe_info_table:
                with contextlib.suppress(RMQError):
                    await self.client.update_topic_route(topic)
        await self.client.send_heartbeat_to_all_brokers()
        self._rebalance_now.set()

    # -- broker requests ---------------------------------------------------------------------

    def _on_notify(self, cmd: RemotingCommand) -> None:
        if cmd.ext_fields.get("consumerGroup") in (None, self.consumer_group):
            self._rebalance_now.set()
        return None

    def _on_reset(self, cmd: RemotingCommand) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: offsets in body's offsetTable (a
        list, or Java's map form keyed by queue JSON)."""
        try:
            data = json.loads(cmd.body)
            table = data.get("offsetTable") or []
            items = []
            if isinstance(table, dict):
                for k, off in table.items():
                    q = json.loads(k) if isinstance(k, str) else k
                    items.append((q, off))
            else:
                items = [(q, q.get("offset")) for q in table]
            offsets = {
                MessageQueue(str(q["topic"]), str(q["brokerName"]), int(q["queueId"])): int(off)
                for q, off in items
            }
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("%s: malformed offset reset from the broker: %r", self.consumer_group, e)
            return None
        self.client.spawn(self.reset_offsets(offsets), "pyrmq:consumer:reset")
        return None

    def _on_running_info(self, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.ext_fields.get("consumerGroup") != self.consumer_group:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, remark="The Consumer Group not exist in this consumer"
            )
        info = {
            "properties": {
                "PROP_CONSUMEORDERLY": str(self.orderly).lower(),
                "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
                "PROP_CLIENT_VERSION": "pyrmq",
                "PROP_THREADPOOL_CORE_SIZE": str(self.consume_thread_max),
            },
            "subscriptionSet": [s.as_json() for s in self.rebalance.subscription_inner.values()],
            "mqTable": {
                str(mq): {
                    "cachedMsgCount": pq.msg_count,
                    "cachedMsgSizeInMiB": pq.msg_size >> 20,
                    "locked": pq.locked,
                    "commitOffset": self.offset_store.memory_offset(mq),
                }
                for mq, pq in self.rebalance.process_queue_table.items()
            },
        }
        return cmd.response(ResponseCode.SUCCESS, body=json.dumps(info).encode())

    def _on_consume_directly(self, cmd: RemotingCommand) -> object:
        """CONSUME_MESSAGE_DIRECTLY (309), forwarded by a broker for an admin
        tool: the body is one stored message; the listener consumes it and
        the answer is ConsumeMessageDirectlyResult."""
        if cmd.ext_fields.get("consumerGroup") not in (None, self.consumer_group):
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, remark="The Consumer Group not exist in this consumer"
            )
        try:
            (msg,) = decode_messages(cmd.body, cmd.ext_fields.get("brokerName", ""))
        except (ValueError, RMQError) as e:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, remark=f"not one message in the request body: {e}"
            )

        async def consume() -> RemotingCommand:
            result = await self.consume_service.consume_directly(
                msg, cmd.ext_fields.get("brokerName", "")
            )
            return cmd.response(ResponseCode.SUCCESS, body=json.dumps(result).encode())

        return consume()

    async def reset_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        """Move the group's offsets (the broker's resetOffsetByTime): stop the
        affected queues, store the new offsets, then reassign them."""
        await self.rebalance.remove_queues(offsets)
        for mq, off in offsets.items():
            self.offset_store.update_offset(mq, off, False)
        await self.offset_store.persist_all(list(offsets))
        self._rebalance_now.set()

    # -- periodic jobs -----------------------------------------------------------------------

    async def _rebalance_loop(self) -> None:
        wait = self.rebalance_interval
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._rebalance_now.wait()
            self._rebalance_now.clear()
            try:
                await self.rebalance.do_rebalance()
            except Exception:
                log.exception("%s: rebalance failed", self.consumer_group)
            wait = self.rebalance_interval
            if self.rebalance.lock_failed:
                wait = min(wait, REBALANCE_LATER_DELAY)

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self.persist_consumer_offset_interval)
            try:
                await self._persist_offsets()
            except Exception:
                log.exception("%s: offset commit failed", self.consumer_group)

    async def _persist_offsets(self) -> None:
        await self.offset_store.persist_all(list(self.rebalance.process_queue_table))

    async def _lock_loop(self) -> None:
        while True:
            await asyncio.sleep(LOCK_RENEW_INTERVAL)
            try:
                await self.rebalance.lock_all()
            except Exception:
                log.exception("%s: lock renewal failed", self.consumer_group)

    # -- RebalanceOwner ----------------------------------------------------------------------

    async def on_queue_added(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        offset = await compute_pull_from_where(
            self.client, self.offset_store, mq, self.consume_from_where, self.consume_timestamp
        )
        if offset < 0:
            return False
        self.offset_store.update_offset(mq, offset, False)
        task = asyncio.create_task(
            self._pull_loop(mq, pq, offset), name=f"pyrmq:consumer:pull {mq}"
        )
        self._pull_tasks[mq] = task
        log.info("%s: consuming %s from offset %d", self.consumer_group, mq, offset)
        return True

    async def on_queue_removed(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if isinstance(self.consume_service, ConsumeMessageOrderlyService):
            # an idle worker waits up to 1 s for messages before it looks at
            # pq.dropped: wake it, or each removed queue holds the rebalance
            # (and the queue's broker lock) for that second
            pq.arrived.set()
            await self.consume_service.stop_queue(mq)
        try:
            # one-way, as Java's RemoteBrokerOffsetStore: a broker that stopped
            # answering would otherwise hold the rebalance (and the hand-over
            # of every other queue) for a request timeout per queue
            await self.offset_store.persist(mq, oneway=True)
        except RMQError as e:
            log.warning("%s: offset of %s not committed: %s", self.consumer_group, mq, e)
        self.offset_store.remove_offset(mq)
        log.info("%s: stopped consuming %s", self.consumer_group, mq)

    # -- pulling ---------------------------------------------------------------------------

    def _pull_delay(self, mq: MessageQueue, pq: ProcessQueue) -> float:
        """How long the pull loop of mq must wait before its next pull: 0
        when nothing holds it back (the consumer paused, a flow-control
        threshold passed, an orderly queue not locked, no subscription)."""
        if self.paused:
            return 1.0
        if (
            pq.msg_count > self.pull_threshold_for_queue
            or pq.msg_size > self.pull_threshold_size_for_queue
            or (not self.orderly and pq.max_span > self.consume_concurrently_max_span)
        ):
            return PULL_TIME_DELAY_WHEN_FLOW_CONTROL
        if self.orderly and self.message_model is MessageModel.CLUSTERING and not pq.locked:
            return PULL_TIME_DELAY_WHEN_FLOW_CONTROL * 2
        if mq.topic not in self.rebalance.subscription_inner:
            return PULL_TIME_DELAY_WHEN_EXCEPTION
        return 0.0

    def _send_pull(
        self, conn: Connection, addr: str, puller: _QueuePuller, offset: int
    ) -> asyncio.Future[PullResult]:
        """Send mq's pull from offset on conn; the future of its PullResult
        (the messages it found are handed over by _pulled before that)."""
        mq = puller.mq
        sub = self.rebalance.subscription_inner.get(mq.topic)
        if sub is None:  # unsubscribed while the loop waited for the connection
            raise ClientError(f"{mq.topic} is no longer subscribed")
        sys_flag = PULL_FLAG_SUSPEND | PULL_FLAG_SUBSCRIPTION
        commit_offset = 0
        if self.message_model is MessageModel.CLUSTERING:
            mem = self.offset_store.memory_offset(mq)
            if mem > 0:
                commit_offset = mem
                sys_flag |= PULL_FLAG_COMMIT_OFFSET
        pulled: asyncio.Future[PullResult] = asyncio.get_running_loop().create_future()
        conn.request_cb(
            self.client.api.pull_command(
                mq,
                consumer_group=self.consumer_group,
                queue_offset=offset,
                max_msg_nums=self.pull_batch_size,
                sys_flag=sys_flag,
                commit_offset=commit_offset,
                suspend_timeout_ms=BROKER_SUSPEND_MAX_TIME_MILLIS,
                subscription=sub.sub_string,
                sub_version=sub.sub_version,
                expression_type=sub.expression_type,
            ),
            CONSUMER_TIMEOUT_WHEN_SUSPEND,
            functools.partial(self._pulled, pulled, addr, puller, sub),
        )
        return pulled

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        puller = _QueuePuller(mq, pq)
        try:
            await self._pull_queue(puller, next_offset)
        finally:
            puller.cancel_ahead()

    async def _pull_queue(self, puller: _QueuePuller, next_offset: int) -> None:
        mq, pq = puller.mq, puller.pq
        while not pq.dropped:
            pulled = puller.take_ahead()
            if pulled is None:
                delay = self._pull_delay(mq, pq)
                if delay:
                    await asyncio.sleep(delay)
                    continue
            try:
                if pulled is None:
                    pulled = await self._pull_from_loop(puller, next_offset)
                result = await pulled
            except RMQError as e:
                if pq.dropped:
                    return
                log.warning("%s: pull of %s failed: %s", self.consumer_group, mq, e)
                await asyncio.sleep(PULL_TIME_DELAY_WHEN_EXCEPTION)
                continue
            pq.last_pull_timestamp = pq.clock()
            if pq.dropped:
                return
            self.client.suggest_pull_node(mq, result.suggest_which_broker_id)
            status = result.pull_status
            prev = next_offset
            next_offset = result.next_begin_offset
            if status is PullStatus.FOUND:
                # _pulled handed the messages to the listener already
                if (
                    not result.msg_found_list
                    and not pq.has_temp_message()
                    and not pq.consuming_msg_orderly_tree
                ):
                    self.offset_store.update_offset(mq, next_offset, True)
            elif status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
                if not pq.has_temp_message() and not pq.consuming_msg_orderly_tree:
                    self.offset_store.update_offset(mq, next_offset, True)
            else:  # OFFSET_ILLEGAL
                log.warning(
                    "%s: offset %d of %s is illegal; moving to %d",
                    self.consumer_group,
                    prev,
                    mq,
                    next_offset,
                )
                self.offset_store.update_offset(mq, next_offset, False)
            if self.pull_interval:
                await asyncio.sleep(self.pull_interval)

    async def _pull_from_loop(
        self, puller: _QueuePuller, offset: int
    ) -> asyncio.Future[PullResult]:
        """A pull the loop sends itself (none was sent ahead): to the
        queue's broker, its route asked for when it is not known."""
        mq = puller.mq
        addr = self.client.pull_addr(mq)
        if addr is None:
            addr = await self.client.pull_addr_or_refresh(mq)
            if addr is None:
                raise ClientError(f"broker {mq.broker_name} is not in the route")
        conn = await self.client.remoting.connection(addr)
        return self._send_pull(conn, addr, puller, offset)

    def _pulled(
        self,
        pulled: asyncio.Future[PullResult],
        addr: str,
        puller: _QueuePuller,
        sub: SubscriptionData,
        resp: RemotingCommand | None,
        exc: BaseException | None,
    ) -> None:
        """A pull's answer, in the read callback that received it: the
        messages found go to the ProcessQueue and to the listener here, so
        the listener's task runs ahead of the pull loop that resumes then
        (resuming the loop first to hand them over cost a loop turn more
        of the produce-to-consume latency: bench/README.md, "Produce to
        consume"); a concurrent listener starts right here (an eager task:
        pyrmq.common.aio.start_eager). Then, if nothing holds the queue
        back, the next pull leaves from here too (_pull_ahead). The loop
        gets the result (msg_found_list: what passed the subscription's
        filter) or the error."""
        if pulled.done():  # the pull loop was cancelled
            return
        if exc is not None or resp is None:
            pulled.set_exception(exc or RemotingError(f"pull from {addr}: no answer"))
            return
        result: PullResult | None = None
        mq, pq = puller.mq, puller.pq
        try:
            result = self.client.api.pull_result(resp, addr, mq.broker_name)
            if result.pull_status is PullStatus.FOUND and not pq.dropped:
                msgs = result.msg_found_list
                if not sub.matches_all:
                    msgs = result.msg_found_list = [m for m in msgs if sub.accepts(m.properties)]
                if msgs:
                    pq.put_message(msgs)
                    self.consume_service.submit_consume_request(msgs, pq, mq)
            self._pull_ahead(puller, result)
        except Exception as e:  # the loop re-raises it, as when it decoded the answer itself
            if not pulled.done():
                pulled.set_exception(e)
        finally:
            # not done yet unless that failed, or a listener run here stopped
            # the consumer; also when such a listener raised KeyboardInterrupt
            # (its messages are in the ProcessQueue: the loop must go on)
            if result is not None and not pulled.done():
                pulled.set_result(result)

    def _pull_ahead(self, puller: _QueuePuller, result: PullResult) -> None:
        """Send the queue's next pull from the read callback that got the
        last answer when the pull loop would send it at once (nothing holds
        the queue back, its connection is open); the loop awaits it next
        (RocketMQ's PullCallback.onSuccess calling
        executePullRequestImmediately). On a connection that also produces,
        a send the same read lets go (its ack ends the auto-batcher's wait)
        follows the pull in one write, and the broker holds the pull before
        it serves the send: the send wakes it and both answers leave in one
        write. Sent by the loop a turn later, the pull came after that send,
        and the message waited for the pull's own round trip
        (bench/README.md, "A message sent close behind another")."""
        if (
            puller.pq.dropped
            or self.pull_interval
            or result.pull_status is PullStatus.OFFSET_ILLEGAL
            or self._pull_delay(puller.mq, puller.pq)
        ):
            return
        self.client.suggest_pull_node(puller.mq, result.suggest_which_broker_id)
        addr = self.client.pull_addr(puller.mq)
        conn = None if addr is None else self.client.remoting.open_connection(addr)
        if addr is None or conn is None:
            return
        with contextlib.suppress(RMQError):  # the loop sends it again, and says why it failed
            puller.ahead = self._send_pull(conn, addr, puller, result.next_begin_offset)

    # -- retries ------------------------------------------------------------------------------

    async def send_message_back(self, msg: MessageExt, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK to the broker that stored msg: into
        %RETRY%<group> (or the dead-letter queue); False when it failed."""
        addr = self.client.find_broker_addr(msg.broker_name) if msg.broker_name else None
        if addr is None:
            addr = msg.store_host
        try:
            await self.client.api.consumer_send_message_back(
                addr, msg, self.consumer_group, delay_level, self.max_reconsume_times_concurrently
            )
            return True
        except RMQError as e:
            log.warning(
                "%s: send-back of %s failed (%s); redelivering it locally",
                self.consumer_group,
                msg.msg_id,
                e,
            )
            return False
