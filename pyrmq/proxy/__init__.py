"""RocketMQ 5's proxy: the gRPC endpoint (apache.rocketmq.v2.MessagingService)
of the official 5.x SDKs (rocketmq-python-client, rocketmq-client-nodejs,
Java, Go...). Every RPC becomes the remoting request a 4.x client would send
to a broker, so a message sent over gRPC is the same stored message a 4.x
client sends, and the other way round. Two modes, as RocketMQ 5 has
(backend.py):

- local: inside the broker process (``enableProxy=true`` in broker.conf or
  ``--enable-proxy``), its requests handed to the broker's processors
  in-process (local.py, channel.py);
- cluster: ``pyrmq proxy -n <name servers>``, a process of its own in front
  of every broker of a cluster, over remoting connections (cluster.py).

On ``grpcServerPort`` (8081). Served: QueryRoute, Heartbeat, Telemetry
(settings, transaction recovery, running info), SendMessage,
EndTransaction, NotifyClientTermination; over the brokers' POP requests
(pyrmq/broker/processor/pop.py) QueryAssignment, ReceiveMessage,
AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue; and
for pull consumers PullMessage, UpdateOffset, GetOffset, QueryOffset
(offsets.py). RecallMessage answers NOT_IMPLEMENTED.

Files: protocol.py (the .proto compiled at import), convert.py (a 5.x
message as the stored 4.x message and back), backend.py (what the service
needs of the brokers), local.py and cluster.py (the two modes), channel.py
(in-process requests), clients.py (the clients and their Telemetry),
service.py (the producing RPCs), consumer.py and offsets.py (the consuming
ones), server.py (the gRPC server and its request parsing), config.py
(settings and rmq-proxy.json)."""

from pyrmq.proxy.config import DEFAULT_GRPC_PORT, ProxyConfig

__all__ = ["DEFAULT_GRPC_PORT", "ProxyConfig"]
