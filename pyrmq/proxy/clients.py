"""The gRPC clients the proxy knows (RocketMQ 5 proxy's GrpcChannelManager
and GrpcClientSettingsManager): each by its ``x-mq-client-id``, with the
Settings it reported, its Telemetry stream and its channel to the brokers
(backend.py).

Each client is registered with the brokers of its topics by the HEART_BEAT
a 4.x client would send on that channel, at its Settings and at each of its
Heartbeats: a producer under each topic it publishes (5.x producers have no
group; the topic stands for one, as in RocketMQ 5), so the transaction
check-back reaches it (the broker's CHECK_TRANSACTION_STATE arrives on the
channel and leaves on the client's Telemetry stream as a
RecoverOrphanedTransactionCommand); a consumer under its group, so mqadmin
consumerConnection and consumerStatus see 5.x consumers too."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from pyrmq.client.api import MQClientAPI
from pyrmq.common.errors import RemotingError
from pyrmq.proxy import running_info
from pyrmq.proxy.backend import Backend, ChannelInvoker, TopicView
from pyrmq.proxy.channel import ChannelClosed
from pyrmq.proxy.config import ProxyConfig
from pyrmq.proxy.convert import check_command
from pyrmq.proxy.errors import ProxyError
from pyrmq.proxy.protocol import OK, pb, set_duration_ms, status
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger("pyrmq.proxy")

#: the producer's send retry policy handed out in Settings (RocketMQ 5
#: proxy's default: 3 attempts, 10 ms doubling up to 1 s)
SEND_MAX_ATTEMPTS = 3
#: a client's Telemetry queue holds at most this many commands not yet
#: written (a client that never reads its stream costs no more)
TELEMETRY_QUEUE = 1024

_LANGUAGE = {
    pb.JAVA: "JAVA",
    pb.CPP: "CPP",
    pb.DOT_NET: "DOTNET",
    pb.GOLANG: "GO",
    pb.RUST: "RUST",
    pb.PYTHON: "PYTHON",
    pb.NODE_JS: "NODE_JS",
}


class GrpcClient:
    """One 5.x client: its channel to the brokers and its Telemetry."""

    def __init__(
        self,
        backend: Backend,
        config: ProxyConfig,
        client_id: str,
        peer: str,
        relay: Callable[[GrpcClient, Any, str], bool] | None = None,
    ) -> None:
        self.client_id = client_id
        #: hands a transaction check this client cannot take (its Telemetry
        #: stream is gone) to another producer of the topic
        self._relay = relay
        self.channel = backend.channel(client_id, peer)
        self.channel.on_request = self._broker_request
        self.channel.on_call = self._broker_call
        #: the broker requests of a 4.x client, on this client's channel
        self.api = MQClientAPI(ChannelInvoker(self.channel))
        self.settings: Any = None
        #: requests to the client awaiting its Telemetry answer, by nonce
        self._asked: dict[str, asyncio.Future[Any]] = {}
        self.last_seen = time.monotonic()
        self._telemetry: asyncio.Queue[Any] | None = None
        self._backend = backend
        self._config = config

    @property
    def language(self) -> str:
        s = self.settings
        return _LANGUAGE.get(s.user_agent.language, "OTHER") if s is not None else "OTHER"

    async def heartbeat(self) -> None:
        self.last_seen = time.monotonic()
        await self._register()

    async def _topics(self) -> list[TopicView]:
        """The topics the client publishes or subscribes to, as the
        brokers route them (those that exist)."""
        s = self.settings
        if s is None:
            return []
        names = (
            [t.name for t in s.publishing.topics]
            if s.client_type == pb.PRODUCER
            else [e.topic.name for e in s.subscription.subscriptions]
        )
        views = []
        for name in dict.fromkeys(names):
            try:
                views.append(await self._backend.topic(name))
            except ProxyError:
                continue
        return views

    async def _register(self) -> None:
        """HEART_BEAT to every master broker of the client's topics."""
        s = self.settings
        if s is None:
            return
        views = await self._topics()
        data: dict[str, Any] = {"clientID": self.client_id}
        if s.client_type == pb.PRODUCER:
            data["producerDataSet"] = [{"groupName": v.name} for v in views]
        elif s.client_type in (pb.SIMPLE_CONSUMER, pb.PUSH_CONSUMER) and s.subscription.group.name:
            data["consumerDataSet"] = [running_info.heartbeat_data(s)]
        else:
            return
        addrs = {q.addr for v in views for q in v.queues}
        body = json.dumps(data).encode()
        for addr in sorted(addrs):
            cmd = RemotingCommand(RequestCode.HEART_BEAT, {}, body, language=self.language)
            try:
                resp = await self.channel.call_broker(addr, cmd, self._config.request_timeout)
            except (TimeoutError, ChannelClosed, RemotingError) as e:
                log.info("proxy: heartbeat of client %s to %s: %s", self.client_id, addr, e)
                continue
            if resp.code != ResponseCode.SUCCESS:
                log.info(
                    "proxy: broker %s refused the heartbeat of client %s: %s",
                    addr,
                    self.client_id,
                    resp.remark,
                )

    # -- Telemetry --------------------------------------------------------------

    def open_telemetry(self) -> asyncio.Queue[Any]:
        """A new stream replaces the one before (a client reconnecting)."""
        self._telemetry = asyncio.Queue(TELEMETRY_QUEUE)
        return self._telemetry

    def close_telemetry(self, queue: asyncio.Queue[Any]) -> None:
        if self._telemetry is queue:
            self._telemetry = None

    def send_telemetry(self, cmd: Any) -> bool:
        q = self._telemetry
        if q is None:
            return False
        try:
            q.put_nowait(cmd)
        except asyncio.QueueFull:
            log.warning("proxy: client %s reads its telemetry no more; dropped", self.client_id)
            return False
        return True

    def publishes(self, topic: str) -> bool:
        s = self.settings
        return (
            s is not None
            and s.client_type == pb.PRODUCER
            and any(t.name == topic for t in s.publishing.topics)
        )

    def _broker_request(self, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            try:
                command = check_command(cmd)
            except (ValueError, KeyError) as e:
                log.warning("proxy: a transaction check that cannot be read: %s", e)
                return
            if self.send_telemetry(command):
                return
            topic = command.recover_orphaned_transaction_command.message.topic.name
            # its client is gone (a producer that died leaves its channel
            # until it is idle): another producer of the topic answers, as
            # the broker would ask another producer of the group
            if self._relay is None or not self._relay(self, command, topic):
                log.info(
                    "proxy: transaction check for client %s not sent: no telemetry stream, "
                    "and no other producer of %s has one",
                    self.client_id,
                    topic,
                )
        else:
            log.debug("proxy: request code %d not passed to 5.x client", cmd.code)

    # -- what the broker asks the client ----------------------------------------

    async def _broker_call(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY, asked of
        a 5.x client over its Telemetry stream (running_info.py)."""
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return await running_info.running_info(self, cmd, timeout)
        if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            return await running_info.consume_directly(self, cmd, timeout)
        raise RemotingError(f"request code {cmd.code} is not passed to 5.x clients")

    async def ask(self, command: Any, nonce: str, timeout: float) -> Any:
        """Send a Telemetry command; the client's answer of that nonce.
        RemotingError when it has no stream, TimeoutError when it does not
        answer."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._asked[nonce] = fut
        try:
            if not self.send_telemetry(command):
                raise RemotingError(f"5.x client {self.client_id} has no telemetry stream")
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._asked.pop(nonce, None)

    def answered(self, nonce: str, answer: Any) -> None:
        fut = self._asked.get(nonce)
        if fut is not None and not fut.done():
            fut.set_result(answer)

    def close(self) -> None:
        """The brokers forget the client with its channel."""
        self.channel.close()


class ClientRegistry:
    def __init__(self, backend: Backend, config: ProxyConfig) -> None:
        self.backend = backend
        self.config = config
        self.clients: dict[str, GrpcClient] = {}

    def of(self, context: Any) -> GrpcClient:
        """The client a call comes from (created at its first call)."""
        client_id = ""
        for key, value in context.invocation_metadata() or ():
            if key == "x-mq-client-id":
                client_id = value
                break
        if not client_id:
            raise ProxyError(pb.Code.CLIENT_ID_REQUIRED, "metadata x-mq-client-id is required")
        c = self.clients.get(client_id)
        if c is None or not c.channel.is_open:
            if len(self.clients) >= self.config.max_clients and not self.sweep():
                raise ProxyError(
                    pb.Code.TOO_MANY_REQUESTS,
                    f"the proxy serves {self.config.max_clients} clients at most (maxClients)",
                )
            c = self.clients[client_id] = GrpcClient(
                self.backend, self.config, client_id, peer_of(context), self._relay_check
            )
        c.last_seen = time.monotonic()
        return c

    def _relay_check(self, source: GrpcClient, command: Any, topic: str) -> bool:
        """A transaction check to another producer of topic with a
        Telemetry stream; whether one took it."""
        others = [c for c in self.clients.values() if c is not source and c.publishes(topic)]
        random.shuffle(others)
        return any(c.send_telemetry(command) for c in others)

    def terminated(self, context: Any) -> None:
        try:
            c = self.of(context)
        except ProxyError:
            return
        self.clients.pop(c.client_id, None)
        c.close()

    def sweep(self) -> int:
        """Drop clients idle for config.client_idle; how many went."""
        cut = time.monotonic() - self.config.client_idle
        gone = [c for c in self.clients.values() if c.last_seen < cut]
        for c in gone:
            log.info("proxy: client %s idle, dropped", c.client_id)
            del self.clients[c.client_id]
            c.close()
        return len(gone)

    def close_all(self) -> None:
        for c in self.clients.values():
            c.close()
        self.clients.clear()

    async def settings_answer(self, client: GrpcClient, settings: Any) -> Any:
        """The Settings the proxy answers a client's Settings with: the
        client's own, with the server's policies filled in."""
        client.settings = settings
        await client.heartbeat()
        out = pb.Settings()
        out.CopyFrom(settings)
        if settings.client_type == pb.PRODUCER:
            policy = out.backoff_policy
            policy.max_attempts = SEND_MAX_ATTEMPTS
            set_duration_ms(policy.exponential_backoff.initial, 10)
            set_duration_ms(policy.exponential_backoff.max, 1000)
            policy.exponential_backoff.multiplier = 2.0
            out.publishing.max_body_size = self.config.max_message_size
            out.publishing.validate_message_type = self.config.topic_message_type_check
        elif settings.client_type in (pb.SIMPLE_CONSUMER, pb.PUSH_CONSUMER):
            await self._consumer_settings(out)
        out.metric.on = False
        return pb.TelemetryCommand(status=status(OK), settings=out)

    async def _consumer_settings(self, out: Any) -> None:
        """A consumer's: its group's retry policy (retryMaxTimes + 1
        attempts, a second doubling up to a minute between them), whether it
        is a FIFO group (consumeMessageOrderly), and RocketMQ 5's receive
        batch and long polling defaults."""
        sub = out.subscription
        sgc = None
        if sub.group.name:
            first = sub.subscriptions[0].topic.name if sub.subscriptions else ""
            try:
                view = await self.backend.topic(first) if first else None
                sgc = await self.backend.group(sub.group.name, view)
            except ProxyError:
                sgc = None
        policy = out.backoff_policy
        policy.max_attempts = (sgc.retry_max_times if sgc is not None else 16) + 1
        set_duration_ms(policy.exponential_backoff.initial, 1000)
        set_duration_ms(policy.exponential_backoff.max, 60_000)
        policy.exponential_backoff.multiplier = 2.0
        sub.fifo = sgc is not None and sgc.orderly
        sub.receive_batch_size = 32
        set_duration_ms(sub.long_polling_timeout, 20_000)


def peer_of(context: Any) -> str:
    """ip:port of a gRPC peer ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000")."""
    peer = context.peer() or ""
    kind, _, addr = peer.partition(":")
    if kind == "ipv6" and addr.startswith("["):
        host, _, port = addr[1:].partition("]:")
        return f"{host}:{port}"
    return addr if kind in ("ipv4", "ipv6") else "0.0.0.0:0"
