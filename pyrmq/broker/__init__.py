"""The Broker: stores messages and serves producers and consumers."""

from pyrmq.broker.broker import Broker
from pyrmq.broker.config import BrokerConfig, load_broker_conf

__all__ = ["Broker", "BrokerConfig", "load_broker_conf"]
