"""POP consumption (RocketMQ 5): checkpoints, receipt handles, revive."""

from pyrmq.broker.pop.receipt import InvalidReceiptHandle
from pyrmq.broker.pop.service import REVIVE_GROUP, Popped, PopService, revive_topic

__all__ = ["REVIVE_GROUP", "InvalidReceiptHandle", "PopService", "Popped", "revive_topic"]
