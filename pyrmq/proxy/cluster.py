"""The proxy's cluster mode (RocketMQ 5's ``mqproxy -pm cluster``, here
``pyrmq proxy``): a process of its own in front of a cluster's brokers.

- Routes come from the name servers (GET_ROUTEINFO_BY_TOPIC), a topic's
  message type from a master broker of it (GET_TOPIC_CONFIG), a consumer
  group's config from a master broker of the topic consumed
  (GET_SUBSCRIPTIONGROUP_CONFIG). Each is kept for its refresh time
  (``topicRouteServiceCacheRefreshSeconds``,
  ``topicConfigCacheRefreshSeconds``,
  ``subscriptionGroupConfigCacheRefreshSeconds``; 20 s, as RocketMQ 5's
  proxy) and, when the name servers or brokers cannot be asked, used past
  it. A topic or group not found is not kept: one created a moment later is
  found at once.
- Each gRPC client has its own remoting connections to the brokers it
  uses (a ``ClusterChannel``), as a 4.x client has: a broker's
  CHECK_TRANSACTION_STATE and running-info requests arrive on the
  connection of the client they are for, and a broker that sees the
  connection close forgets the client.
- Only masters are used (a master's slaves are read by its master's
  consumers in RocketMQ 4; POP is served by masters)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from pyrmq.broker.subscription_group import SubscriptionGroupConfig
from pyrmq.broker.topic_config import TopicConfig
from pyrmq.client.api import MQClientAPI
from pyrmq.common.errors import BrokerError, RemotingError
from pyrmq.common.route import MASTER_ID, PERM_READ, PERM_WRITE
from pyrmq.proxy.backend import Backend, ProxyChannel, QueueRef, TopicView, check_group
from pyrmq.proxy.channel import ChannelClosed
from pyrmq.proxy.config import ProxyConfig
from pyrmq.proxy.errors import ProxyError, code_of
from pyrmq.proxy.protocol import pb
from pyrmq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from pyrmq.remoting.command import FLAG_ONEWAY
from pyrmq.remoting.connection import Connection, HandlerResult

log = logging.getLogger("pyrmq.proxy")

#: how long a client may take to answer what a broker asks it (running
#: info, consume directly): the admin tools' own timeout
CLIENT_ANSWER_TIMEOUT = 5.0

_UNREACHED = (TimeoutError, RemotingError, OSError)


class ClusterChannel(ProxyChannel):
    """One gRPC client's remoting connections, one per broker it uses."""

    def __init__(self, client_id: str, peer: str, config: ProxyConfig) -> None:
        self.client_id = client_id
        self.peer = peer
        self.on_request = None
        self.on_call = None
        self._open = True
        self._remoting = RemotingClient(
            self._broker_request,
            name=f"proxy:{client_id}",
            connect_timeout=config.request_timeout,
        )
        self._closing: asyncio.Task[None] | None = None

    async def call_broker(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        if not self._open:
            raise ChannelClosed(f"the channel of client {self.client_id} is closed")
        return await self._remoting.invoke(addr, cmd, timeout)

    def _broker_request(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """What a broker sends the client: told (oneway, and the
        transaction check) or asked and answered."""
        if cmd.flag & FLAG_ONEWAY or cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            if self.on_request is not None:
                self.on_request(cmd)
            return None
        call = self.on_call
        if call is None:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"5.x client {self.client_id} cannot be asked request {cmd.code}",
            )
        return call(cmd, CLIENT_ANSWER_TIMEOUT)

    @property
    def is_open(self) -> bool:
        return self._open

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        self._closing = asyncio.get_running_loop().create_task(self._remoting.shutdown())

    async def closed(self) -> None:
        if self._closing is not None:
            await self._closing


class _Cache:
    """Values by key, each fresh for `refresh` seconds; a stale one is
    still there for when asking again fails."""

    def __init__(self, refresh: float, limit: int = 20_000) -> None:
        self.refresh = refresh
        self.limit = limit
        self._items: dict[Any, tuple[float, Any]] = {}

    def fresh(self, key: Any) -> Any | None:
        hit = self._items.get(key)
        return hit[1] if hit is not None and time.monotonic() - hit[0] < self.refresh else None

    def stale(self, key: Any) -> Any | None:
        hit = self._items.get(key)
        return hit[1] if hit is not None else None

    def put(self, key: Any, value: Any) -> None:
        if len(self._items) >= self.limit and key not in self._items:
            self._items.pop(next(iter(self._items)))
        self._items[key] = (time.monotonic(), value)

    def drop(self, key: Any) -> None:
        self._items.pop(key, None)


class ClusterBackend(Backend):
    mode = "cluster"

    def __init__(self, config: ProxyConfig, namesrv_addrs: Sequence[str]) -> None:
        if not namesrv_addrs:
            raise ValueError("the proxy needs the name servers: -n host:9876[;host2:9876]")
        self.config = config
        self.namesrv_addrs = list(namesrv_addrs)
        self._remoting = RemotingClient(name="proxy", connect_timeout=config.request_timeout)
        self.api = MQClientAPI(self._remoting, self.namesrv_addrs)
        self._routes = _Cache(config.topic_route_cache_refresh_s)
        self._groups = _Cache(config.group_config_cache_refresh_s)
        self._channels: set[ClusterChannel] = set()

    # -- topics -------------------------------------------------------------

    async def topic(self, name: str) -> TopicView:
        view = self._routes.fresh(name)
        if view is not None:
            return view
        try:
            route = await self.api.get_topic_route(name, self.config.request_timeout)
        except (BrokerError, *_UNREACHED) as e:
            stale = self._routes.stale(name)
            if stale is not None:
                return stale
            raise ProxyError(pb.Code.PROXY_TIMEOUT, f"the name servers: {e}") from None
        if route is None:
            self._routes.drop(name)
            raise ProxyError(pb.Code.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
        queues: list[QueueRef] = []
        for qd in route.queue_datas:
            bd = route.broker_data(qd.broker_name)
            master = bd.broker_addrs.get(MASTER_ID) if bd is not None else None
            if master is None:
                continue
            for q in range(max(qd.read_queue_nums, qd.write_queue_nums)):
                queues.append(
                    QueueRef(
                        qd.broker_name,
                        master,
                        q,
                        bool(qd.perm & PERM_READ) and q < qd.read_queue_nums,
                        bool(qd.perm & PERM_WRITE) and q < qd.write_queue_nums,
                    )
                )
        masters = sorted({q.addr for q in queues})
        view = TopicView(name, await self._message_type(name, masters), tuple(queues))
        self._routes.put(name, view)
        return view

    async def _message_type(self, name: str, masters: list[str]) -> str:
        """The topic's message.type, as its first reachable master says;
        "" (any type) when none says."""
        cmd = RemotingCommand(RequestCode.GET_TOPIC_CONFIG, {"topic": name})
        for addr in masters:
            try:
                resp = await self._remoting.invoke(addr, cmd, self.config.request_timeout)
            except _UNREACHED as e:
                log.info("proxy: topic config of %s from %s: %s", name, addr, e)
                continue
            if resp.code == ResponseCode.SUCCESS and resp.body:
                try:
                    return TopicConfig.from_json(json.loads(resp.body)).message_type
                except (ValueError, KeyError, TypeError) as e:
                    log.warning("proxy: broker %s sent a bad topic config: %s", addr, e)
            elif resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                log.info("proxy: broker %s has no GET_TOPIC_CONFIG: message types unchecked", addr)
                return ""
        return ""

    # -- groups -------------------------------------------------------------

    async def group(self, name: str, topic: TopicView | None = None) -> SubscriptionGroupConfig:
        masters = sorted({q.addr for q in topic.queues}) if topic is not None else []
        if not masters:
            masters = await self._masters()
        key = (name, masters[0] if masters else "")
        sgc = self._groups.fresh(key)
        if sgc is not None:
            return check_group(name, sgc)
        cmd = RemotingCommand(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": name})
        last: Exception | None = None
        for addr in masters:
            try:
                resp = await self._remoting.invoke(addr, cmd, self.config.request_timeout)
            except _UNREACHED as e:
                last = e
                continue
            if resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                self._groups.drop(key)
                return check_group(name, None)
            if resp.code != ResponseCode.SUCCESS:
                raise ProxyError(code_of(resp.code), f"group {name!r}: {resp.remark}")
            try:
                sgc = SubscriptionGroupConfig.from_json(json.loads(resp.body))
            except (ValueError, KeyError, TypeError) as e:
                raise ProxyError(
                    pb.Code.INTERNAL_SERVER_ERROR, f"broker {addr} sent a bad group config: {e}"
                ) from None
            self._groups.put(key, sgc)
            return check_group(name, sgc)
        stale = self._groups.stale(key)
        if stale is not None:
            return check_group(name, stale)
        raise ProxyError(pb.Code.PROXY_TIMEOUT, f"no broker answered for group {name!r}: {last}")

    async def _masters(self) -> list[str]:
        """Every master broker the name servers know."""
        try:
            info = await self.api.namesrv_json(
                RequestCode.GET_BROKER_CLUSTER_INFO, timeout=self.config.request_timeout
            )
        except (BrokerError, *_UNREACHED) as e:
            raise ProxyError(pb.Code.PROXY_TIMEOUT, f"the name servers: {e}") from None
        table = (info or {}).get("brokerAddrTable") or {}
        out = set()
        for b in table.values():
            addr = (b.get("brokerAddrs") or {}).get(str(MASTER_ID))
            if addr:
                out.add(str(addr))
        return sorted(out)

    # -- clients ------------------------------------------------------------

    def channel(self, client_id: str, peer: str) -> ProxyChannel:
        ch = ClusterChannel(client_id, peer, self.config)
        self._channels = {c for c in self._channels if c.is_open}
        self._channels.add(ch)
        return ch

    async def shutdown(self) -> None:
        for ch in list(self._channels):
            ch.close()
            await ch.closed()
        self._channels.clear()
        await self._remoting.shutdown()
