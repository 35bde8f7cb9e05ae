"""Rebalance: which queues of its subscribed topics this consumer owns
(RebalanceImpl, RebalancePush, RebalanceLitePull).

Clustering: every consumer of the group asks a broker for the group's
member list and runs the same allocation strategy over the sorted queues and
members, so the members agree without talking to each other. Broadcasting:
every consumer owns every queue. Orderly consumers also hold a broker lock
on each queue they consume (LOCK_BATCH_MQ), renewed every 20 s.

The owner (a push or lite-pull consumer) is told about each queue it gains
(`on_queue_added`) and loses (`on_queue_removed`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Protocol

from pyrmq.client.instance import ClientInstance
from pyrmq.common.errors import RMQError
from pyrmq.common.message import MessageQueue
from pyrmq.common.subscription import SubscriptionData
from pyrmq.common.topics import RETRY_GROUP_TOPIC_PREFIX
from pyrmq.consumer.allocate import AllocateMessageQueueStrategy
from pyrmq.consumer.offset_store import OffsetStore, ReadOffsetType
from pyrmq.consumer.process_queue import ProcessQueue
from pyrmq.consumer.types import ConsumeFromWhere, MessageModel

log = logging.getLogger("pyrmq.consumer")


class RebalanceOwner(Protocol):
    async def on_queue_added(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Start consuming mq; False when it cannot start yet (no offset)."""

    async def on_queue_removed(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Stop consuming mq (pq is already marked dropped); commit its offset."""


class RebalanceImpl:
    def __init__(
        self,
        client: ClientInstance,
        consumer_group: str,
        message_model: MessageModel,
        allocate_strategy: AllocateMessageQueueStrategy,
        owner: RebalanceOwner,
        orderly: bool = False,
    ) -> None:
        self.client = client
        self.consumer_group = consumer_group
        self.message_model = message_model
        self.allocate_strategy = allocate_strategy
        self.owner = owner
        self.orderly = orderly
        self.subscription_inner: dict[str, SubscriptionData] = {}
        self.topic_subscribe_info_table: dict[str, set[MessageQueue]] = {}
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self._lock = asyncio.Lock()
        #: orderly: the last rebalance could not lock a queue it was given
        #: (its previous owner had not unlocked it yet); rebalance again soon
        #: instead of leaving the queue unconsumed for a rebalance interval
        #: (RocketMQ's rebalanceLater(500) when not allMQLocked)
        self.lock_failed = False
        #: member-list lookups made (a progress measure for tests and
        #: operators: rebalances that keep asking are not a stall)
        self.member_lookups = 0

    # -- rebalancing ------------------------------------------------------------------------

    async def do_rebalance(self) -> bool:
        """One rebalance of every subscribed topic; True when the assignment
        changed."""
        async with self._lock:
            changed = False
            self.lock_failed = False
            for topic in list(self.subscription_inner):
                try:
                    changed |= await self._rebalance_by_topic(topic)
                except RMQError as e:
                    log.warning("%s: rebalance of %s failed: %s", self.consumer_group, topic, e)
            # topics no longer subscribed
            for mq in [
                m for m in self.process_queue_table if m.topic not in self.subscription_inner
            ]:
                await self._remove(mq)
                changed = True
            return changed

    async def _rebalance_by_topic(self, topic: str) -> bool:
        mq_set = self.topic_subscribe_info_table.get(topic)
        if not mq_set:
            route = await self.client.update_topic_route(topic)
            if route is not None:
                self.topic_subscribe_info_table[topic] = set(route.subscribe_queues(topic))
            mq_set = self.topic_subscribe_info_table.get(topic)
        if not mq_set:
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warning("%s: no route for topic %s yet", self.consumer_group, topic)
            return False
        if self.message_model is MessageModel.BROADCASTING:
            wanted = set(mq_set)
        else:
            self.member_lookups += 1
            cids = await self.client.consumer_id_list(topic, self.consumer_group)
            if cids is None:
                log.warning(
                    "%s: no broker of %s answered the member list", self.consumer_group, topic
                )
                return False
            if self.client.client_id not in cids:
                # our heartbeat has not reached that broker yet
                log.info(
                    "%s: %s not yet in the group's member list %s",
                    self.consumer_group,
                    self.client.client_id,
                    cids,
                )
                return False
            wanted = set(
                self.allocate_strategy.allocate(
                    self.consumer_group, self.client.client_id, sorted(mq_set), sorted(cids)
                )
            )
        return await self._update_process_queue_table(topic, wanted)

    async def _update_process_queue_table(self, topic: str, wanted: set[MessageQueue]) -> bool:
        changed = False
        for mq in [m for m in self.process_queue_table if m.topic == topic]:
            pq = self.process_queue_table[mq]
            if mq not in wanted:
                await self._remove(mq)
                changed = True
            elif pq.is_pull_expired() and not self.orderly:
                log.warning(
                    "%s: %s idle for too long; restarting its pulls", self.consumer_group, mq
                )
                await self._remove(mq)
                changed = True
        for mq in sorted(wanted):
            if mq in self.process_queue_table:
                continue
            needs_lock = self.orderly and self.message_model is MessageModel.CLUSTERING
            if needs_lock and not await self.lock(mq):
                log.info("%s: %s is locked by another consumer", self.consumer_group, mq)
                self.lock_failed = True
                continue
            pq = ProcessQueue()
            if self.orderly and self.message_model is MessageModel.CLUSTERING:
                pq.locked = True
                pq.last_lock_timestamp = pq.clock()
            self.process_queue_table[mq] = pq
            if not await self.owner.on_queue_added(mq, pq):
                self.process_queue_table.pop(mq, None)
                pq.dropped = True
                continue
            changed = True
        return changed

    async def _remove(self, mq: MessageQueue) -> None:
        pq = self.process_queue_table.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        await self.owner.on_queue_removed(mq, pq)
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            await self.unlock([mq])

    async def remove_queues(self, mqs: Iterable[MessageQueue]) -> None:
        """Stop consuming these queues now (offsets committed); the next
        rebalance may assign them again."""
        async with self._lock:
            for mq in list(mqs):
                await self._remove(mq)

    def on_route_changed(self, topic: str, mqs: Iterable[MessageQueue]) -> None:
        self.topic_subscribe_info_table[topic] = set(mqs)

    # -- broker locks (orderly) ------------------------------------------------------------

    async def lock(self, mq: MessageQueue) -> bool:
        addr = await self.client.find_broker_addr_or_refresh(mq.broker_name, mq.topic)
        if addr is None:
            return False
        try:
            got = await self.client.api.lock_batch_mq(
                addr, self.consumer_group, self.client.client_id, [mq]
            )
        except RMQError as e:
            log.warning("%s: lock of %s failed: %s", self.consumer_group, mq, e)
            return False
        pq = self.process_queue_table.get(mq)
        if pq is not None:
            pq.locked = mq in got
            if pq.locked:
                pq.last_lock_timestamp = pq.clock()
        return mq in got

    async def lock_all(self) -> None:
        """Renew the locks of every owned queue, broker by broker."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in self.process_queue_table:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, mqs in by_broker.items():
            addr = self.client.find_broker_addr(broker)
            if addr is None:
                continue
            try:
                got = await self.client.api.lock_batch_mq(
                    addr, self.consumer_group, self.client.client_id, mqs
                )
            except RMQError as e:
                log.warning("%s: lock renewal at %s failed: %s", self.consumer_group, broker, e)
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is None:
                    continue
                if mq in got:
                    pq.locked = True
                    pq.last_lock_timestamp = pq.clock()
                else:
                    pq.locked = False

    async def unlock(self, mqs: Iterable[MessageQueue], oneway: bool = False) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, items in by_broker.items():
            addr = self.client.find_broker_addr(broker)
            if addr is None:
                continue
            try:
                await self.client.api.unlock_batch_mq(
                    addr, self.consumer_group, self.client.client_id, items, oneway=oneway
                )
            except RMQError as e:
                log.info("%s: unlock at %s failed: %s", self.consumer_group, broker, e)


async def compute_pull_from_where(
    client: ClientInstance,
    offset_store: OffsetStore,
    mq: MessageQueue,
    consume_from_where: ConsumeFromWhere,
    consume_timestamp: int | None,
) -> int:
    """Where a newly assigned queue starts (computePullFromWhere): the
    committed offset, else consume_from_where (retry topics from 0;
    CONSUME_FROM_TIMESTAMP at consume_timestamp ms, default 30 minutes ago);
    -1 when it cannot be known now (the queue is skipped until the next
    rebalance rather than started at a guess)."""
    off = await offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
    if off >= 0:
        return off
    if off == -2:
        return -1
    if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return 0
    # the master, or while it is away a slave (it has the same queues)
    addr = await client.find_broker_addr_or_refresh(mq.broker_name, mq.topic, only_master=False)
    if addr is None:
        return -1
    try:
        if consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return await client.api.get_min_offset(addr, mq)
        if consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            ts = consume_timestamp
            if ts is None:
                ts = int((time.time() - 1800) * 1000)
            return await client.api.search_offset(addr, mq, ts)
        return await client.api.get_max_offset(addr, mq)
    except RMQError as e:
        log.warning("start offset of %s unknown: %s", mq, e)
        return -1
