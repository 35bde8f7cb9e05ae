"""RocketMQ 5's proxy: the gRPC endpoint (apache.rocketmq.v2.MessagingService)
of the official 5.x SDKs (rocketmq-python-client, rocketmq-client-nodejs,
Java, Go...), in local mode: inside the broker process, its requests handed
to the broker's own processors (channel.py), so a message sent over gRPC is
the same stored message a 4.x client sends, and the other way round.

Switched on by ``enableProxy=true`` in broker.conf (or ``--enable-proxy``),
on ``grpcServerPort`` (8081). Served: QueryRoute, Heartbeat, Telemetry
(settings, transaction recovery), SendMessage, EndTransaction,
NotifyClientTermination, and over the broker's PopService
(pyrmq/broker/pop) QueryAssignment, ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, and for pull
consumers PullMessage, UpdateOffset, GetOffset, QueryOffset (offsets.py).
RecallMessage answers NOT_IMPLEMENTED.

Files: protocol.py (the .proto compiled at import), convert.py (a 5.x
message as the stored 4.x message and back), channel.py (in-process
requests), clients.py (the clients and their Telemetry), service.py (the
producing RPCs), consumer.py and offsets.py (the consuming ones), server.py (the gRPC
server and its request parsing)."""

from pyrmq.proxy.config import DEFAULT_GRPC_PORT, ProxyConfig

__all__ = ["DEFAULT_GRPC_PORT", "ProxyConfig"]
