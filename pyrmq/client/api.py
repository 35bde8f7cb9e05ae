"""MQClientAPI: every request a client makes of a name server or a broker,
as typed coroutines over one RemotingClient, or the gRPC proxy's channel
of one client (MQClientAPIImpl).

Header fields follow docs/rocketmq-remoting-protocol.md §5 (what a Java 4.x
broker accepts: SEND_MESSAGE_V2's short keys, SEND_BATCH_MESSAGE for
batches). Non-success codes raise BrokerError subclasses, except the ones
that are statuses (SendStatus, PullStatus)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from pyrmq.common.errors import BrokerError, QueryNotFoundError, RemotingError
from pyrmq.common.message import MessageExt, MessageQueue, decode_messages
from pyrmq.common.results import PullResult, PullStatus, SendResult, SendStatus, new_send_result
from pyrmq.common.route import TopicRouteData
from pyrmq.common.topics import TBW102
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode
from pyrmq.remoting.command import LANGUAGE, VERSION
from rmqcore import encode_json_frame as _encode_json_frame

DEFAULT_TOPIC = TBW102
DEFAULT_TOPIC_QUEUE_NUMS = 4

#: a send request's code, by whether its body is a batch
SEND_CODE = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
_SEND_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}

# PULL_MESSAGE sysFlag bits (§8.1)
PULL_FLAG_COMMIT_OFFSET = 1
PULL_FLAG_SUSPEND = 2
PULL_FLAG_SUBSCRIPTION = 4


def _raise(resp: RemotingCommand, addr: str) -> BrokerError:
    return BrokerError.from_response(resp.code, resp.remark, addr)


class Invoker(Protocol):
    """Where MQClientAPI's requests go: a RemotingClient, or the gRPC
    proxy's channel of one client (pyrmq/proxy/backend.py)."""

    async def invoke(
        self, addr: str, cmd: RemotingCommand, timeout: float = 3.0
    ) -> RemotingCommand: ...

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None: ...


class MQClientAPI:
    """Typed requests. Name-server requests go to the chosen name server and
    move to the next one when it fails (one stays chosen while it works)."""

    def __init__(self, remoting: Invoker, namesrv_addrs: Sequence[str] = ()) -> None:
        """Without name servers only the broker requests can be made."""
        self.remoting = remoting
        self.namesrv_addrs = list(namesrv_addrs)
        self._ns_index = random.randrange(len(self.namesrv_addrs)) if self.namesrv_addrs else 0

    # -- name server ---------------------------------------------------------------

    async def invoke_namesrv(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        if not self.namesrv_addrs:
            raise RemotingError(
                "no name server address: give namesrv_addr='host:9876[;host2:9876]'"
            )
        last: Exception | None = None
        n = len(self.namesrv_addrs)
        for i in range(n):
            addr = self.namesrv_addrs[(self._ns_index + i) % n]
            try:
                resp = await self.remoting.invoke(addr, cmd, timeout)
            except RemotingError as e:
                last = e
                continue
            self._ns_index = (self._ns_index + i) % n
            return resp
        raise RemotingError(f"no name server answered ({'; '.join(self.namesrv_addrs)}): {last}")

    async def get_topic_route(self, topic: str, timeout: float = 5.0) -> TopicRouteData | None:
        """The route, or None when the name server knows no such topic."""
        cmd = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        resp = await self.invoke_namesrv(cmd, timeout)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST or (
            resp.code == ResponseCode.SUCCESS and not resp.body
        ):
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, "name server")
        try:
            return TopicRouteData.from_json(resp.body)
        except ValueError as e:
            raise RemotingError(f"name server sent a bad route for {topic!r}: {e}") from None

    async def namesrv_json(
        self, code: int, fields: dict[str, str] | None = None, timeout: float = 5.0
    ) -> Any:
        resp = await self.invoke_namesrv(RemotingCommand(code, fields or {}), timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, "name server")
        return json.loads(resp.body) if resp.body else None

    async def get_all_topic_list(self, timeout: float = 5.0) -> list[str]:
        """Every topic the name server has a route for, sorted
        (GET_ALL_TOPIC_LIST_FROM_NAMESERVER)."""
        data = await self.namesrv_json(
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, None, timeout
        )
        return sorted(str(t) for t in (data or {}).get("topicList") or ())

    # -- broker: send ----------------------------------------------------------------

    @staticmethod
    def send_command(batch: bool, fields: dict[str, str], body: bytes) -> RemotingCommand:
        """SEND_MESSAGE_V2 (one message) or SEND_BATCH_MESSAGE (a batch
        body) with the header `fields` of rmqcore.send_request_fields."""
        return RemotingCommand(SEND_CODE[batch], fields, body)

    @staticmethod
    def send_frame(opaque: int, batch: bool, fields: dict[str, str], body: bytes) -> bytes:
        """The frame send_command() encodes to with `opaque`, without a
        command object: a producer's sends on a connection without an RPC
        hook (Connection.request_frame)."""
        return _encode_json_frame(
            SEND_CODE[batch], LANGUAGE, VERSION, opaque, 0, None, fields, body
        )

    @staticmethod
    def send_result(
        resp: RemotingCommand, mq: MessageQueue, unique_ids: str, addr: str
    ) -> SendResult:
        """The SendResult of a send's response; raises for refusals."""
        status = _SEND_STATUS.get(resp.code)  # type: ignore[call-overload]
        if status is None:
            raise _raise(resp, addr)
        f = resp.ext_fields
        try:
            queue_id = int(f.get("queueId", mq.queue_id))
            queue_offset = int(f.get("queueOffset", -1))
        except ValueError:
            raise RemotingError(f"broker {addr} sent a malformed send response: {f}") from None
        return new_send_result(
            status,
            unique_ids,
            f.get("msgId", ""),
            mq if queue_id == mq.queue_id else MessageQueue(mq.topic, mq.broker_name, queue_id),
            queue_offset,
            f.get("transactionId"),
            f.get("MSG_REGION"),
        )

    async def send_message(
        self, addr: str, cmd: RemotingCommand, mq: MessageQueue, unique_ids: str, timeout: float
    ) -> SendResult:
        """Send a send_command() and wait for the broker's answer."""
        resp = await self.remoting.invoke(addr, cmd, timeout)
        return self.send_result(resp, mq, unique_ids, addr)

    async def consumer_send_message_back(
        self,
        addr: str,
        msg: MessageExt,
        group: str,
        delay_level: int,
        max_reconsume_times: int,
        timeout: float = 5.0,
    ) -> None:
        ext = {
            "offset": str(msg.commit_log_offset),
            "group": group,
            "delayLevel": str(delay_level),
            "originMsgId": msg.msg_id,
            "originTopic": msg.topic,
            "unitMode": "false",
            "maxReconsumeTimes": str(max_reconsume_times),
        }
        resp = await self.remoting.invoke(
            addr, RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, ext), timeout
        )
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)

    # -- broker: pull ----------------------------------------------------------------

    @staticmethod
    def pull_command(
        mq: MessageQueue,
        *,
        consumer_group: str,
        queue_offset: int,
        max_msg_nums: int,
        sys_flag: int,
        commit_offset: int,
        suspend_timeout_ms: int,
        subscription: str,
        sub_version: int,
        expression_type: str = "TAG",
    ) -> RemotingCommand:
        """PULL_MESSAGE's request."""
        ext = {
            "consumerGroup": consumer_group,
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "queueOffset": str(queue_offset),
            "maxMsgNums": str(max_msg_nums),
            "sysFlag": str(sys_flag),
            "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_timeout_ms),
            "subscription": subscription,
            "subVersion": str(sub_version),
            "expressionType": expression_type,
        }
        return RemotingCommand(RequestCode.PULL_MESSAGE, ext)

    @staticmethod
    def pull_result(
        resp: RemotingCommand, addr: str, broker_name: str, raw: bool = False
    ) -> PullResult:
        """The PullResult of a PULL_MESSAGE's response, its messages decoded
        as from broker_name (left in PullResult.body with raw); raises for
        refusals."""
        status = _PULL_STATUS.get(resp.code)  # type: ignore[call-overload]
        if status is None:
            raise _raise(resp, addr)
        f = resp.ext_fields
        try:
            result = PullResult(
                status,
                int(f["nextBeginOffset"]),
                int(f.get("minOffset", 0)),
                int(f.get("maxOffset", 0)),
                suggest_which_broker_id=int(f.get("suggestWhichBrokerId", 0)),
            )
        except (KeyError, ValueError):
            raise RemotingError(f"broker {addr} sent a malformed pull response: {f}") from None
        if status is PullStatus.FOUND and resp.body:
            if raw:
                result.body = resp.body
            else:
                result.msg_found_list = decode_messages(resp.body, broker_name)
        return result

    async def pull_message(
        self,
        addr: str,
        cmd: RemotingCommand,
        *,
        timeout: float,
        broker_name: str,
        raw: bool = False,
    ) -> PullResult:
        """A pull_command() to the broker at addr, named broker_name; its
        PullResult. With raw, the found records are left undecoded in
        PullResult.body (msg_found_list stays empty)."""
        resp = await self.remoting.invoke(addr, cmd, timeout)
        return self.pull_result(resp, addr, broker_name, raw)

    # -- broker: offsets -------------------------------------------------------------

    async def query_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, timeout: float = 5.0
    ) -> int | None:
        """The group's committed offset, or None when it has none."""
        ext = {
            "consumerGroup": group,
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "setZeroIfNotFound": "false",
        }
        resp = await self.remoting.invoke(
            addr, RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, ext), timeout
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)
        return int(resp.ext_fields.get("offset", -1))

    async def update_consumer_offset(
        self,
        addr: str,
        group: str,
        mq: MessageQueue,
        offset: int,
        timeout: float = 5.0,
        oneway: bool = False,
    ) -> None:
        ext = {
            "consumerGroup": group,
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "commitOffset": str(offset),
        }
        cmd = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext)
        if oneway:
            await self.remoting.invoke_oneway(addr, cmd)
            return
        resp = await self.remoting.invoke(addr, cmd, timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)

    async def _offset_query(
        self, addr: str, code: int, ext: dict[str, str], key: str, timeout: float
    ) -> int:
        resp = await self.remoting.invoke(addr, RemotingCommand(code, ext), timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)
        return int(resp.ext_fields.get(key, -1))

    async def get_max_offset(self, addr: str, mq: MessageQueue, timeout: float = 5.0) -> int:
        ext = {"topic": mq.topic, "queueId": str(mq.queue_id)}
        return await self._offset_query(addr, RequestCode.GET_MAX_OFFSET, ext, "offset", timeout)

    async def get_min_offset(self, addr: str, mq: MessageQueue, timeout: float = 5.0) -> int:
        ext = {"topic": mq.topic, "queueId": str(mq.queue_id)}
        return await self._offset_query(addr, RequestCode.GET_MIN_OFFSET, ext, "offset", timeout)

    async def search_offset(
        self, addr: str, mq: MessageQueue, timestamp_ms: int, timeout: float = 5.0
    ) -> int:
        ext = {"topic": mq.topic, "queueId": str(mq.queue_id), "timestamp": str(timestamp_ms)}
        return await self._offset_query(
            addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ext, "offset", timeout
        )

    async def get_earliest_msg_storetime(
        self, addr: str, mq: MessageQueue, timeout: float = 5.0
    ) -> int:
        ext = {"topic": mq.topic, "queueId": str(mq.queue_id)}
        return await self._offset_query(
            addr, RequestCode.GET_EARLIEST_MSG_STORETIME, ext, "timestamp", timeout
        )

    # -- broker: membership and locks --------------------------------------------------

    async def send_heartbeat(self, addr: str, data: dict[str, Any], timeout: float = 3.0) -> None:
        body = json.dumps(data, separators=(",", ":")).encode()
        resp = await self.remoting.invoke(
            addr, RemotingCommand(RequestCode.HEART_BEAT, {}, body), timeout
        )
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)

    async def unregister_client(
        self,
        addr: str,
        client_id: str,
        producer_group: str = "",
        consumer_group: str = "",
        timeout: float = 3.0,
    ) -> None:
        ext = {
            "clientID": client_id,
            "producerGroup": producer_group,
            "consumerGroup": consumer_group,
        }
        resp = await self.remoting.invoke(
            addr, RemotingCommand(RequestCode.UNREGISTER_CLIENT, ext), timeout
        )
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)

    async def get_consumer_id_list(self, addr: str, group: str, timeout: float = 5.0) -> list[str]:
        resp = await self.remoting.invoke(
            addr,
            RemotingCommand(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}),
            timeout,
        )
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)
        try:
            return [str(c) for c in json.loads(resp.body)["consumerIdList"]]
        except (ValueError, KeyError, TypeError):
            raise RemotingError(f"broker {addr} sent a malformed consumer list") from None

    @staticmethod
    def _mq_set_body(group: str, client_id: str, mqs: Iterable[MessageQueue]) -> bytes:
        return json.dumps(
            {
                "consumerGroup": group,
                "clientId": client_id,
                "mqSet": [
                    {"topic": m.topic, "brokerName": m.broker_name, "queueId": m.queue_id}
                    for m in mqs
                ],
            }
        ).encode()

    async def lock_batch_mq(
        self,
        addr: str,
        group: str,
        client_id: str,
        mqs: Iterable[MessageQueue],
        timeout: float = 3.0,
    ) -> set[MessageQueue]:
        body = self._mq_set_body(group, client_id, mqs)
        resp = await self.remoting.invoke(
            addr, RemotingCommand(RequestCode.LOCK_BATCH_MQ, {}, body), timeout
        )
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)
        try:
            data = json.loads(resp.body) if resp.body else {}
            return {
                MessageQueue(str(m["topic"]), str(m["brokerName"]), int(m["queueId"]))
                for m in data.get("lockOKMQSet") or ()
            }
        except (ValueError, KeyError, TypeError):
            raise RemotingError(f"broker {addr} sent a malformed lock answer") from None

    async def unlock_batch_mq(
        self,
        addr: str,
        group: str,
        client_id: str,
        mqs: Iterable[MessageQueue],
        timeout: float = 3.0,
        oneway: bool = False,
    ) -> None:
        cmd = RemotingCommand(
            RequestCode.UNLOCK_BATCH_MQ, {}, self._mq_set_body(group, client_id, mqs)
        )
        if oneway:
            await self.remoting.invoke_oneway(addr, cmd)
            return
        resp = await self.remoting.invoke(addr, cmd, timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)

    # -- broker: queries and admin --------------------------------------------------------

    async def view_message(self, addr: str, phys_offset: int, timeout: float = 5.0) -> MessageExt:
        resp = await self.remoting.invoke(
            addr,
            RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys_offset)}),
            timeout,
        )
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)
        msgs = decode_messages(resp.body)
        if not msgs:
            raise QueryNotFoundError(f"no message at CommitLog offset {phys_offset}", addr)
        return msgs[0]

    async def query_message(
        self,
        addr: str,
        topic: str,
        key: str,
        max_num: int,
        begin_ms: int,
        end_ms: int,
        unique_key: bool = False,
        timeout: float = 5.0,
    ) -> list[MessageExt]:
        ext = {
            "topic": topic,
            "key": key,
            "maxNum": str(max_num),
            "beginTimestamp": str(begin_ms),
            "endTimestamp": str(end_ms),
        }
        if unique_key:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        resp = await self.remoting.invoke(
            addr, RemotingCommand(RequestCode.QUERY_MESSAGE, ext), timeout
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)
        return decode_messages(resp.body)

    async def broker_request(
        self,
        addr: str,
        code: int,
        fields: dict[str, str] | None = None,
        body: bytes = b"",
        timeout: float = 5.0,
    ) -> RemotingCommand:
        """Any request; raises unless the answer is SUCCESS."""
        resp = await self.remoting.invoke(addr, RemotingCommand(code, fields or {}, body), timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise _raise(resp, addr)
        return resp
