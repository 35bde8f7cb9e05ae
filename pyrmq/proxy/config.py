"""The proxy's settings, by RocketMQ 5's names (rmq-proxy.json's keys; in
local mode they sit in broker.conf beside the broker's own)."""

from __future__ import annotations

from dataclasses import dataclass

#: RocketMQ 5 proxy's gRPC port (grpcServerPort)
DEFAULT_GRPC_PORT = 8081


@dataclass(slots=True)
class ProxyConfig:
    #: grpcServerPort; 0: any free port (tests)
    grpc_server_port: int = DEFAULT_GRPC_PORT
    #: where the gRPC port listens (the broker's listen host in local mode)
    listen_host: str = "0.0.0.0"
    #: maxMessageSize: a body over it is MESSAGE_BODY_TOO_LARGE
    max_message_size: int = 4 * 1024 * 1024
    #: maxDelayTimeMills: a delivery_timestamp further ahead is
    #: ILLEGAL_DELIVERY_TIME (RocketMQ's timerMaxDelaySec, 3 days)
    max_delay_ms: int = 3 * 24 * 3600 * 1000
    #: enableTopicMessageTypeCheck: a message whose type the topic's
    #: message.type does not take is refused
    topic_message_type_check: bool = True
    #: how long an RPC waits for the broker (seconds)
    request_timeout: float = 3.0
    #: a client not heard from (heartbeat, telemetry, any RPC) for this
    #: long is dropped from the producer and consumer tables (seconds)
    client_idle: float = 120.0
    #: pyrmq: clients known at once; a new one past it is TOO_MANY_REQUESTS
    #: (a flood of made-up client ids costs no more than this)
    max_clients: int = 10_000
