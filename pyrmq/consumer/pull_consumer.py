"""PullConsumer: you poll for messages (DefaultLitePullConsumer).

    consumer = PullConsumer("my-group", namesrv_addr="127.0.0.1:9876")
    consumer.subscribe("TopicTest")          # or consumer.assign([...queues])
    await consumer.start()
    msgs = await consumer.poll(timeout=1.0)

Queues come from a rebalance of the group (subscribe) or from you (assign).
Each owned queue has a pull loop (long polling) that fills a buffer bounded
by pull_threshold_for_all / _for_queue / _size_for_queue; poll() returns one
pulled batch. A message returned by poll() counts as consumed: its offset is
committed every auto_commit_interval seconds (auto_commit) or when you call
commit(). seek(), seek_to_begin(), seek_to_end() and seek_to_timestamp()
move a queue's position; batches pulled before the seek are discarded."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pyrmq.client.api import PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND
from pyrmq.common.errors import ClientError, RMQError
from pyrmq.common.message import MessageExt, MessageQueue
from pyrmq.common.results import PullStatus
from pyrmq.common.route import TopicRouteData
from pyrmq.common.subscription import MessageSelector, SubscriptionData, subscription_of
from pyrmq.consumer.allocate import (
    AllocateMessageQueueStrategy,
)
from pyrmq.consumer.base import ConsumerBase
from pyrmq.consumer.offset_store import (
    ReadOffsetType,
)
from pyrmq.consumer.process_queue import ProcessQueue
from pyrmq.consumer.rebalance import RebalanceImpl, compute_pull_from_where
from pyrmq.consumer.types import ConsumeFromWhere, MessageModel
from pyrmq.remoting import RemotingCommand, RequestCode
from pyrmq.remoting.tls import resolve_client_tls

log = logging.getLogger("pyrmq.consumer")

BROKER_SUSPEND_MAX_TIME_MILLIS = 20000
CONSUMER_TIMEOUT_WHEN_SUSPEND = 30.0
PULL_TIME_DELAY_WHEN_EXCEPTION = 1.0
PULL_TIME_DELAY_WHEN_FLOW_CONTROL = 0.05


@dataclass(slots=True)
class _QueueState:
    pq: ProcessQueue
    pull_offset: int
    consume_offset: int
    generation: int = 0
    paused: bool = False
    task: asyncio.Task[None] | None = None
    #: batches poll() met while the queue was paused, for resume()
    held: list[_Batch] = field(default_factory=list)


@dataclass(slots=True)
class _Batch:
    mq: MessageQueue
    state: _QueueState
    generation: int
    msgs: list[MessageExt]


class PullConsumer(ConsumerBase):
    """A consumer you poll (lite pull). With subscribe() the group's queues
    are shared among its members like a PushConsumer's; with assign() you
    choose them. Offsets live in the broker (clustering) or a local file
    (broadcasting)."""

    consume_type = "CONSUME_ACTIVELY"

    def __init__(
        self,
        consumer_group: str,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
        allocate_message_queue_strategy: AllocateMessageQueueStrategy | str | None = None,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        pull_batch_size: int = 32,
        pull_threshold_for_all: int = 10000,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100 * 1024 * 1024,
        poll_timeout: float = 5.0,
        rebalance_interval: float = 20.0,
        offset_store_path: str | None = None,
        instance_name: str | None = None,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        tls: bool | ssl.SSLContext = False,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
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
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.pull_threshold_for_all = pull_threshold_for_all
        self.poll_timeout = poll_timeout
        self._assigned: list[MessageQueue] | None = None
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._buffer: asyncio.Queue[_Batch] | None = None
        self._buffered = 0
        self.rebalance: RebalanceImpl | None = None

    # -- configuration --------------------------------------------------------------------------

    def subscribe(self, topic: str, sub_expression: str | MessageSelector = "*") -> None:
        """Take part in the group's rebalance of topic (not with assign()),
        for the messages a tag expression or a MessageSelector selects."""
        if self._assigned is not None:
            raise ClientError("this consumer uses assign(); subscribe() and assign() do not mix")
        self._subscriptions[topic] = subscription_of(topic, sub_expression, int(time.time() * 1000))
        if self._state == "RUNNING" and self.rebalance is not None:
            self.rebalance.subscription_inner[topic] = self._subscriptions[topic]
            self.client.spawn(self._subscription_changed(), "pyrmq:litepull:subscribe")

    async def _subscription_changed(self) -> None:
        await self.client.send_heartbeat_to_all_brokers()
        self._rebalance_now.set()

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (no group rebalance)."""
        if self._subscriptions:
            raise ClientError("this consumer uses subscribe(); subscribe() and assign() do not mix")
        self._assigned = sorted(set(mqs))
        if self._state == "RUNNING":
            self._rebalance_now.set()

    def assignment(self) -> set[MessageQueue]:
        return set(self._queues)

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state == "RUNNING":
            return
        if self._state != "CREATED":
            raise ClientError(f"the consumer is {self._state.lower()}; create a new one")
        self._buffer = asyncio.Queue()
        await self.offset_store.load()
        self.client.members.append(self)
        self.client.consumer_data = self._consumer_data
        self.client.request_handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = self._on_notify
        await self.client.start()
        self._state = "RUNNING"
        if self._assigned is None:
            self.rebalance = RebalanceImpl(
                self.client,
                self.consumer_group,
                self.message_model,
                self.allocate_message_queue_strategy,
                self,
            )
            self.rebalance.subscription_inner = dict(self._subscriptions)
            for topic in self._subscriptions:
                with contextlib.suppress(RMQError):
                    await self.client.update_topic_route(topic)
        await self.client.send_heartbeat_to_all_brokers()
        self._tasks = [asyncio.create_task(self._rebalance_loop(), name="pyrmq:litepull:rebalance")]
        if self.auto_commit:
            self._tasks.append(
                asyncio.create_task(self._auto_commit_loop(), name="pyrmq:litepull:commit")
            )
        self._rebalance_now.set()
        await asyncio.sleep(0)

    async def shutdown(self) -> None:
        """Stop pulling, commit (auto_commit) and leave the group."""
        if self._state != "RUNNING":
            self._state = "SHUTDOWN"
            return
        self._state = "STOPPING"
        await self._cancel_tasks()
        for mq in list(self._queues):
            await self._stop_queue(mq)
        if self.auto_commit:
            await self.commit()
        try:
            await self._leave_group()
        finally:
            self._queues.clear()
            self._state = "SHUTDOWN"

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _check_running(self) -> None:
        if self._state != "RUNNING":
            raise ClientError(f"the consumer is {self._state.lower()}: call `await start()` first")

    # -- ClientMember ----------------------------------------------------------------------------

    def topics_of_interest(self) -> list[str]:
        topics = set(self._subscriptions)
        topics.update(mq.topic for mq in self._assigned or ())
        return sorted(topics)

    def on_route_changed(self, topic: str, route: TopicRouteData | None) -> None:
        if self.rebalance is None or topic not in self._subscriptions:
            return
        mqs = set(route.subscribe_queues(topic)) if route is not None else set()
        if self.rebalance.topic_subscribe_info_table.get(topic) != mqs:
            self.rebalance.on_route_changed(topic, mqs)
            self._rebalance_now.set()

    def _on_notify(self, cmd: RemotingCommand) -> None:
        self._rebalance_now.set()

    # -- assignment --------------------------------------------------------------------------------

    async def _rebalance_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.rebalance_interval):
                    await self._rebalance_now.wait()
            self._rebalance_now.clear()
            try:
                # assign() after start() (fetch_message_queues needs a running
                # consumer) wins over the empty rebalance start() set up
                if self._assigned is not None:
                    await self._apply_assignment(self._assigned)
                elif self.rebalance is not None:
                    await self.rebalance.do_rebalance()
            except Exception:
                log.exception("%s: rebalance failed", self.consumer_group)

    async def _apply_assignment(self, mqs: list[MessageQueue]) -> None:
        wanted = set(mqs)
        for mq in [m for m in self._queues if m not in wanted]:
            await self._stop_queue(mq, commit=True)
        for mq in mqs:
            if mq not in self._queues:
                await self.on_queue_added(mq, ProcessQueue())

    async def on_queue_added(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        offset = await compute_pull_from_where(
            self.client, self.offset_store, mq, self.consume_from_where, self.consume_timestamp
        )
        if offset < 0:
            return False
        self.offset_store.update_offset(mq, offset, False)
        state = _QueueState(pq, offset, offset)
        self._queues[mq] = state
        self._start_pull(mq, state)
        return True

    async def on_queue_removed(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        await self._stop_queue(mq, commit=True)

    async def _stop_queue(self, mq: MessageQueue, commit: bool = False) -> None:
        state = self._queues.pop(mq, None)
        if state is None:
            return
        state.pq.dropped = True
        state.generation += 1
        if state.task is not None:
            state.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await state.task
        if commit:
            with contextlib.suppress(RMQError):
                await self.offset_store.persist(mq)
        self.offset_store.remove_offset(mq)
        self._buffered -= state.pq.msg_count
        state.pq.clear()

    def _start_pull(self, mq: MessageQueue, state: _QueueState) -> None:
        state.task = asyncio.create_task(
            self._pull_loop(mq, state, state.generation), name=f"pyrmq:litepull:pull {mq}"
        )

    # -- pulling -----------------------------------------------------------------------

    def _subscription_for(self, topic: str) -> SubscriptionData:
        sub = self._subscriptions.get(topic)
        return sub if sub is not None else SubscriptionData.parse(topic, "*")

    async def _pull_loop(self, mq: MessageQueue, state: _QueueState, generation: int) -> None:
        pq = state.pq
        assert self._buffer is not None
        while not pq.dropped and state.generation == generation:
            if (
                state.paused
                or self._buffered > self.pull_threshold_for_all
                or pq.msg_count > self.pull_threshold_for_queue
                or pq.msg_size > self.pull_threshold_size_for_queue
            ):
                await asyncio.sleep(PULL_TIME_DELAY_WHEN_FLOW_CONTROL)
                continue
            sub = self._subscription_for(mq.topic)
            try:
                addr = await self.client.pull_addr_or_refresh(mq)
                if addr is None:
                    raise ClientError(f"broker {mq.broker_name} is not in the route")
                api = self.client.api
                cmd = api.pull_command(
                    mq,
                    consumer_group=self.consumer_group,
                    queue_offset=state.pull_offset,
                    max_msg_nums=self.pull_batch_size,
                    sys_flag=PULL_FLAG_SUSPEND | PULL_FLAG_SUBSCRIPTION,
                    commit_offset=0,
                    suspend_timeout_ms=BROKER_SUSPEND_MAX_TIME_MILLIS,
                    subscription=sub.sub_string,
                    sub_version=sub.sub_version,
                    expression_type=sub.expression_type,
                )
                result = await api.pull_message(
                    addr, cmd, timeout=CONSUMER_TIMEOUT_WHEN_SUSPEND, broker_name=mq.broker_name
                )
            except RMQError as e:
                log.warning("%s: pull of %s failed: %s", self.consumer_group, mq, e)
                await asyncio.sleep(PULL_TIME_DELAY_WHEN_EXCEPTION)
                continue
            if pq.dropped or state.generation != generation:
                return
            pq.last_pull_timestamp = pq.clock()
            self.client.suggest_pull_node(mq, result.suggest_which_broker_id)
            state.pull_offset = result.next_begin_offset
            if result.pull_status is PullStatus.FOUND:
                msgs = result.msg_found_list
                if not sub.matches_all:
                    msgs = [m for m in msgs if sub.accepts(m.properties)]
                if msgs:
                    pq.put_message(msgs)
                    self._buffered += len(msgs)
                    self._buffer.put_nowait(_Batch(mq, state, generation, msgs))
                elif not pq.has_temp_message():
                    state.consume_offset = max(state.consume_offset, state.pull_offset)
            elif result.pull_status is PullStatus.OFFSET_ILLEGAL:
                log.warning(
                    "%s: offset of %s is illegal; moving to %d",
                    self.consumer_group,
                    mq,
                    result.next_begin_offset,
                )
                state.consume_offset = result.next_begin_offset
            elif not pq.has_temp_message():
                state.consume_offset = max(state.consume_offset, state.pull_offset)

    # -- the user's side ---------------------------------------------------------------------------

    async def poll(self, timeout: float | None = None) -> list[MessageExt]:
        """The next pulled batch (up to pull_batch_size messages of one
        queue), or [] when none arrives within timeout seconds (default
        poll_timeout). Returned messages count as consumed."""
        self._check_running()
        assert self._buffer is not None
        timeout = self.poll_timeout if timeout is None else timeout
        deadline = asyncio.get_running_loop().time() + max(0.0, timeout)
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                if left <= 0:
                    batch = self._buffer.get_nowait()
                else:
                    async with asyncio.timeout(left):
                        batch = await self._buffer.get()
            except (TimeoutError, asyncio.QueueEmpty):
                return []
            state = batch.state
            if state.pq.dropped or state.generation != batch.generation:
                continue  # pulled before a seek or a rebalance: stale
            if state.paused:
                # pulled before pause() or by a pull already held at the broker
                state.held.append(batch)
                continue
            self._buffered -= len(batch.msgs)
            offset = state.pq.remove_message(batch.msgs)
            if offset >= 0:
                state.consume_offset = offset
            return batch.msgs

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Commit offsets (default: after every message poll() returned) to
        the broker or the local offset file, and wait for it."""
        if self._state not in ("RUNNING", "STOPPING"):
            raise ClientError(f"the consumer is {self._state.lower()}: nothing to commit")
        if offsets is None:
            offsets = {mq: st.consume_offset for mq, st in self._queues.items()}
        for mq, off in offsets.items():
            self.offset_store.update_offset(mq, off, False)
        await self.offset_store.persist_all(list(offsets))

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval)
            try:
                await self.commit()
            except Exception:
                log.exception("%s: auto commit failed", self.consumer_group)

    async def committed(self, mq: MessageQueue) -> int:
        """The offset stored for mq (-1 when none)."""
        self._check_running()
        return await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)

    def position(self, mq: MessageQueue) -> int:
        """The offset after the last message poll() returned from mq."""
        state = self._queues.get(mq)
        if state is None:
            raise ClientError(f"{mq} is not assigned to this consumer")
        return state.consume_offset

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Continue mq from offset (between its min and max offset)."""
        self._check_running()
        state = self._queues.get(mq)
        if state is None:
            raise ClientError(
                f"{mq} is not assigned to this consumer (assigned: "
                f"{sorted(map(str, self._queues)) or 'none yet'})"
            )
        addr = await self._addr(mq)
        lo = await self.client.api.get_min_offset(addr, mq)
        hi = await self.client.api.get_max_offset(addr, mq)
        if not lo <= offset <= hi:
            raise ClientError(f"offset {offset} of {mq} is outside [{lo}, {hi}]")
        state.generation += 1
        if state.task is not None:
            state.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await state.task
        self._buffered -= state.pq.msg_count
        state.pq.clear()
        state.pull_offset = state.consume_offset = offset
        self.offset_store.update_offset(mq, offset, False)
        self._start_pull(mq, state)

    async def _addr(self, mq: MessageQueue) -> str:
        addr = await self.client.find_broker_addr_or_refresh(mq.broker_name, mq.topic)
        if addr is None:
            raise ClientError(f"broker {mq.broker_name} of {mq} is not in the route")
        return addr

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        await self.seek(mq, await self.client.api.get_min_offset(await self._addr(mq), mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        await self.seek(mq, await self.client.api.get_max_offset(await self._addr(mq), mq))

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        self._check_running()
        return await self.client.api.search_offset(await self._addr(mq), mq, timestamp_ms)

    async def seek_to_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> None:
        await self.seek(mq, await self.offset_for_timestamp(mq, timestamp_ms))

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues (for assign())."""
        self._check_running()
        route = await self.client.update_topic_route(topic)
        if route is None:
            raise ClientError(f"No route info of this topic: {topic}")
        return sorted(route.subscribe_queues(topic))

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        """Stop pulling these queues; poll() returns none of their messages
        (not even ones pulled already) until resume()."""
        for mq in mqs:
            if mq in self._queues:
                self._queues[mq].paused = True

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        held: list[_Batch] = []
        for mq in mqs:
            state = self._queues.get(mq)
            if state is not None:
                state.paused = False
                held += state.held
                state.held.clear()
        if held and self._buffer is not None:
            # the held batches are older than any of their queue's still buffered
            rest = []
            while not self._buffer.empty():
                rest.append(self._buffer.get_nowait())
            for batch in (*held, *rest):
                self._buffer.put_nowait(batch)
