"""A 5.x message and the 4.x message it is stored as, both ways.

What goes where (RocketMQ 5's proxy stores the same):

==========================================  ==================================
gRPC ``Message``                            4.x stored message
==========================================  ==================================
``topic.name``                              topic
``body`` (``body_encoding`` GZIP: zlib)     body (sysFlag COMPRESSED)
``user_properties``                         properties, as they are
``system_properties.tag``                   property TAGS
``system_properties.keys``                  property KEYS (space-joined)
``system_properties.message_id``            property UNIQ_KEY (the msgId)
``message_type`` TRANSACTION                TRAN_MSG=true, PGROUP=<topic>
``orphaned_transaction_recovery_duration``  CHECK_IMMUNITY_TIME_IN_SECONDS
``delivery_timestamp``                      TIMER_DELIVER_MS (ms)
``message_group``                           __SHARDINGKEY
``trace_context``                           TRACE_CONTEXT
``born_host`` / ``born_timestamp``          __BORNHOST / BORN_TIMESTAMP
``delivery_attempt``                        the record's reconsumeTimes
==========================================  ==================================

A transactional message's producer group is its topic: 5.x producers have
no group, so the check-back asks a producer that publishes the topic (as
RocketMQ 5's proxy does)."""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Any

import rmqcore
from pyrmq.common.message import (
    KEY_SEPARATOR,
    PROPERTY_BORN_HOST,
    PROPERTY_BORN_TIMESTAMP,
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRACE_CONTEXT,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SYSFLAG_COMPRESSED,
    SYSTEM_PROPERTIES,
    MessageExt,
    decode_messages,
    decode_offset_msg_id,
)
from pyrmq.proxy.errors import ProxyError
from pyrmq.proxy.protocol import OK, pb, set_timestamp_ms, status, timestamp_ms
from pyrmq.remoting import RemotingCommand

#: sysFlag of a transaction's half message (TRANSACTION_PREPARED_TYPE)
SYSFLAG_TRANSACTION_PREPARED = 0x4

#: RocketMQ 5 proxy's limits (ProxyConfig): userPropertyMaxNum,
#: maxUserPropertySize, maxMessageGroupSize
USER_PROPERTY_MAX_NUM = 128
MAX_USER_PROPERTY_SIZE = 16 * 1024
MAX_MESSAGE_GROUP_SIZE = 64

#: the 4.x names a user property may not take, beyond SYSTEM_PROPERTIES
_ALSO_RESERVED = frozenset({"TAGS", "KEYS", "DELAY", "WAIT", "RETRY_TOPIC", "REAL_TOPIC"})


@dataclass(slots=True)
class Outgoing:
    """One 5.x message as a SEND_MESSAGE request wants it."""

    topic: str
    body: bytes
    properties: dict[str, str]
    sys_flag: int
    born_timestamp: int
    reconsume_times: int
    message_id: str
    message_type: int
    message_group: str


def _has_control(s: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in s)


def outgoing(msg: Any, *, max_body: int, max_delay_ms: int) -> Outgoing:
    """The 4.x message a gRPC Message is stored as; ProxyError (with the 5.x
    code RocketMQ's proxy answers) when it cannot be."""
    sp = msg.system_properties
    topic = msg.topic.name
    body = bytes(msg.body)
    if not body:
        raise ProxyError(pb.Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(body) > max_body:
        raise ProxyError(
            pb.Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {max_body}"
        )
    user = dict(msg.user_properties)
    if len(user) > USER_PROPERTY_MAX_NUM:
        raise ProxyError(
            pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"too many user properties, max is {USER_PROPERTY_MAX_NUM}",
        )
    size = 0
    for k, v in user.items():
        if k in SYSTEM_PROPERTIES or k in _ALSO_RESERVED:
            raise ProxyError(
                pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {k}"
            )
        if not k or _has_control(k) or _has_control(v):
            raise ProxyError(
                pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                "the key and value of a property cannot be empty or hold control characters",
            )
        size += len(k.encode()) + len(v.encode())
    props = user
    if sp.HasField("tag"):
        tag = sp.tag
        if not tag.strip() or "|" in tag or _has_control(tag):
            raise ProxyError(
                pb.Code.ILLEGAL_MESSAGE_TAG,
                "tag cannot be blank, nor hold '|' or control characters",
            )
        props[PROPERTY_TAGS] = tag
        size += len(tag.encode())
    if sp.keys:
        for key in sp.keys:
            if not key.strip() or _has_control(key):
                raise ProxyError(
                    pb.Code.ILLEGAL_MESSAGE_KEY,
                    "key cannot be blank nor hold control characters",
                )
            size += len(key.encode())
        props[PROPERTY_KEYS] = KEY_SEPARATOR.join(sp.keys)
    if size > MAX_USER_PROPERTY_SIZE:
        raise ProxyError(
            pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"the total size of user property is too large, max is {MAX_USER_PROPERTY_SIZE}",
        )
    if not sp.message_id.strip():
        raise ProxyError(pb.Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
    sys_flag = 0
    if sp.body_encoding == pb.GZIP:
        sys_flag |= SYSFLAG_COMPRESSED
    mtype = sp.message_type
    if mtype == pb.TRANSACTION:
        sys_flag |= SYSFLAG_TRANSACTION_PREPARED
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            secs = sp.orphaned_transaction_recovery_duration.seconds
            if secs < 0:
                raise ProxyError(
                    pb.Code.BAD_REQUEST, "orphaned_transaction_recovery_duration is negative"
                )
            props[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(secs)
    if sp.HasField("delivery_timestamp"):
        due = timestamp_ms(sp.delivery_timestamp)
        if due - time.time() * 1000 > max_delay_ms:
            raise ProxyError(
                pb.Code.ILLEGAL_DELIVERY_TIME,
                f"the max delay time of message is too large, max is {max_delay_ms}",
            )
        props[PROPERTY_TIMER_DELIVER_MS] = str(due)
    props[PROPERTY_PRODUCER_GROUP] = topic
    group = sp.message_group if sp.HasField("message_group") else ""
    if group:
        if not group.strip() or _has_control(group):
            raise ProxyError(
                pb.Code.ILLEGAL_MESSAGE_GROUP,
                "message group cannot be blank nor hold control characters",
            )
        if len(group.encode()) >= MAX_MESSAGE_GROUP_SIZE:
            raise ProxyError(
                pb.Code.ILLEGAL_MESSAGE_GROUP,
                f"message group exceed the max size {MAX_MESSAGE_GROUP_SIZE}",
            )
        props[PROPERTY_SHARDING_KEY] = group
    if sp.HasField("trace_context") and sp.trace_context:
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    if sp.born_host:
        props[PROPERTY_BORN_HOST] = sp.born_host
    born = timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
    if born > 0:
        props[PROPERTY_BORN_TIMESTAMP] = str(born)
    else:
        born = int(time.time() * 1000)
    attempt = sp.delivery_attempt if sp.HasField("delivery_attempt") else 0
    return Outgoing(
        topic=topic,
        body=body,
        properties=props,
        sys_flag=sys_flag,
        born_timestamp=born,
        reconsume_times=max(attempt, 0),
        message_id=sp.message_id,
        message_type=mtype,
        message_group=group,
    )


def send_header(out: Outgoing, queue_id: int) -> dict[str, str]:
    """The SEND_MESSAGE (10) request header for out."""
    return {
        "producerGroup": out.properties[PROPERTY_PRODUCER_GROUP],
        "topic": out.topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id),
        "sysFlag": str(out.sys_flag),
        "bornTimestamp": str(out.born_timestamp),
        "flag": "0",
        "properties": rmqcore.encode_properties(out.properties).decode(),
        "reconsumeTimes": str(out.reconsume_times),
    }


#: 4.x properties a 5.x Message carries as system properties (not user ones)
_AS_SYSTEM = frozenset(
    {
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        PROPERTY_SHARDING_KEY,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TRACE_CONTEXT,
        PROPERTY_BORN_HOST,
        PROPERTY_BORN_TIMESTAMP,
        PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    }
)


def incoming(m: MessageExt, *, topic: str | None = None) -> Any:
    """The gRPC Message a client receives for a stored message (its body
    already inflated: IDENTITY encoding)."""
    p = m.properties
    out = pb.Message()
    out.topic.name = topic or m.topic
    out.body = m.body
    for k, v in p.items():
        if k not in _AS_SYSTEM and k not in SYSTEM_PROPERTIES:
            out.user_properties[k] = v
    sp = out.system_properties
    if PROPERTY_TAGS in p:
        sp.tag = p[PROPERTY_TAGS]
    if p.get(PROPERTY_KEYS):
        sp.keys.extend(k for k in p[PROPERTY_KEYS].split(KEY_SEPARATOR) if k)
    sp.message_id = m.msg_id
    sp.body_encoding = pb.IDENTITY
    sp.body_digest.type = pb.CRC32
    sp.body_digest.checksum = f"{zlib.crc32(m.body):08X}"  # of the inflated body
    if PROPERTY_TRANSACTION_PREPARED in p:
        sp.message_type = pb.TRANSACTION
    elif PROPERTY_SHARDING_KEY in p:
        sp.message_type = pb.FIFO
        sp.message_group = p[PROPERTY_SHARDING_KEY]
    elif PROPERTY_TIMER_DELIVER_MS in p:
        sp.message_type = pb.DELAY
    else:
        sp.message_type = pb.NORMAL
    born_ms = int(p.get(PROPERTY_BORN_TIMESTAMP) or m.born_timestamp)
    set_timestamp_ms(sp.born_timestamp, born_ms)
    sp.born_host = p.get(PROPERTY_BORN_HOST) or m.born_host.rpartition(":")[0]
    set_timestamp_ms(sp.store_timestamp, m.store_timestamp)
    sp.store_host = m.store_host
    due = p.get(PROPERTY_TIMER_DELIVER_MS)
    if due:
        set_timestamp_ms(sp.delivery_timestamp, int(due))
    sp.queue_id = m.queue_id
    sp.queue_offset = m.queue_offset
    sp.delivery_attempt = m.reconsume_times + 1
    if PROPERTY_TRACE_CONTEXT in p:
        sp.trace_context = p[PROPERTY_TRACE_CONTEXT]
    return out


def transaction_id(send_answer: dict[str, str]) -> str:
    """What a 5.x client keeps to end its transaction: the half message's
    CommitLog offset, its half-queue offset and its offset id (the send
    answer's msgId), as ``<clog hex>-<table hex>-<offsetMsgId>``."""
    msg_id = send_answer.get("msgId", "")
    _, clog = decode_offset_msg_id(msg_id)
    table = int(send_answer.get("queueOffset", 0))
    return f"{clog:x}-{table:x}-{msg_id}"


def parse_transaction_id(tid: str) -> tuple[int, int, str]:
    parts = tid.split("-", 2)
    try:
        if len(parts) != 3:
            raise ValueError
        return int(parts[0], 16), int(parts[1], 16), parts[2]
    except ValueError:
        raise ProxyError(
            pb.Code.INVALID_TRANSACTION_ID, f"transaction id {tid!r} was not given by this proxy"
        ) from None


def check_command(cmd: RemotingCommand) -> Any:
    """CHECK_TRANSACTION_STATE as the 5.x client's
    RecoverOrphanedTransactionCommand (the half message and its id)."""
    msgs = decode_messages(cmd.body)
    if not msgs:
        raise ValueError("a check without its message")
    m = msgs[0]
    f = cmd.ext_fields
    tid = f"{int(f['commitLogOffset']):x}-{int(f['tranStateTableOffset']):x}-{f['offsetMsgId']}"
    msg = incoming(m)
    msg.system_properties.message_type = pb.TRANSACTION
    return pb.TelemetryCommand(
        status=status(OK),
        recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
            message=msg, transaction_id=tid
        ),
    )
