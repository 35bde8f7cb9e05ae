"""Consumer settings and listener types: MessageModel, ConsumeFromWhere,
and the consume statuses and contexts."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pyrmq.common.message import MessageQueue


class MessageModel(enum.Enum):
    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeType(enum.Enum):
    CONSUME_ACTIVELY = 0  # pull
    CONSUME_PASSIVELY = 1  # push


class ConsumeFromWhere(enum.Enum):
    """Where a group with no committed offset starts on a queue."""

    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = 0
    RECONSUME_LATER = 1


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = 0
    SUSPEND_CURRENT_QUEUE_A_MOMENT = 1


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """Given to a concurrent listener. Set `ack_index` to the index of the
    last message consumed when returning CONSUME_SUCCESS for part of a batch
    (the rest is retried), and `delay_level_when_next_consume` to choose the
    retry delay level (0: the broker's 3 + reconsume times; -1: straight to
    the dead-letter queue)."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = 2**31 - 1


@dataclass(slots=True)
class ConsumeOrderlyContext:
    """Given to an orderly listener. `suspend_current_queue_time_millis`
    sets how long SUSPEND_CURRENT_QUEUE_A_MOMENT waits (-1: the consumer's
    setting)."""

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1
