"""pyrmq: a RocketMQ-compatible message queue for Python."""

__version__ = "0.1.0"
