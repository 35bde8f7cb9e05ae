"""The producer: Producer, queue selectors and latency fault tolerance."""

from pyrmq.producer.fault import LatencyFaultTolerance, MQFaultStrategy
from pyrmq.producer.producer import Producer, SendCallback
from pyrmq.producer.selector import (
    MessageQueueSelector,
    SelectMessageQueueByHash,
    SelectMessageQueueByRandom,
)
from pyrmq.producer.transaction import TransactionListener, TransactionProducer

__all__ = [
    "LatencyFaultTolerance",
    "MQFaultStrategy",
    "MessageQueueSelector",
    "Producer",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "SendCallback",
    "TransactionListener",
    "TransactionProducer",
]
