"""What the gRPC service needs of the brokers behind it, in either of
RocketMQ 5's proxy modes:

- local (local.py): the proxy inside one broker process; its tables are
  read directly and requests are handed to its processors in-process;
- cluster (cluster.py): ``pyrmq proxy``, a process of its own in front of a
  cluster; routes come from the name servers, topic and group configs from
  the brokers (GET_TOPIC_CONFIG, GET_SUBSCRIPTIONGROUP_CONFIG), and requests
  go over remoting connections.

Either way every RPC becomes the remoting request a 4.x client would send,
on the calling client's channel (``ProxyChannel``): the service itself is
written once, against this module."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyrmq.broker.subscription_group import SubscriptionGroupConfig, check_group_name
from pyrmq.broker.topic_config import PERM_READ, PERM_WRITE, TopicConfig
from pyrmq.common.errors import BrokerError
from pyrmq.proxy.errors import ProxyError
from pyrmq.proxy.protocol import pb
from pyrmq.remoting import RemotingCommand

if TYPE_CHECKING:
    from pyrmq.acl import PlainAccessValidator


@dataclass(frozen=True, slots=True)
class QueueRef:
    """One queue of a topic on one broker (its master's address)."""

    broker_name: str
    addr: str
    queue_id: int
    readable: bool
    writable: bool


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    #: the message.type attribute (NORMAL when it has none); "" when the
    #: brokers do not say (a broker without GET_TOPIC_CONFIG): any type
    message_type: str
    queues: tuple[QueueRef, ...]

    def writable(self) -> list[QueueRef]:
        return [q for q in self.queues if q.writable]

    def readable_brokers(self) -> dict[str, tuple[str, bool]]:
        """broker name -> (address, writable too), of brokers with a
        readable queue."""
        out: dict[str, tuple[str, bool]] = {}
        for q in self.queues:
            if q.readable:
                w = out.get(q.broker_name, (q.addr, False))[1]
                out[q.broker_name] = (q.addr, w or q.writable)
        return out


def queues_of(tc: TopicConfig, broker_name: str, addr: str) -> list[QueueRef]:
    """A broker's queues of a topic, by its TopicConfig (queue ids up to the
    larger of its read and write queue numbers)."""
    return [
        QueueRef(
            broker_name,
            addr,
            q,
            bool(tc.perm & PERM_READ) and q < tc.read_queue_nums,
            bool(tc.perm & PERM_WRITE) and q < tc.write_queue_nums,
        )
        for q in range(tc.queue_nums)
    ]


def check_group(name: str, sgc: SubscriptionGroupConfig | None) -> SubscriptionGroupConfig:
    """sgc, or the ProxyError a consumer of group name gets."""
    if sgc is None:
        raise ProxyError(
            pb.Code.CONSUMER_GROUP_NOT_FOUND,
            f"consumer group {name!r} does not exist (autoCreateSubscriptionGroup is off: "
            "create it with updateSubGroup)",
        )
    if not sgc.consume_enable:
        raise ProxyError(pb.Code.FORBIDDEN, f"consumer group {name!r} may not consume now")
    return sgc


def check_names(topic: str | None = None, group: str | None = None) -> None:
    if topic is not None and not topic:
        raise ProxyError(pb.Code.ILLEGAL_TOPIC, "topic name cannot be empty")
    if group is not None:
        try:
            check_group_name(group)
        except BrokerError as e:
            raise ProxyError(pb.Code.ILLEGAL_CONSUMER_GROUP, e.remark) from None


class ProxyChannel(abc.ABC):
    """One gRPC client's way to the brokers: requests out, and what the
    brokers ask of the client (CHECK_TRANSACTION_STATE, running info) in."""

    client_id: str
    #: what a broker tells the client (oneway requests), or None
    on_request: Callable[[RemotingCommand], None] | None
    #: what a broker asks the client and awaits, or None
    on_call: Callable[[RemotingCommand, float], Awaitable[RemotingCommand]] | None

    @abc.abstractmethod
    async def call_broker(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """cmd answered by the broker at addr. TimeoutError when it does
        not answer in time, ChannelClosed when the client went away,
        RemotingError when it cannot be reached."""

    @property
    @abc.abstractmethod
    def is_open(self) -> bool: ...

    @abc.abstractmethod
    def close(self) -> None: ...


class ChannelInvoker:
    """A channel as MQClientAPI's Invoker: the proxy makes the broker
    requests a 4.x client makes with the same code (pyrmq/client/api.py)."""

    def __init__(self, channel: ProxyChannel) -> None:
        self.channel = channel

    async def invoke(
        self, addr: str, cmd: RemotingCommand, timeout: float = 3.0
    ) -> RemotingCommand:
        return await self.channel.call_broker(addr, cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        await self.channel.call_broker(addr, cmd, 3.0)


class Backend(abc.ABC):
    """The brokers behind the proxy (see the module docstring)."""

    mode: str
    #: the ACL validator of the gRPC requests (aclEnable), or None
    acl: PlainAccessValidator | None = None

    @abc.abstractmethod
    async def topic(self, name: str) -> TopicView:
        """ProxyError TOPIC_NOT_FOUND when no broker has it."""

    @abc.abstractmethod
    async def group(self, name: str, topic: TopicView | None = None) -> SubscriptionGroupConfig:
        """The consumer group's config (as the brokers of topic hold it,
        when given); ProxyError as check_group says."""

    @abc.abstractmethod
    def channel(self, client_id: str, peer: str) -> ProxyChannel:
        """A new client's channel."""

    async def start(self) -> None:  # noqa: B027 (optional)
        """Before the gRPC port opens."""

    async def shutdown(self) -> None:  # noqa: B027 (optional)
        """After the gRPC port closed and every channel with it."""
