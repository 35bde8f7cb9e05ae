"""rmqcore.record_with_topic against the oracle: a stored record copied
under another topic and queue id, with properties appended (a transaction
check-back, a POP answer's POP_CK), every other field as stored."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rmqcore
from tests.formats import reference as ref
from tests.formats.test_record_format import SETTINGS, hosts, messages, properties, topics


def _fields(msg: dict, store_host: bytes, props: bytes) -> dict:
    return dict(
        queue_id=msg["qid"],
        flag=msg["flag"],
        queue_offset=7,
        phys_offset=1234,
        sysflag=msg["sysflag"],
        born_timestamp=msg["born_timestamp"],
        born_host=msg["born_host"],
        store_timestamp=99,
        store_host=store_host,
        reconsume_times=msg["reconsume_times"],
        prepared_tx_offset=msg["prepared_tx_offset"],
        body=msg["body"],
        topic=msg["topic"].encode(),
        properties=props,
    )


@SETTINGS
@given(
    m=messages(max_body=512, max_size=1),
    store_host=hosts,
    topic=topics,
    qid=st.integers(0, 2**31 - 1),
    v2=st.booleans(),
    extra=properties(),
    drop_last_sep=st.booleans(),
)
def test_record_with_topic_agrees(
    m: list[dict], store_host: bytes, topic: str, qid: int, v2: bool, extra: dict,
    drop_last_sep: bool,
) -> None:  # fmt: skip
    (msg,) = m
    props = rmqcore.encode_properties(msg["props"])
    if drop_last_sep and props:
        props = props[:-1]  # a writer may leave the last separator out
    record = ref.encode_record(
        _fields(msg, store_host, props), ref.MAGIC_V2 if v2 else ref.MAGIC_V1
    )
    extra_b = rmqcore.encode_properties(extra)
    copy = rmqcore.record_with_topic(record, topic, qid, extra_b)
    out, was = ref.decode_record(copy), ref.decode_record(record)
    assert out is not None and was is not None
    sep = b"\x02" if extra_b and props and not props.endswith(b"\x02") else b""
    assert out.pop("properties") == was.pop("properties") + sep + extra_b
    assert out.pop("topic") == topic.encode() and out.pop("queue_id") == qid
    assert out.pop("total_size") == len(copy)
    for k in ("topic", "queue_id", "total_size"):
        was.pop(k)
    assert out == was  # every other field as stored, the magic kept
    # without extra properties, the record's own are kept byte for byte
    plain = ref.decode_record(rmqcore.record_with_topic(record, topic, qid))
    assert plain is not None and plain["properties"] == props


def test_record_with_topic_refuses_oversized_properties() -> None:
    msg = dict(qid=0, flag=0, sysflag=0, born_timestamp=0, born_host=bytes(8),
               reconsume_times=0, prepared_tx_offset=0, body=b"x", topic="T")  # fmt: skip
    record = ref.encode_record(_fields(msg, bytes(8), b"K\x01" + b"v" * 32000 + b"\x02"))
    with pytest.raises(ValueError, match="32767"):
        rmqcore.record_with_topic(record, "T", 0, b"POP_CK\x01" + b"h" * 1000 + b"\x02")
