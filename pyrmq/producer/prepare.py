"""What a producer checks and encodes of a message before it picks a
queue: the SendJob every send path (awaited, async, oneway, batch) carries
to the wire."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import rmqcore
from pyrmq.client.api import DEFAULT_TOPIC
from pyrmq.common.errors import ClientError, StoreError
from pyrmq.common.message import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    SYSFLAG_COMPRESSED,
    Message,
    MessageQueue,
    new_unique_id,
)
from pyrmq.common.topics import RETRY_GROUP_TOPIC_PREFIX
from pyrmq.producer.selector import MessageQueueSelector


class SendJob(NamedTuple):
    """A prepared send: what goes on the wire and where it may go."""

    topic: str
    body: bytes
    props: str
    sys_flag: int
    uniq: str
    flag: int
    batch: bool
    msg: Message
    mq: MessageQueue | None
    selector: MessageQueueSelector | None
    arg: Any


def check_message(msg: Message, max_message_size: int) -> None:
    """ClientError (TypeError for what is not a Message) naming what a
    broker would refuse: a reserved or malformed topic, an empty or too
    large body."""
    if not isinstance(msg, Message):
        raise TypeError(f"expected a pyrmq.Message, got {type(msg).__name__}")
    if msg.topic == DEFAULT_TOPIC:
        raise ClientError(f"the topic {DEFAULT_TOPIC} is reserved for topic auto-creation")
    try:
        rmqcore.validate_topic(msg.topic)
    except StoreError as e:
        raise ClientError(
            f"topic {msg.topic!r} is not valid: {e} (1..127 characters of "
            "letters, digits, '%', '|', '_' and '-')"
        ) from None
    if not msg.body:
        raise ClientError("the message body is empty")
    if len(msg.body) > max_message_size:
        raise ClientError(
            f"the message body is {len(msg.body)} bytes; max_message_size is {max_message_size}"
        )


def prepare_batch(msgs: Sequence[Message], max_message_size: int) -> tuple[str, bytes, str]:
    """(topic, batch body, comma-joined unique ids) of a batch; the
    messages are checked and encoded in one pass in C."""
    if not msgs:
        raise ClientError("the batch is empty")
    check_message(msgs[0], max_message_size)
    topic = msgs[0].topic
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        raise ClientError("a batch cannot be sent to a %RETRY% topic")
    head, seq = new_unique_id.reserve(len(msgs))
    try:
        body, ids = rmqcore.encode_message_batch(
            list(msgs), topic, head, seq, max_message_size, Message
        )
    except ValueError as e:
        raise ClientError(str(e)) from None
    return topic, body, ids


#: SendJob from a tuple of its fields, in C (namedtuple's _make without its
#: Python-level frame; the generated __new__ is another): one per send
_job_of = tuple.__new__


def make_job(
    msg: Message | list[Message],
    mq: MessageQueue | None,
    selector: MessageQueueSelector | None,
    arg: Any,
    max_message_size: int,
    compress_over: int,
    deflate: Callable[[bytes], bytes],
    deflated: bool = False,
    checked: bool = False,
) -> SendJob:
    """The SendJob of one message, or of a batch (a list).

    One message gets its UNIQ_KEY here when it has none, and a body of at
    least compress_over bytes is compressed by `deflate` (a producer's
    rmqcore.Deflater: a zlib stream). A body `deflated` already (a zlib
    stream) is sent as it is, flagged COMPRESSED. Properties that cannot
    be encoded raise ClientError. `checked`: the caller ran check_message
    on it already (the auto-batcher, whose lone sends come here)."""
    if msg.__class__ is not Message and not isinstance(msg, Message):
        topic, body, ids = prepare_batch(msg, max_message_size)
        return _job_of(SendJob, (topic, body, "", 0, ids, 0, True, msg[0], mq, selector, arg))
    if not checked:
        check_message(msg, max_message_size)
    props = msg.properties
    uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if not uniq:
        uniq = new_unique_id()
        props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
    body = msg.body
    sys_flag = 0
    if deflated:
        sys_flag = SYSFLAG_COMPRESSED
    elif len(body) >= compress_over:
        body = deflate(body)
        sys_flag = SYSFLAG_COMPRESSED
    try:
        encoded = rmqcore.encode_properties(props).decode()
    except ValueError as e:  # a separator byte in a name or value, or too long
        raise ClientError(str(e)) from None
    return _job_of(
        SendJob,
        (
            msg.topic,
            body,
            encoded,
            sys_flag,
            uniq,
            msg.flag,
            False,
            msg,
            mq,
            selector,
            arg,
        ),
    )
