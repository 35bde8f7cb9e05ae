"""What every consumer has (DefaultMQPushConsumer and DefaultLitePullConsumer
share it): the group, its message model and start position, the allocation
strategy, pull thresholds, the ClientInstance and the offset store."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterable, Sequence
from typing import Any

from pyrmq.client.instance import ClientInstance
from pyrmq.common.message import local_ip
from pyrmq.common.subscription import SubscriptionData
from pyrmq.consumer.allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueStrategy,
    strategy_by_name,
)
from pyrmq.consumer.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    RemoteBrokerOffsetStore,
)
from pyrmq.consumer.types import ConsumeFromWhere, MessageModel


class ConsumerBase:
    """Settings and collaborators shared by PushConsumer and PullConsumer;
    `consume_type` is what the heartbeat says (CONSUME_PASSIVELY for push,
    CONSUME_ACTIVELY for pull)."""

    consume_type = ""

    def __init__(
        self,
        consumer_group: str,
        namesrv_addr: str | Sequence[str] | None,
        *,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        consume_timestamp: int | None,
        allocate_message_queue_strategy: AllocateMessageQueueStrategy | str | None,
        pull_batch_size: int,
        pull_threshold_for_queue: int,
        pull_threshold_size_for_queue: int,
        rebalance_interval: float,
        offset_store_path: str | None,
        instance_name: str | None,
        poll_name_server_interval: float,
        heartbeat_broker_interval: float,
        ssl_context: ssl.SSLContext | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        if not consumer_group or len(consumer_group) > 255:
            raise ValueError("consumer_group must be 1..255 characters")
        if not 1 <= pull_batch_size <= 1024:
            raise ValueError("pull_batch_size must be 1..1024")
        self.consumer_group = consumer_group
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp
        self.allocate_message_queue_strategy = resolve_strategy(allocate_message_queue_strategy)
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.rebalance_interval = rebalance_interval
        self.client = ClientInstance(
            namesrv_addr,
            instance_name=instance_name,
            poll_name_server_interval=poll_name_server_interval,
            heartbeat_broker_interval=heartbeat_broker_interval,
            ssl_context=ssl_context,
            access_key=access_key,
            secret_key=secret_key,
        )
        self.offset_store: OffsetStore = offset_store_for(
            message_model, self.client, consumer_group, offset_store_path, instance_name
        )
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_now = asyncio.Event()
        self._state = "CREATED"

    @property
    def client_id(self) -> str:
        return self.client.client_id

    async def _cancel_tasks(self) -> None:
        """Stop the periodic jobs (rebalance, offsets, locks)."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def _leave_group(self) -> None:
        """UNREGISTER_CLIENT at every broker, then close the client."""
        try:
            await self.client.unregister(consumer_group=self.consumer_group)
        finally:
            await self.client.shutdown()

    def _heartbeat_subscriptions(self) -> Iterable[SubscriptionData]:
        return self._subscriptions.values()

    def _consumer_data(self) -> list[dict[str, Any]]:
        """The HeartbeatData consumerDataSet entry (none unless running)."""
        if self._state not in ("RUNNING", "STOPPING"):
            return []
        return [
            {
                "groupName": self.consumer_group,
                "consumeType": self.consume_type,
                "messageModel": self.message_model.name,
                "consumeFromWhere": self.consume_from_where.name,
                "subscriptionDataSet": [s.as_json() for s in self._heartbeat_subscriptions()],
                "unitMode": False,
            }
        ]


def resolve_strategy(
    strategy: AllocateMessageQueueStrategy | str | None,
) -> AllocateMessageQueueStrategy:
    """A consumer's allocate_message_queue_strategy argument: an object, a
    name ("AVG", "AllocateMessageQueueConsistentHash", ...) or None (AVG)."""
    if strategy is None:
        return AllocateMessageQueueAveragely()
    if isinstance(strategy, str):
        return strategy_by_name(strategy)
    return strategy


def offset_store_for(
    message_model: MessageModel,
    client: ClientInstance,
    group: str,
    path: str | None,
    instance_name: str | None,
) -> OffsetStore:
    """Broker offsets for clustering, a local file for broadcasting."""
    if message_model is MessageModel.BROADCASTING:
        path = path or LocalFileOffsetStore.default_path(
            local_ip(), instance_name or "DEFAULT", group
        )
        return LocalFileOffsetStore(path, group)
    return RemoteBrokerOffsetStore(client, group)
