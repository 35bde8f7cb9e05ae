"""A producer's send request (SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE): the
frame its first attempts build without a command object
(MQClientAPI.send_frame) is byte for byte the frame of the command its
hooked and retried sends build (send_command(...).encode()); its header
(rmqcore.send_request_fields, filled by Producer._fields) carries the
fields the broker reads (V2_FIELDS), under SendMessageRequestHeaderV2's
letters, in the order the Java client writes them."""

from __future__ import annotations

import json
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

import rmqcore
from pyrmq.broker.processor.send import V2_FIELDS
from pyrmq.client.api import MQClientAPI
from pyrmq.common.message import SYSFLAG_COMPRESSED, Message, MessageQueue
from pyrmq.producer import Producer
from pyrmq.producer.prepare import make_job
from pyrmq.remoting.command import decode_frame

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
i32 = st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=300, deadline=None)
@given(
    opaque=st.integers(0, 2**31 - 1),
    topic=text,
    broker=text,
    queue_id=i32,
    body=st.binary(max_size=64),
    props=text,
    group=text,
    sys_flag=i32,
    born=st.integers(0, 2**63 - 1),
    flag=i32,
    batch=st.booleans(),
    queue_nums=st.integers(-(2**31), 2**31 - 1),
)
def test_send_frame_is_the_commands_frame(
    opaque, topic, broker, queue_id, body, props, group, sys_flag, born, flag, batch, queue_nums
):
    fields = rmqcore.send_request_fields(
        group, topic, "TBW102", queue_nums, queue_id, sys_flag, born, flag, props, batch, broker
    )
    cmd = MQClientAPI.send_command(batch, fields, body)
    cmd.opaque = opaque
    frame = MQClientAPI.send_frame(opaque, batch, fields, body)
    assert frame == cmd.encode()

    # what the broker reads of it, by SEND_MESSAGE's names
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    got = decode_frame(frame[4:])
    assert got.code == (320 if batch else 310)
    assert (got.opaque, got.flag, got.language, got.body) == (opaque, 0, "PYTHON", body)
    ext = got.ext_fields
    assert list(ext) == list("abcdefghijkmn")
    assert {V2_FIELDS[k]: v for k, v in ext.items()} == {
        "producerGroup": group,
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": str(queue_nums),
        "queueId": str(queue_id),
        "sysFlag": str(sys_flag),
        "bornTimestamp": str(born),
        "flag": str(flag),
        "properties": props,
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "true" if batch else "false",
        "brokerName": broker,
    }
    # and a JSON parser agrees on the header
    hlen = struct.unpack(">I", frame[4:8])[0] & 0xFFFFFF
    assert json.loads(frame[8 : 8 + hlen])["extFields"] == ext


def test_a_producers_job_fills_the_fields_from_its_message_and_queue():
    """Producer._fields: the group and default queue count are the
    producer's, topic, queue id and broker name the target queue's, sysFlag,
    flag and the encoded properties the job's."""
    p = Producer("fields-group", "127.0.0.1:1", default_topic_queue_nums=8)
    msg = Message("FieldsT", b"x" * 300, tags="t1", flag=5)
    job = make_job(msg, None, None, None, 4096, 100, rmqcore.Deflater(6).compress)
    target = MessageQueue("FieldsT", "broker-z", 3)
    fields = p._fields(job, target, 1_700_000_000_123)
    assert fields == {
        "a": "fields-group",
        "b": "FieldsT",
        "c": "TBW102",
        "d": "8",
        "e": "3",
        "f": str(SYSFLAG_COMPRESSED),  # 300 B over compress_over 100
        "g": "1700000000123",
        "h": "5",
        "i": rmqcore.encode_properties(msg.properties).decode(),
        "j": "0",
        "k": "false",
        "m": "false",
        "n": "broker-z",
    }
    assert "UNIQ_KEY" in msg.properties and "TAGS" in msg.properties
