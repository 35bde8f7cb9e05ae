"""POP consumption over the 4.x remoting protocol: how a separate proxy
(RocketMQ 5's cluster mode) reaches the broker's PopService, as RocketMQ 5's
proxy reaches its brokers (PopMessageProcessor, AckMessageProcessor,
ChangeInvisibleTimeProcessor, and AdminBrokerProcessor's getTopicConfig and
getSubscriptionGroup). The wire contract, once:

  code    request                        request extFields (R: required)
  200050  POP_MESSAGE                    consumerGroup R, topic R, queueId R (-1: any
                                         queue), maxMsgNums R (1..32), invisibleTime R
                                         (ms, PopService's range), pollTime R (ms,
                                         0..20000), bornTime, initMode, expType (TAG
                                         or SQL92; default TAG), exp (default "*"),
                                         order ("true"/"false"), attemptId
  200051  ACK_MESSAGE                    consumerGroup R, topic R, extraInfo R (the
                                         receipt handle), queueId, offset
  200053  CHANGE_MESSAGE_INVISIBLETIME    consumerGroup R, topic R, extraInfo R,
                                         invisibleTime R, queueId, offset
      36  CONSUMER_SEND_MSG_BACK         pyrmq extension for POP: with extraInfo (a
          (with extraInfo)               receipt handle) it is RocketMQ 5 proxy's
                                         ForwardMessageToDeadLetterQueue: group R,
                                         originTopic R (the topic popped), extraInfo R,
                                         delayLevel (-1 or absent), offset (its
                                         CommitLog offset, not read); without
                                         extraInfo it is the 4.x send-back
                                         (processor/send.py)
     351  GET_TOPIC_CONFIG               topic R (RocketMQ's `lo` is not read)
     352  GET_SUBSCRIPTIONGROUP_CONFIG   group R

Answers:

- POP_MESSAGE, messages found: SUCCESS; extFields popTime (ms, the pop's
  time: the checkpoints' start), invisibleTime (as asked), reviveQid ("0":
  the revive log has one queue), restNum (messages past the group's offsets
  in the queues asked for, the retry topic's included; a queue the group
  never read counts from its first message), startOffsetInfo and
  msgOffsetInfo (RocketMQ's ExtraInfoUtil layouts: per queue read,
  "<retry> <queueId> <first offset>" and "<retry> <queueId> <o1>,<o2>,...",
  joined by ";", retry 1 for %RETRY%<group>, else 0); orderCountInfo is
  left out (pyrmq counts no deliveries of an orderly queue). The body is
  the messages exactly as a PULL_MESSAGE body carries them (stored
  CommitLog records back to back, csrc/rmq_format.h section 2), each copied
  by rmqcore.record_with_topic with property POP_CK = its receipt handle
  (pyrmq/broker/pop/receipt.py) appended, and under the topic the consumer
  asked for: a message read from %RETRY%<group> keeps its RETRY_TOPIC
  property (the original topic, set when it was revived) and its retry
  queue id and offset, as RocketMQ's broker answers (its record re-encoded
  with the request's topic). POP_CK is a pyrmq extension: RocketMQ's
  clients build ExtraInfo themselves from the offset infos and would
  replace it; pyrmq's broker takes only its own handle back, so a RocketMQ
  4.x/5.x client's own POP against it fails its acks (NO_MESSAGE). The
  proxy carries POP_CK to its clients as the receipt handle.
- POP_MESSAGE, nothing within pollTime: POLLING_TIMEOUT (210), as
  RocketMQ's PopMessageProcessor answers both an expired long poll and a
  pop with pollTime 0; the same extFields, restNum and empty offset infos,
  no body. RocketMQ's clients (processPopResponse) read 210 and
  PULL_NOT_FOUND (19) both as "no message"; pyrmq never answers 19 here.
  More than 4096 pops held on one connection: POLLING_FULL (209).
- The hold: a pop that finds nothing is held (answered later) until a
  message arrives in the topic or the group's retry topic, then popped
  again, until pollTime passes from its arrival here. bornTime is read (an
  integer) but not used: a proxy's clock need not match the broker's
  (RocketMQ measures the hold from bornTime). A connection closed ends its
  held pops; one that went to the proxy is redelivered after its
  invisible time.
- Ordering is the group's: a group with consumeMessageOrderly=true hands
  out one queue's messages at a time, whatever `order` says (`order` only
  ever asks for the orderCountInfo that pyrmq leaves out). initMode and
  attemptId are read and not used: a new group starts where PopService
  starts it (pyrmq/broker/pop/service.py), and pyrmq has no re-pop by
  attempt id.
- ACK_MESSAGE: SUCCESS, no extFields. CHANGE_MESSAGE_INVISIBLETIME:
  SUCCESS with popTime (the new checkpoint's start), reviveQid ("0"),
  invisibleTime (as asked) as RocketMQ's ChangeInvisibleTimeResponseHeader,
  plus extraInfo = the new receipt handle (pyrmq extension: RocketMQ's
  proxy builds the new handle itself; here only the broker can). The old
  handle is dead after it.
- A handle this broker did not give, acked already, or whose invisible
  time passed (the message went back): NO_MESSAGE (208) with a remark
  saying which (RocketMQ answers 208 for an offset outside the queue; it
  cannot tell a spent handle). queueId and offset, when given, must be the
  handle's (a retried message's are its retry queue's), else NO_MESSAGE;
  absent or negative, the handle alone decides.
- GET_TOPIC_CONFIG: SUCCESS, body the TopicConfig JSON as
  GET_ALL_TOPIC_CONFIG writes each (topicName, readQueueNums,
  writeQueueNums, perm, topicFilterType, topicSysFlag, order, attributes;
  TopicConfigAndQueueMapping's mappingDetail is null, so absent, as
  fastjson writes it); absent: TOPIC_NOT_EXIST. GET_SUBSCRIPTIONGROUP_CONFIG:
  SUCCESS, body the SubscriptionGroupConfig JSON as
  GET_ALL_SUBSCRIPTIONGROUP_CONFIG writes each; an unknown group is created
  with the defaults when autoCreateSubscriptionGroup is on (as every
  consuming request does), else SUBSCRIPTION_GROUP_NOT_EXIST (26) (RocketMQ
  answers SYSTEM_ERROR "No group in this broker" and never creates).

Errors, every POP request: a required field missing or not an integer:
SYSTEM_ERROR naming it (processor/headers.py); maxMsgNums outside 1..32,
pollTime outside 0..20000, invisibleTime outside PopService's range, a
group name RocketMQ refuses: INVALID_PARAMETER (29) naming the field; the
broker is a slave (PopService not running): NO_PERMISSION "broker X is a
slave now: POP is served by its master"; topic absent: TOPIC_NOT_EXIST;
topic not readable: NO_PERMISSION; queueId outside -1..readQueueNums-1:
SYSTEM_ERROR (RocketMQ's); group absent (autoCreateSubscriptionGroup
off): SUBSCRIPTION_GROUP_NOT_EXIST; consumeEnable=false: NO_PERMISSION;
a filter that does not parse: SUBSCRIPTION_PARSE_FAILED (23). ACL rights
per code: pyrmq/acl/permission.py."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import rmqcore
from pyrmq.broker.pop import InvalidReceiptHandle, Popped, PopService
from pyrmq.broker.pop.receipt import decode as decode_receipt
from pyrmq.broker.processor.headers import header_int, header_str
from pyrmq.broker.subscription_group import SubscriptionGroupConfig, check_group_name
from pyrmq.common.errors import (
    BrokerSystemError,
    InvalidParameterError,
    NoMessageError,
    NoPermissionError,
    PollingFullError,
    SubscriptionGroupNotExistError,
    TopicNotExistError,
)
from pyrmq.common.message import PROPERTY_POP_CK
from pyrmq.common.subscription import SubscriptionData
from pyrmq.common.topics import retry_topic
from pyrmq.remoting import RemotingCommand, RemotingServer, RequestCode, ResponseCode
from pyrmq.remoting.connection import Connection, HandlerResult, RequestHandler

if TYPE_CHECKING:
    from pyrmq.broker.offset_manager import ConsumerOffsetManager
    from pyrmq.broker.subscription_group import SubscriptionGroupManager
    from pyrmq.broker.topic_config import TopicConfig, TopicConfigManager
    from pyrmq.storage import MessageStore

#: the most messages one pop takes (RocketMQ refuses more than 32)
MAX_BATCH = 32
#: the longest hold a pop may ask (RocketMQ 5 proxy's longest long polling)
MAX_POLL_MS = 20_000
#: pops held per connection; past it a pop that finds nothing is answered
#: POLLING_FULL at once, so a client cannot grow the broker's memory
MAX_HELD_PER_CONNECTION = 4096
#: the revive log has one queue (RocketMQ's reviveQid)
REVIVE_QID = "0"
_HELD = "held_pops"


@dataclass(slots=True)
class _PopRequest:
    cmd: RemotingCommand
    group: str
    topic: str
    queue_id: int
    sub: SubscriptionData
    batch: int
    invisible_ms: int


class PopMessageProcessor:
    """The broker side of RocketMQ 5's proxy-to-broker POP requests (the
    Java PopMessageProcessor, AckMessageProcessor and
    ChangeInvisibleTimeProcessor, and two of AdminBrokerProcessor's reads)."""

    def __init__(
        self,
        pop: PopService,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        *,
        broker_name: str,
        send_back: RequestHandler,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pop = pop
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.broker_name = broker_name
        #: CONSUMER_SEND_MSG_BACK without extraInfo (the 4.x send-back)
        self._send_back = send_back
        self._clock = clock

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.POP_MESSAGE, self.pop_message)
        server.register(RequestCode.ACK_MESSAGE, self.ack_message)
        server.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible_time)
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)
        server.register(RequestCode.GET_TOPIC_CONFIG, self.topic_config)
        server.register(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, self.subscription_group_config)

    # -- checks shared by the requests --------------------------------------------------

    def _service(self) -> PopService:
        if not self.pop.running:
            raise NoPermissionError(
                f"broker {self.broker_name} is a slave now: POP is served by its master"
            )
        return self.pop

    def _group(self, name: str) -> SubscriptionGroupConfig:
        check_group_name(name)
        sgc = self.groups.find(name)
        if sgc is None:
            raise SubscriptionGroupNotExistError(
                f"subscription group [{name}] does not exist (autoCreateSubscriptionGroup is "
                "off: create it with updateSubGroup)"
            )
        if not sgc.consume_enable:
            raise NoPermissionError(f"subscription group no permission, {name}")
        return sgc

    def _topic(self, name: str) -> TopicConfig:
        tc = self.topics.get(name)
        if tc is None:
            raise TopicNotExistError(f"topic[{name}] not exist, apply first please!")
        return tc

    def _invisible(self, ms: int) -> None:
        try:
            self.pop.check_invisible(ms)
        except ValueError as e:
            raise InvalidParameterError(f"invisibleTime: {e}") from None

    def _check_position(self, cmd: RemotingCommand, handle: str) -> None:
        """queueId and offset, when the request gives them (not negative),
        are the handle's."""
        f = cmd.ext_fields
        qid = header_int(f, "queueId", -1, code=cmd.code, bits=32)
        offset = header_int(f, "offset", -1, code=cmd.code)
        try:
            rc = decode_receipt(handle)
        except InvalidReceiptHandle as e:
            raise NoMessageError(str(e)) from None
        if (qid >= 0 and qid != rc.queue_id) or (offset >= 0 and offset != rc.offset):
            raise NoMessageError(
                f"the receipt handle names queue {rc.queue_id} offset {rc.offset}, not queue "
                f"{f.get('queueId')} offset {f.get('offset')}"
            )

    # -- POP_MESSAGE ----------------------------------------------------------------------

    def pop_message(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        f = cmd.ext_fields
        code = cmd.code
        group = header_str(f, "consumerGroup", code)
        topic = header_str(f, "topic", code)
        queue_id = header_int(f, "queueId", code=code, bits=32)
        batch = header_int(f, "maxMsgNums", code=code, bits=32)
        invisible = header_int(f, "invisibleTime", code=code)
        poll_ms = header_int(f, "pollTime", code=code)
        header_int(f, "bornTime", 0, code=code)
        header_int(f, "initMode", 0, code=code, bits=32)
        if not 1 <= batch <= MAX_BATCH:
            raise InvalidParameterError(f"maxMsgNums={batch} is out of range [1, {MAX_BATCH}]")
        if not 0 <= poll_ms <= MAX_POLL_MS:
            raise InvalidParameterError(f"pollTime={poll_ms} ms is out of range [0, {MAX_POLL_MS}]")
        self._invisible(invisible)
        pop = self._service()
        tc = self._topic(topic)
        if not tc.readable:
            raise NoPermissionError(f"the topic[{topic}] peeking message is forbidden")
        if not -1 <= queue_id < tc.read_queue_nums:
            raise BrokerSystemError(
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}]"
            )
        self._group(group)
        sub = SubscriptionData.parse(topic, f.get("exp") or "*", 0, f.get("expType") or "TAG")
        req = _PopRequest(cmd, group, topic, queue_id, sub, batch, invisible)
        popped = self._take(pop, req)
        if popped or poll_ms == 0:
            return self._answer(req, popped)
        held = conn.attrs.get(_HELD, 0)
        if held >= MAX_HELD_PER_CONNECTION:
            raise PollingFullError(
                f"{held} pops are held on this connection already (at most "
                f"{MAX_HELD_PER_CONNECTION})"
            )
        conn.attrs[_HELD] = held + 1
        return self._hold(conn, req, poll_ms / 1000)

    def _take(self, pop: PopService, req: _PopRequest) -> list[Popped]:
        return pop.pop(req.group, req.topic, req.sub, req.batch, req.invisible_ms, req.queue_id)

    async def _hold(self, conn: Connection, req: _PopRequest, wait: float) -> RemotingCommand:
        """The long polling loop: pop again at each arrival in the topic or
        the group's retry topic, until something is found or wait passes."""
        deadline = self._clock() + wait
        topics = [req.topic, retry_topic(req.group)]
        try:
            while True:
                left = deadline - self._clock()
                if left <= 0:
                    return self._answer(req, [])
                await self.pop.wait_arrival(topics, left)
                popped = self._take(self._service(), req)
                if popped:
                    return self._answer(req, popped)
        finally:
            conn.attrs[_HELD] = conn.attrs.get(_HELD, 1) - 1

    def _answer(self, req: _PopRequest, popped: list[Popped]) -> RemotingCommand:
        starts: dict[tuple[int, int], list[int]] = {}
        for p in popped:
            rc = decode_receipt(p.handle)
            starts.setdefault((int(rc.retry), rc.queue_id), []).append(rc.offset)
        ext = {
            "popTime": str(
                decode_receipt(popped[0].handle).pop_time if popped else int(time.time() * 1000)
            ),
            "invisibleTime": str(req.invisible_ms),
            "reviveQid": REVIVE_QID,
            "restNum": str(self._rest(req)),
            "startOffsetInfo": ";".join(f"{r} {q} {offs[0]}" for (r, q), offs in starts.items()),
            "msgOffsetInfo": ";".join(
                f"{r} {q} {','.join(map(str, offs))}" for (r, q), offs in starts.items()
            ),
        }
        if not popped:
            return req.cmd.response(
                ResponseCode.POLLING_TIMEOUT,
                ext,
                remark=f"no message for group {req.group} in topic {req.topic} within pollTime",
            )
        body = b"".join(self._record(p) for p in popped)
        return req.cmd.response(ResponseCode.SUCCESS, ext, body=body)

    def _record(self, p: Popped) -> bytes:
        """A popped message as a pull body carries it, with POP_CK and the
        topic the consumer sees."""
        m = p.message
        raw = self.store.read([(m.commit_log_offset, m.store_size)])
        extra = rmqcore.encode_properties({PROPERTY_POP_CK: p.handle})
        return rmqcore.record_with_topic(raw, p.topic, m.queue_id, extra)

    def _rest(self, req: _PopRequest) -> int:
        rest = 0
        for t in (req.topic, retry_topic(req.group)):
            tc = self.topics.get(t)
            if tc is None:
                continue
            qids = (
                [req.queue_id]
                if req.queue_id >= 0 and t == req.topic
                else range(tc.read_queue_nums)
            )
            for q in qids:
                low = max(self.offsets.query_offset(req.group, t, q), 0)
                low = max(low, self.store.min_offset_in_queue(t, q))
                rest += max(0, self.store.max_offset_in_queue(t, q) - low)
        return rest

    # -- ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, the POP send-back ---------------------

    def _handle_request(
        self, cmd: RemotingCommand, group_key: str, topic_key: str, position: bool = True
    ) -> tuple[PopService, str, str, str]:
        """The service, group, topic and handle of a request naming a popped
        message; position: check its queueId and offset (a send-back's offset
        is the message's CommitLog offset, not read)."""
        f = cmd.ext_fields
        group = header_str(f, group_key, cmd.code)
        topic = header_str(f, topic_key, cmd.code)
        handle = header_str(f, "extraInfo", cmd.code)
        pop = self._service()
        self._group(group)
        self._topic(topic)
        if position:
            self._check_position(cmd, handle)
        return pop, group, topic, handle

    def ack_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        pop, group, topic, handle = self._handle_request(cmd, "consumerGroup", "topic")
        try:
            pop.ack(group, topic, handle)
        except InvalidReceiptHandle as e:
            raise NoMessageError(str(e)) from None
        return cmd.response(ResponseCode.SUCCESS)

    def change_invisible_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        invisible = header_int(cmd.ext_fields, "invisibleTime", code=cmd.code)
        self._invisible(invisible)
        pop, group, topic, handle = self._handle_request(cmd, "consumerGroup", "topic")
        try:
            new = pop.change_invisible(group, topic, handle, invisible)
        except InvalidReceiptHandle as e:
            raise NoMessageError(str(e)) from None
        ext = {
            "popTime": str(decode_receipt(new).pop_time),
            "reviveQid": REVIVE_QID,
            "invisibleTime": str(invisible),
            "extraInfo": new,
        }
        return cmd.response(ResponseCode.SUCCESS, ext)

    def send_back(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """CONSUMER_SEND_MSG_BACK: with extraInfo, a popped message into
        %DLQ%<group> and acked (RocketMQ 5 proxy's
        ForwardMessageToDeadLetterQueue); without, the 4.x send-back."""
        if not cmd.ext_fields.get("extraInfo"):
            return self._send_back(conn, cmd)
        level = header_int(cmd.ext_fields, "delayLevel", -1, code=cmd.code, bits=32)
        if level != -1:
            raise InvalidParameterError(
                f"delayLevel={level} with extraInfo: a popped message is only sent back to the "
                "dead letter queue (delayLevel -1); change its invisible time to retry it"
            )
        pop, group, topic, handle = self._handle_request(cmd, "group", "originTopic", False)
        try:
            pop.dead_letter(group, topic, handle)
        except InvalidReceiptHandle as e:
            raise NoMessageError(str(e)) from None
        return cmd.response(ResponseCode.SUCCESS)

    # -- GET_TOPIC_CONFIG, GET_SUBSCRIPTIONGROUP_CONFIG -----------------------------------

    def topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = header_str(cmd.ext_fields, "topic", cmd.code)
        tc = self.topics.get(topic)
        if tc is None:
            raise TopicNotExistError(f"No topic in this broker. topic: {topic}")
        return cmd.response(ResponseCode.SUCCESS, body=_json(tc.as_json()))

    def subscription_group_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = header_str(cmd.ext_fields, "group", cmd.code)
        sgc = self.groups.find(group)
        if sgc is None:
            raise SubscriptionGroupNotExistError(
                f"subscription group [{group}] does not exist in this broker "
                "(autoCreateSubscriptionGroup is off)"
            )
        return cmd.response(ResponseCode.SUCCESS, body=_json(sgc.as_json()))


def _json(doc: object) -> bytes:
    return json.dumps(doc).encode()


__all__ = ["MAX_BATCH", "MAX_POLL_MS", "PROPERTY_POP_CK", "PopMessageProcessor"]
