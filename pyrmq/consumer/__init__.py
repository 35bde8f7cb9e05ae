"""Consumers: PushConsumer (listener-driven), PullConsumer (lite pull: you
poll), allocation strategies, offset stores and the listener types."""

from pyrmq.common.subscription import MessageSelector, SubscriptionData
from pyrmq.consumer.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    CallableMachineRoomResolver,
    MachineRoomResolver,
    strategy_by_name,
)
from pyrmq.consumer.offset_store import LocalFileOffsetStore, RemoteBrokerOffsetStore
from pyrmq.consumer.process_queue import ProcessQueue
from pyrmq.consumer.pull_consumer import PullConsumer
from pyrmq.consumer.push_consumer import PushConsumer
from pyrmq.consumer.types import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageModel,
)

__all__ = [
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueStrategy",
    "CallableMachineRoomResolver",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "LocalFileOffsetStore",
    "MachineRoomResolver",
    "MessageModel",
    "MessageSelector",
    "ProcessQueue",
    "PullConsumer",
    "PushConsumer",
    "RemoteBrokerOffsetStore",
    "SubscriptionData",
    "strategy_by_name",
]
