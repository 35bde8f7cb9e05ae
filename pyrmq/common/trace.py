"""Message trace records, in RocketMQ's format (TraceDataEncoder), so its
tools (mqadmin queryMsgTraceById, the dashboard) read pyrmq's and pyrmq
reads theirs.

A trace message is an ordinary message in the trace topic
(``RMQ_SYS_TRACE_TOPIC`` unless a custom one is set): its body is one or
more records back to back, each ending with FIELD_SPLITOR (0x02), its fields
separated by CONTENT_SPLITOR (0x01), as text; its KEYS are the traced
messages' ids and keys (space-separated), so a lookup by message id finds
it. Records:

- ``Pub`` (a send): type, timestamp (ms, when the send began), regionId,
  producer group, topic, msgId (UNIQ_KEY), tags, keys, storeHost (the
  broker's ip:port), body length, cost (ms), message type (0 normal, 1
  transactional half, 2 transactional commit, 3 delayed), offsetMsgId,
  success (``true``/``false``);
- ``SubBefore`` (a delivery to a consumer group, one per message): type,
  timestamp, regionId, consumer group, requestId (one id per listener
  call), msgId, reconsume times, keys;
- ``SubAfter`` (its outcome): type, requestId, msgId, cost (ms per message
  of the call), success, keys, context code (0 success, 1 time out, 2
  exception, 3 returned null, 4 failed), timestamp;
- ``EndTransaction``: type, timestamp, regionId, group, topic, msgId, tags,
  keys, storeHost, message type, transactionId, state
  (``COMMIT_MESSAGE``/``ROLLBACK_MESSAGE``/``UNKNOW``), from a check.

An empty field is the text ``null`` where Java writes a missing value.

Pub records are written in C (rmqcore/_trace.pyx: ``encode_pub``, and
``TraceBuffer``, which a traced producer appends to as each send is
answered), the others here; ``decode`` reads them all."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from pyrmq.common.message import (
    PROPERTY_KEYS,
    PROPERTY_MSG_REGION,
    PROPERTY_TRACE_SWITCH,
    MessageExt,
    new_unique_id,
)
from rmqcore import encode_pub

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: the producer group of a client's trace sends: this, "-", the traced group
TRACE_PRODUCER_GROUP_PREFIX = "_INNER_TRACE_PRODUCER"
DEFAULT_REGION = "DefaultRegion"

#: MessageType ordinals
NORMAL_MSG, TRANS_MSG_HALF, TRANS_MSG_COMMIT, DELAY_MSG = 0, 1, 2, 3
#: ConsumeReturnType ordinals (SubAfter's context code)
CONSUME_SUCCESS, CONSUME_TIME_OUT, CONSUME_EXCEPTION, CONSUME_RETURN_NULL, CONSUME_FAILED = range(5)


def _text(v: object) -> str:
    if v is None or v == "":
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@dataclasses.dataclass(slots=True)
class TraceRecord:
    """One trace record; which fields are set depends on `type`."""

    type: str
    msg_id: str
    timestamp: int = 0
    region_id: str = DEFAULT_REGION
    group: str = ""
    topic: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    body_length: int = 0
    cost_ms: int = 0
    msg_type: int = NORMAL_MSG
    offset_msg_id: str = ""
    success: bool = True
    request_id: str = ""
    retry_times: int = 0
    context_code: int = CONSUME_SUCCESS
    transaction_id: str = ""
    transaction_state: str = ""
    from_check: bool = False
    #: of the trace message that carried it (not in the record): the
    #: client that wrote it
    client_host: str = ""

    def encode(self) -> str:
        """The record as RocketMQ's TraceDataEncoder writes it."""
        t = self.type
        if t == "Pub":
            return encode_pub(
                self.timestamp, self.region_id, self.group, self.topic, self.msg_id, self.tags,
                self.keys, self.store_host, self.body_length, self.cost_ms, self.msg_type,
                self.offset_msg_id, self.success,
            )  # fmt: skip
        fields: tuple[object, ...]
        if t == "SubBefore":
            fields = (
                t, self.timestamp, self.region_id, self.group, self.request_id, self.msg_id,
                self.retry_times, self.keys,
            )  # fmt: skip
        elif t == "SubAfter":
            fields = (
                t, self.request_id, self.msg_id, self.cost_ms, self.success, self.keys,
                self.context_code, self.timestamp,
            )  # fmt: skip
        elif t == "EndTransaction":
            fields = (
                t, self.timestamp, self.region_id, self.group, self.topic, self.msg_id,
                self.tags, self.keys, self.store_host, self.msg_type, self.transaction_id,
                self.transaction_state, self.from_check,
            )  # fmt: skip
        else:
            raise ValueError(f"unknown trace type {t!r}")
        return CONTENT_SPLITOR.join(_text(f) for f in fields) + FIELD_SPLITOR

    def trace_keys(self) -> list[str]:
        """What the trace message's KEYS carry for this record."""
        return [k for k in (self.msg_id, self.keys) if k]


def _int(s: str) -> int:
    try:
        return int(s)
    except ValueError:
        return 0


def _str(s: str) -> str:
    return "" if s == "null" else s


def decode(data: str) -> list[TraceRecord]:
    """The records of a trace message's body; unknown or short ones are
    skipped (RocketMQ's decoder reads several versions of each)."""
    out = []
    for item in data.split(FIELD_SPLITOR):
        f = item.split(CONTENT_SPLITOR)
        t = f[0]
        try:
            if t == "Pub" and len(f) >= 13:
                out.append(TraceRecord(
                    t, _str(f[5]), _int(f[1]), _str(f[2]), _str(f[3]), _str(f[4]), _str(f[6]),
                    _str(f[7]), _str(f[8]), _int(f[9]), _int(f[10]), _int(f[11]),
                    offset_msg_id=_str(f[12]) if len(f) >= 14 else "",
                    success=(f[13] if len(f) >= 14 else f[12]) == "true",
                ))  # fmt: skip
            elif t == "SubBefore" and len(f) >= 8:
                out.append(TraceRecord(
                    t, _str(f[5]), _int(f[1]), _str(f[2]), _str(f[3]), request_id=_str(f[4]),
                    retry_times=_int(f[6]), keys=_str(f[7]),
                ))  # fmt: skip
            elif t == "SubAfter" and len(f) >= 6:
                out.append(TraceRecord(
                    t, _str(f[2]), _int(f[7]) if len(f) >= 8 else 0, request_id=_str(f[1]),
                    cost_ms=_int(f[3]), success=f[4] == "true", keys=_str(f[5]),
                    context_code=_int(f[6]) if len(f) >= 7 else CONSUME_SUCCESS,
                ))  # fmt: skip
            elif t == "EndTransaction" and len(f) >= 13:
                out.append(TraceRecord(
                    t, _str(f[5]), _int(f[1]), _str(f[2]), _str(f[3]), _str(f[4]), _str(f[6]),
                    _str(f[7]), _str(f[8]), msg_type=_int(f[9]), transaction_id=_str(f[10]),
                    transaction_state=_str(f[11]), from_check=f[12] == "true",
                ))  # fmt: skip
        except IndexError:
            continue
    return out


def sub_before(group: str, msgs: Sequence[MessageExt]) -> list[TraceRecord]:
    """SubBefore records of one listener call (one request id), for the
    messages whose sender did not switch tracing off (TRACE_ON=false)."""
    request_id = new_unique_id()
    now = int(time.time() * 1000)
    return [
        TraceRecord(
            "SubBefore",
            m.msg_id,
            now,
            m.properties.get(PROPERTY_MSG_REGION) or DEFAULT_REGION,
            group,
            m.topic,
            keys=m.properties.get(PROPERTY_KEYS, ""),
            request_id=request_id,
            retry_times=m.reconsume_times,
        )
        for m in msgs
        if m.properties.get(PROPERTY_TRACE_SWITCH) != "false"
    ]


def sub_after(before: list[TraceRecord], success: bool, code: int) -> list[TraceRecord]:
    """The SubAfter records matching `before`: the call's outcome, its time
    per message."""
    if not before:
        return []
    now = int(time.time() * 1000)
    cost = (now - before[0].timestamp) // len(before)
    return [
        TraceRecord(
            "SubAfter",
            b.msg_id,
            now,
            b.region_id,
            b.group,
            keys=b.keys,
            cost_ms=cost,
            success=success,
            request_id=b.request_id,
            context_code=code,
        )
        for b in before
    ]
