"""ClientInstance: what every producer and consumer needs from the cluster
(MQClientInstance): the topic route cache and broker address table,
heartbeats, and the answers to requests brokers send clients.

Each Producer, PushConsumer and PullConsumer owns one ClientInstance, bound
to the event loop it was started on. Its client id is `ip@instance_name`;
the default instance name is `pid#n` (n counts instances in this process),
so several consumers of one group can live in one process and a child
process after fork() never reuses its parent's id."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import logging
import os
import random
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from pyrmq.acl.signing import AclClientRPCHook, credentials_hook
from pyrmq.client.api import DEFAULT_TOPIC, MQClientAPI
from pyrmq.common.errors import RMQError
from pyrmq.common.message import MessageQueue, local_ip
from pyrmq.common.route import MASTER_ID, TopicRouteData
from pyrmq.remoting import Connection, RemotingClient, RemotingCommand, RequestCode, ResponseCode

log = logging.getLogger("pyrmq.client")

_instance_seq = itertools.count(1)

#: the first look at every route, this long after start (at most the poll
#: interval)
FIRST_ROUTE_REFRESH = 3.0
#: a topic a member uses that has no route yet (a consumer subscribed before
#: anything created it, or started before the broker registered the topic it
#: auto-created) is asked for within a second, again after
#: MISSING_ROUTE_RETRY, then twice as long each time up to
#: MISSING_ROUTE_RETRY_MAX: Kafka's retry.backoff.ms and retry.backoff.max.ms
#: defaults. Without it, such a topic waited for the next refresh: 3 s after
#: start, then poll_name_server_interval (30 s), as RocketMQ's clients do.
MISSING_ROUTE_RETRY = 0.1
MISSING_ROUTE_RETRY_MAX = 1.0


def split_namesrv_addr(namesrv_addr: str | Sequence[str] | None) -> list[str]:
    """'h1:9876;h2:9876' (RocketMQ's form), or a list, or NAMESRV_ADDR."""
    if namesrv_addr is None:
        namesrv_addr = os.environ.get("NAMESRV_ADDR", "")
    items = namesrv_addr.split(";") if isinstance(namesrv_addr, str) else list(namesrv_addr)
    addrs = [a.strip() for a in items if a and a.strip()]
    if not addrs:
        raise ValueError(
            "no name server address: pass namesrv_addr='127.0.0.1:9876' "
            "(several separated by ';') or set NAMESRV_ADDR"
        )
    for a in addrs:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"name server address {a!r} is not host:port")
    return addrs


class ClientMember(Protocol):
    """A producer or consumer registered with a ClientInstance."""

    def topics_of_interest(self) -> Iterable[str]: ...

    def on_route_changed(self, topic: str, route: TopicRouteData | None) -> None: ...


class ClientInstance:
    """Route cache + broker table + heartbeat for one producer or consumer."""

    def __init__(
        self,
        namesrv_addr: str | Sequence[str] | None,
        *,
        instance_name: str | None = None,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        request_timeout: float = 3.0,
        ssl_context: ssl.SSLContext | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        rpc_hook: AclClientRPCHook | None = None,
    ) -> None:
        """ssl_context: every connection (name servers, brokers) is TLS."""
        for name, seconds in (
            ("poll_name_server_interval", poll_name_server_interval),
            ("heartbeat_broker_interval", heartbeat_broker_interval),
        ):
            if not seconds > 0:  # also NaN
                raise ValueError(f"{name} must be > 0 seconds, got {seconds!r}")
        self.namesrv_addrs = split_namesrv_addr(namesrv_addr)
        self.ssl_context = ssl_context
        #: ACL 1.0: signs every request and answer (module pyrmq.acl.signing);
        #: credentials from the arguments, else ROCKETMQ_ACCESS_KEY and
        #: ROCKETMQ_SECRET_KEY, else none (nothing signed)
        self.rpc_hook = rpc_hook or credentials_hook(access_key, secret_key)
        self.instance_name = instance_name or f"{os.getpid()}#{next(_instance_seq)}"
        self.client_id = f"{local_ip()}@{self.instance_name}"
        self.poll_name_server_interval = poll_name_server_interval
        self.heartbeat_broker_interval = heartbeat_broker_interval
        self.request_timeout = request_timeout
        self.remoting = RemotingClient(
            self._on_request,
            name=f"client {self.client_id}",
            ssl_context=ssl_context,
            rpc_hook=self.rpc_hook,
        )
        self.api = MQClientAPI(self.remoting, self.namesrv_addrs)
        self.routes: dict[str, TopicRouteData] = {}
        #: broker name -> {broker id -> address}
        self.broker_addr_table: dict[str, dict[int, str]] = {}
        #: mq -> the broker id its last pull answer suggested
        self.pull_from_which_node: dict[MessageQueue, int] = {}
        self.members: list[ClientMember] = []
        #: heartbeat sections, refreshed by their owners
        self.producer_data: list[dict[str, Any]] = []
        self.consumer_data: Callable[[], list[dict[str, Any]]] | None = None
        #: broker -> client requests: code -> handler(cmd) -> answer or None
        self.request_handlers: dict[int, Callable[[RemotingCommand], Any]] = {}
        #: the same for handlers that answer on the request's connection
        self.conn_request_handlers: dict[int, Callable[[Connection, RemotingCommand], Any]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._spawned: set[asyncio.Task[Any]] = set()
        #: topic -> the answer of its route lookup on the way, shared by
        #: every caller that asks meanwhile
        self._route_lookups: dict[str, asyncio.Future[TopicRouteData | None]] = {}
        #: the broker whose member list answered last (asked first next time)
        self._member_broker: str | None = None
        self.started = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        self._tasks = [
            asyncio.create_task(self._route_refresh_loop(), name="pyrmq:client:routes"),
            asyncio.create_task(self._heartbeat_loop(), name="pyrmq:client:heartbeat"),
        ]

    async def shutdown(self) -> None:
        tasks = [*self._tasks, *self._spawned]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        await self.remoting.shutdown()
        self.started = False

    def spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        """A background task whose failure is logged, never lost."""
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        task.add_done_callback(_log_failure)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)
        return task

    # -- routes --------------------------------------------------------------------------------

    async def update_topic_route(self, topic: str) -> TopicRouteData | None:
        """Fetch topic's route from the name server, record its brokers and
        tell the members when it changed. None when the topic has no route.
        Callers that ask while a lookup of the topic is on its way share its
        answer (or its error): a new producer's thousands of first sends, or
        every retry after a failure, make one request, not one each."""
        shared = self._route_lookups.get(topic)
        if shared is not None:
            try:
                return await asyncio.shield(shared)
            except asyncio.CancelledError:
                if not shared.cancelled():
                    raise  # this caller was cancelled
                # the caller that made the lookup gave up on it: make our own
            except Exception as e:
                # an instance of its own: callers add notes to what they raise
                raise copy.copy(e) from None
        shared = asyncio.get_running_loop().create_future()
        shared.add_done_callback(_retrieved)
        self._route_lookups[topic] = shared
        try:
            route = await self.api.get_topic_route(topic, 5.0)
        except asyncio.CancelledError:
            shared.cancel()
            raise
        except BaseException as e:
            shared.set_exception(e)
            raise
        finally:
            del self._route_lookups[topic]
        old = self.routes.get(topic)
        if route is None:
            shared.set_result(None)
            if old is not None:
                del self.routes[topic]
                self._notify(topic, None)
            return None
        known = {a for t in self.broker_addr_table.values() for a in t.values()}
        for bd in route.broker_datas:
            self.broker_addr_table[bd.broker_name] = dict(bd.broker_addrs)
        new_broker = any(
            a not in known for bd in route.broker_datas for a in bd.broker_addrs.values()
        )
        changed = route != old
        if changed:
            self.routes[topic] = route
        # answered before the heartbeat, so a silent new broker does not stall
        # the callers sharing this lookup: a broker we never heartbeated must
        # know us before members pull from it or ask it for their group's
        # members, so they hear of the change only after the heartbeat
        shared.set_result(route)
        if new_broker and self.started:
            await self.send_heartbeat_to_all_brokers()
        if changed:
            self._notify(topic, route)
        return route

    def _notify(self, topic: str, route: TopicRouteData | None) -> None:
        for m in self.members:
            try:
                m.on_route_changed(topic, route)
            except Exception:
                log.exception("%s: route change of %s", self.client_id, topic)

    async def _route_refresh_loop(self) -> None:
        """Every route again each poll_name_server_interval (the first time
        FIRST_ROUTE_REFRESH after start). Between those, at least once a
        second (MISSING_ROUTE_RETRY_MAX), the topics that have no route yet:
        each is asked for after MISSING_ROUTE_RETRY, then twice as long each
        time while it has none."""
        loop = asyncio.get_running_loop()
        every = self.poll_name_server_interval
        next_all = loop.time() + min(FIRST_ROUTE_REFRESH, every)
        first_retry = min(MISSING_ROUTE_RETRY, every)
        retry = first_retry
        missing = self._missing_routes()
        while True:
            pause = retry if missing else MISSING_ROUTE_RETRY_MAX
            now = loop.time()
            await asyncio.sleep(max(0.0, min(next_all - now, pause, every)))
            every_route = loop.time() >= next_all
            if every_route:
                topics = self._topics_of_interest()
                next_all = loop.time() + every
            else:
                topics = self._missing_routes()  # members may have come meanwhile
            for topic in sorted(topics):
                try:
                    await self.update_topic_route(topic)
                except RMQError as e:
                    # said once a refresh of every route, not at each retry
                    log.log(
                        logging.WARNING if every_route else logging.DEBUG,
                        "%s: route of %s not refreshed: %s",
                        self.client_id,
                        topic,
                        e,
                    )
            missing = self._missing_routes()
            retry = (
                min(retry * 2, MISSING_ROUTE_RETRY_MAX, every)
                if topics and missing
                else first_retry
            )

    def _topics_of_interest(self) -> set[str]:
        return {t for m in self.members for t in m.topics_of_interest()}

    def _missing_routes(self) -> set[str]:
        """The topics the members use that have no route, but the default
        topic (TBW102): it exists only where the brokers auto-create topics,
        and a producer keeps it among its topics anyway, to find every
        broker (as RocketMQ's producer does)."""
        return {
            t for t in self._topics_of_interest() if t not in self.routes and t != DEFAULT_TOPIC
        }

    def find_broker_addr(self, broker_name: str, only_master: bool = True) -> str | None:
        addrs = self.broker_addr_table.get(broker_name)
        if not addrs:
            return None
        if MASTER_ID in addrs:
            return addrs[MASTER_ID]
        if only_master:
            return None
        return next(iter(addrs.values()))

    def pull_addr(self, mq: MessageQueue) -> str | None:
        """Where to pull mq from (PullAPIWrapper): the broker its last pull
        answer suggested (suggestWhichBrokerId; the master, 0, at first),
        else the master, else any replica of its broker name (a slave keeps
        serving while the master is away)."""
        addrs = self.broker_addr_table.get(mq.broker_name)
        if not addrs:
            return None
        addr = addrs.get(self.pull_from_which_node.get(mq, MASTER_ID))
        if addr is None:
            addr = addrs.get(MASTER_ID) or next(iter(addrs.values()))
        return addr

    def suggest_pull_node(self, mq: MessageQueue, broker_id: int) -> None:
        self.pull_from_which_node[mq] = broker_id

    async def pull_addr_or_refresh(self, mq: MessageQueue) -> str | None:
        addr = self.pull_addr(mq)
        if addr is None:
            with contextlib.suppress(RMQError):
                await self.update_topic_route(mq.topic)
            addr = self.pull_addr(mq)
        return addr

    async def find_broker_addr_or_refresh(
        self, broker_name: str, topic: str, only_master: bool = True
    ) -> str | None:
        addr = self.find_broker_addr(broker_name, only_master)
        if addr is None:
            with contextlib.suppress(RMQError):
                await self.update_topic_route(topic)
            addr = self.find_broker_addr(broker_name, only_master)
        return addr

    def any_broker_of(self, topic: str) -> str | None:
        """A random broker address from topic's route (findBrokerAddrByTopic)."""
        route = self.routes.get(topic)
        if route is None or not route.broker_datas:
            return None
        bd = random.choice(route.broker_datas)
        return bd.select_broker_addr()

    async def consumer_id_list(self, topic: str, group: str) -> list[str] | None:
        """The group's members as a broker of topic knows them
        (findConsumerIdList), or None when no broker answered.

        RocketMQ asks one random broker and gives up when it does not
        answer; a broker that is cut off (alive, registered, silent) then
        fails half the rebalances of every member. Here the broker that
        answered last is asked first, then the others in random order, each
        within the request timeout."""
        route = self.routes.get(topic)
        if route is None:
            return None
        addrs = [a for a in (bd.select_broker_addr() for bd in route.broker_datas) if a]
        random.shuffle(addrs)
        if self._member_broker in addrs:
            addrs.remove(self._member_broker)
            addrs.insert(0, self._member_broker)
        for addr in addrs:
            try:
                cids = await self.api.get_consumer_id_list(addr, group, self.request_timeout)
            except RMQError as e:
                log.info("%s: member list of %s from %s failed: %s", self.client_id, group, addr, e)
                continue
            self._member_broker = addr
            return cids
        return None

    # -- heartbeat --------------------------------------------------------------------------

    def heartbeat_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"clientID": self.client_id}
        if self.producer_data:
            body["producerDataSet"] = self.producer_data
        consumers = self.consumer_data() if self.consumer_data is not None else []
        if consumers:
            body["consumerDataSet"] = consumers
        return body

    async def send_heartbeat_to_all_brokers(self) -> int:
        """Heartbeat every known broker (masters only when no consumers);
        return how many answered."""
        body = self.heartbeat_body()
        with_consumers = "consumerDataSet" in body
        addrs = {
            addr
            for table in self.broker_addr_table.values()
            for bid, addr in table.items()
            if with_consumers or bid == MASTER_ID
        }
        results = await asyncio.gather(
            *(self.api.send_heartbeat(a, body, self.request_timeout) for a in sorted(addrs)),
            return_exceptions=True,
        )
        ok = 0
        for addr, r in zip(sorted(addrs), results, strict=True):
            if isinstance(r, BaseException):
                log.info("%s: heartbeat to %s failed: %s", self.client_id, addr, r)
            else:
                ok += 1
        return ok

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_broker_interval)
            try:
                await self.send_heartbeat_to_all_brokers()
            except Exception:
                log.exception("%s: heartbeat round failed", self.client_id)

    async def unregister(self, producer_group: str = "", consumer_group: str = "") -> None:
        addrs = {a for t in self.broker_addr_table.values() for a in t.values()}
        await asyncio.gather(
            *(
                self.api.unregister_client(a, self.client_id, producer_group, consumer_group)
                for a in sorted(addrs)
            ),
            return_exceptions=True,
        )

    # -- requests from brokers ---------------------------------------------------------

    def _on_request(self, conn: Connection, cmd: RemotingCommand) -> Any:
        conn_handler = self.conn_request_handlers.get(cmd.code)
        if conn_handler is not None:
            return conn_handler(conn, cmd)
        handler = self.request_handlers.get(cmd.code)
        if handler is None:
            if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
                return cmd.response(
                    ResponseCode.SYSTEM_ERROR,
                    remark="The Consumer Group not exist in this consumer",
                )
            if cmd.is_oneway:
                return None
            return cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {cmd.code} is not supported by this client",
            )
        return handler(cmd)


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Mark a shared lookup's error as seen (its maker raises it already)."""
    if not fut.cancelled():
        fut.exception()


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("task %s failed", task.get_name(), exc_info=task.exception())


def mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


def json_body(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()
