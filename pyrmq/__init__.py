"""pyrmq: a RocketMQ-compatible message queue for Python.

The asyncio client:

    from pyrmq import Producer, PushConsumer, PullConsumer, Message

and its blocking twin, with the same methods: `from pyrmq.sync import
Producer, PushConsumer, PullConsumer`.

Names are imported on first use (PEP 562), so `import pyrmq.<module>` (the
C core imports pyrmq.common.errors) does not load the whole client."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "pyrmq.common.errors": ("BrokerError", "ClientError", "RemotingError", "RMQError"),
    "pyrmq.common.message": ("Message", "MessageExt", "MessageQueue"),
    "pyrmq.common.results": (
        "LocalTransactionState",
        "PullResult",
        "PullStatus",
        "SendResult",
        "SendStatus",
        "TransactionSendResult",
    ),
    "pyrmq.consumer": (
        "AllocateMachineRoomNearby",
        "AllocateMessageQueueAveragely",
        "AllocateMessageQueueAveragelyByCircle",
        "AllocateMessageQueueByConfig",
        "AllocateMessageQueueByMachineRoom",
        "AllocateMessageQueueConsistentHash",
        "AllocateMessageQueueStrategy",
        "ConsumeConcurrentlyContext",
        "ConsumeConcurrentlyStatus",
        "ConsumeFromWhere",
        "ConsumeOrderlyContext",
        "ConsumeOrderlyStatus",
        "MessageModel",
        "MessageSelector",
        "PullConsumer",
        "PushConsumer",
    ),
    "pyrmq.producer": (
        "Producer",
        "SelectMessageQueueByHash",
        "SelectMessageQueueByRandom",
        "TransactionListener",
        "TransactionProducer",
    ),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}
__all__ = [
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueStrategy",
    "BrokerError",
    "ClientError",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "RMQError",
    "RemotingError",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "SendResult",
    "SendStatus",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
]


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'pyrmq' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from pyrmq.common.errors import BrokerError, ClientError, RemotingError, RMQError
    from pyrmq.common.message import Message, MessageExt, MessageQueue
    from pyrmq.common.results import (
        LocalTransactionState,
        PullResult,
        PullStatus,
        SendResult,
        SendStatus,
        TransactionSendResult,
    )
    from pyrmq.consumer import (
        AllocateMachineRoomNearby,
        AllocateMessageQueueAveragely,
        AllocateMessageQueueAveragelyByCircle,
        AllocateMessageQueueByConfig,
        AllocateMessageQueueByMachineRoom,
        AllocateMessageQueueConsistentHash,
        AllocateMessageQueueStrategy,
        ConsumeConcurrentlyContext,
        ConsumeConcurrentlyStatus,
        ConsumeFromWhere,
        ConsumeOrderlyContext,
        ConsumeOrderlyStatus,
        MessageModel,
        PullConsumer,
        PushConsumer,
    )
    from pyrmq.producer import (
        Producer,
        SelectMessageQueueByHash,
        SelectMessageQueueByRandom,
        TransactionListener,
        TransactionProducer,
    )
