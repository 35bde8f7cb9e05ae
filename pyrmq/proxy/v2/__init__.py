"""The .proto of RocketMQ 5's gRPC protocol (messaging.proto), compiled at
import by pyrmq.proxy.protocol."""
