"""The proxy's local mode (RocketMQ 5's ``mqbroker --enable-proxy``): the
brokers behind it are the one broker of this process. Its topic and group
tables are read directly; each client's requests go to its processors
through a LocalChannel (channel.py), with no socket between."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyrmq.broker.subscription_group import SubscriptionGroupConfig
from pyrmq.proxy.backend import Backend, ProxyChannel, TopicView, check_group, queues_of
from pyrmq.proxy.channel import LocalChannel
from pyrmq.proxy.errors import ProxyError
from pyrmq.proxy.protocol import pb

if TYPE_CHECKING:
    from pyrmq.broker.broker import Broker


class LocalBackend(Backend):
    mode = "local"

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.acl = broker.acl

    async def topic(self, name: str) -> TopicView:
        tc = self.broker.topics.get(name)
        if tc is None:
            raise ProxyError(pb.Code.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
        b = self.broker
        return TopicView(
            tc.topic_name, tc.message_type, tuple(queues_of(tc, b.config.broker_name, b.addr))
        )

    async def group(self, name: str, topic: TopicView | None = None) -> SubscriptionGroupConfig:
        return check_group(name, self.broker.groups.find(name))

    def channel(self, client_id: str, peer: str) -> ProxyChannel:
        server = self.broker.server
        assert server is not None, "the broker serves before its proxy starts"
        return LocalChannel(server, client_id, peer)
