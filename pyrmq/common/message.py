"""Messages as clients see them: Message (what a producer sends), MessageExt
(a stored message with every field the CommitLog keeps), MessageQueue, the
property names (Java MessageConst) and message ids.

A pulled body is decoded by rmqcore, the same C that stored it (the record
layout is specified once, in csrc/rmq_format.h); this module only turns its
fields into objects."""

from __future__ import annotations

import itertools
import logging
import os
import random
import socket
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import rmqcore

log = logging.getLogger("pyrmq.client")

# -- property names (org.apache.rocketmq.common.message.MessageConst) ---------------
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_BUYER_ID = "BUYER_ID"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
#: a 5.x FIFO message's message group (MessageConst.PROPERTY_SHARDING_KEY)
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
#: when a timed message is due, ms since the epoch (5.x delivery_timestamp)
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
#: a timed message's delay in seconds from its store time
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
#: a timed message's due time as some 4.x clients set it
#: (MessageConst.PROPERTY_STARTDE_LIVER_TIME): never auto-batched
PROPERTY_START_DELIVER_TIME = "__STARTDELIVERTIME"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
#: RocketMQ 5: a POP-received message's ExtraInfo; pyrmq's broker sets it to the
#: receipt handle (pyrmq/broker/pop/receipt.py) in a POP_MESSAGE answer
PROPERTY_POP_CK = "POP_CK"
#: the sender's address as a 5.x client reports it (ip or ip:port)
PROPERTY_BORN_HOST = "__BORNHOST"
#: the 5.x client's born timestamp (ms), kept beside the record's own
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
#: a half message's first queue offset, on the copies a check puts back
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
KEY_SEPARATOR = " "

#: Names users may not set themselves (MessageConst.STRING_HASH_SET, the ones
#: the broker or client own).
SYSTEM_PROPERTIES = frozenset(
    {
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        PROPERTY_MIN_OFFSET,
        PROPERTY_MAX_OFFSET,
        PROPERTY_BUYER_ID,
        PROPERTY_ORIGIN_MESSAGE_ID,
        PROPERTY_RECONSUME_TIME,
        PROPERTY_MSG_REGION,
        PROPERTY_TRACE_SWITCH,
        PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        PROPERTY_MAX_RECONSUME_TIMES,
        PROPERTY_CONSUME_START_TIMESTAMP,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_TRANSACTION_CHECK_TIMES,
        PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
        PROPERTY_SHARDING_KEY,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TIMER_DELAY_SEC,
        PROPERTY_TRACE_CONTEXT,
        PROPERTY_BORN_HOST,
        PROPERTY_BORN_TIMESTAMP,
    }
)

SYSFLAG_COMPRESSED = rmqcore.SYSFLAG_COMPRESSED
#: Bodies at least this long are zlib-compressed by the producer
#: (compressMsgBodyOverHowmuch), as every RocketMQ client does.
COMPRESS_BODY_OVER = 4096
COMPRESS_LEVEL = 5


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker (MessageQueue). Ordered by
    (topic, broker_name, queue_id), as every client sorts them."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}#{self.queue_id}"


class Message:
    """A message to send. Tags, keys and the delay level live in
    `properties` under RocketMQ's names (TAGS, KEYS, DELAY), as in Java's
    Message; the attributes read and write them there.

    Message("T", b"body", tags="TagA", keys=["order-1"], delay_level=3)"""

    __slots__ = ("body", "flag", "properties", "topic")

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        delay_level: int = 0,
        flag: int = 0,
        wait_store_msg_ok: bool = True,
    ) -> None:
        if isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, bytes):
            body = bytes(body)
        self.topic = topic
        self.body: bytes = body
        self.flag = flag
        self.properties: dict[str, str] = {}
        if properties:
            for k, v in properties.items():
                if k in SYSTEM_PROPERTIES:
                    raise ValueError(
                        f"property {k!r} is reserved for RocketMQ itself; choose another name"
                    )
                self.properties[str(k)] = str(v)
        if tags:
            self.tags = tags
        if keys:
            self.keys = keys
        if delay_level:
            self.delay_level = delay_level
        if not wait_store_msg_ok:
            self.properties[PROPERTY_WAIT_STORE_MSG_OK] = "false"

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        if value:
            self.properties[PROPERTY_TAGS] = value
        else:
            self.properties.pop(PROPERTY_TAGS, None)

    @property
    def keys(self) -> list[str]:
        v = self.properties.get(PROPERTY_KEYS)
        return v.split(KEY_SEPARATOR) if v else []

    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None:
        if isinstance(value, str):
            value = [value]
        joined = KEY_SEPARATOR.join(k for k in value or () if k)
        if joined:
            self.properties[PROPERTY_KEYS] = joined
        else:
            self.properties.pop(PROPERTY_KEYS, None)

    @property
    def delay_level(self) -> int:
        v = self.properties.get(PROPERTY_DELAY_TIME_LEVEL)
        return int(v) if v and v.lstrip("-").isdigit() else 0

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        if level < 0:
            raise ValueError(f"delay_level must be 0 (none) or 1..18, not {level}")
        if level:
            self.properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        else:
            self.properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)

    @property
    def deliver_time_ms(self) -> int:
        """When a timed message is due, ms since the epoch (0: not timed):
        RocketMQ 5's Message.setDeliverTimeMs, the TIMER_DELIVER_MS
        property; the broker holds it until then (timerMaxDelaySec ahead at
        most)."""
        v = self.properties.get(PROPERTY_TIMER_DELIVER_MS)
        return int(v) if v and v.isdigit() else 0

    @deliver_time_ms.setter
    def deliver_time_ms(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"deliver_time_ms must be ms since the epoch (0: none), not {ms}")
        if ms:
            self.properties[PROPERTY_TIMER_DELIVER_MS] = str(int(ms))
        else:
            self.properties.pop(PROPERTY_TIMER_DELIVER_MS, None)

    @property
    def unique_key(self) -> str | None:
        """The client-made message id (UNIQ_KEY), set when the message is sent."""
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(topic={self.topic!r}, body={len(self.body)}B, "
            f"properties={self.properties})"
        )


class MessageExt(Message):
    """A stored message, as a consumer or a query receives it (MessageExt):
    every field of the CommitLog record, plus `msg_id` (the UNIQ_KEY, or the
    offset id when the sender set none) and the broker it came from. `body`
    is already inflated when the sender compressed it."""

    __slots__ = (
        "_born_host",
        "_store_host",
        "body_crc",
        "born_timestamp",
        "broker_name",
        "commit_log_offset",
        "prepared_transaction_offset",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "store_size",
        "store_timestamp",
        "sys_flag",
    )

    def __init__(self, rec: Mapping[str, Any], broker_name: str = "") -> None:
        body = rec["body"]
        sys_flag = rec["sys_flag"]
        if sys_flag & SYSFLAG_COMPRESSED:
            body = zlib.decompress(body)
        self.topic = rec["topic"]
        self.body = body
        self.flag = rec["flag"]
        self.properties = rmqcore.decode_properties(rec["properties"])
        self.sys_flag = sys_flag
        self.queue_id = rec["queue_id"]
        self.queue_offset = rec["queue_offset"]
        self.commit_log_offset = rec["commit_log_offset"]
        self.born_timestamp = rec["born_timestamp"]
        self._born_host: bytes | str = rec["born_host"]
        self.store_timestamp = rec["store_timestamp"]
        self._store_host: bytes | str = rec["store_host"]
        self.reconsume_times = rec["reconsume_times"]
        self.prepared_transaction_offset = rec["prepared_transaction_offset"]
        self.body_crc = rec["body_crc"]
        self.store_size = rec["store_size"]
        self.broker_name = broker_name

    @property
    def born_host(self) -> str:
        """The sender's address, ip:port (decoded on first use)."""
        h = self._born_host
        if isinstance(h, bytes):
            h = self._born_host = host_str(h)
        return h

    @property
    def store_host(self) -> str:
        """The storing broker's address, ip:port (decoded on first use)."""
        h = self._store_host
        if isinstance(h, bytes):
            h = self._store_host = host_str(h)
        return h

    @property
    def offset_msg_id(self) -> str:
        """The broker-made id: store host + CommitLog offset (§7.5)."""
        return offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or self.offset_msg_id

    @property
    def retry_topic(self) -> str | None:
        """The original topic of a message redelivered from %RETRY%<group>."""
        return self.properties.get(PROPERTY_RETRY_TOPIC)

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, msg_id={self.msg_id!r}, body={len(self.body)}B, "
            f"properties={self.properties})"
        )


def decode_messages(data: bytes | memoryview, broker_name: str = "") -> list[MessageExt]:
    """The messages of a pull or query body (back-to-back stored records;
    CRC checked). A record whose body fails its CRC (damage in an old
    segment that recovery did not scan) is left out and logged, so its
    queue goes on past it: a consumer never gets a corrupted message, and
    never retries one pull for ever. CorruptStoreError when the records do
    not even parse. A record flagged compressed whose body does not
    inflate (its producer's fault: the CRC is of those bytes) is left out
    and logged the same way."""
    corrupt: list[tuple[int, dict[str, Any]]] = []
    records = rmqcore.decode_records(data, True, corrupt)
    for pos, rec in corrupt:
        log.error(
            "left out a corrupted message of %s queue %d at offset %d (byte %d of the "
            "pull): its body fails its CRC",
            rec["topic"],
            rec["queue_id"],
            rec["queue_offset"],
            pos,
        )
    out = []
    for rec in records:
        try:
            out.append(MessageExt(rec, broker_name))
        except zlib.error as e:
            log.error(
                "left out a message of %s queue %d at offset %d: it is flagged compressed "
                "and its body does not inflate (%s)",
                rec["topic"],
                rec["queue_id"],
                rec["queue_offset"],
                e,
            )
    return out


def host_str(raw: bytes) -> str:
    """A stored host field (4-byte IPv4 + port, or 16-byte IPv6 + port) as ip:port."""
    if len(raw) == 8:
        return f"{socket.inet_ntop(socket.AF_INET, raw[:4])}:{int.from_bytes(raw[4:], 'big')}"
    if len(raw) == 20:
        return f"[{socket.inet_ntop(socket.AF_INET6, raw[:16])}]:{int.from_bytes(raw[16:], 'big')}"
    return ""


def host_bytes(addr: str) -> bytes:
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.inet_pton(fam, host) + int(port).to_bytes(4, "big")


def offset_msg_id(store_host: str, commit_log_offset: int) -> str:
    return rmqcore.offset_msg_id(host_bytes(store_host), commit_log_offset)


def split_offset_msg_id(msg_id: str) -> tuple[bytes, int]:
    """(store host as stored: IPv4 or IPv6 address + port, CommitLog offset)
    of an offset message id (32 or 56 hex digits); ValueError when msg_id is
    not one. The one parser of the format (offset_msg_id writes it)."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"message id {msg_id!r} is not hexadecimal") from None
    if len(raw) not in (16, 28):
        raise ValueError(
            f"message id {msg_id!r} is {len(msg_id)} characters; an offset message id has 32 "
            "(IPv4 store host) or 56 (IPv6)"
        )
    return raw[:-8], int.from_bytes(raw[-8:], "big")


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """(store host "ip:port", CommitLog offset) of an offset message id;
    ValueError when msg_id is not one."""
    host, offset = split_offset_msg_id(msg_id)
    return host_str(host), offset


# -- unique message ids (MessageClientIDSetter) ------------------------------------------


#: bumped in a forked child (os.register_at_fork): id generators remake
#: their fixed part when it moved, without a getpid() system call per id
_fork_generation = 0


def _forked() -> None:
    global _fork_generation
    _fork_generation += 1


os.register_at_fork(after_in_child=_forked)


class _UniqIdGenerator:
    """16 bytes as 32 hex digits: IPv4 (4) + pid (2) + random (4), then ms
    since the start of the month (4) and a counter (2). The fixed part is
    remade after fork, so two processes never share it."""

    def __init__(self) -> None:
        self._pid = -1
        self._generation = -1
        self._prefix = ""
        self._counter = itertools.count()
        self._month_start = 0.0
        self._next_month = 0.0
        #: the prefix and the time of the last id: ids of one millisecond share it
        self._ms = -1
        self._head = ""

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._generation = _fork_generation
        try:
            ip = socket.inet_aton(_local_ip())
        except OSError:
            ip = bytes(4)
        self._prefix = (
            (
                ip
                + (self._pid & 0xFFFF).to_bytes(2, "big")
                + random.getrandbits(32).to_bytes(4, "big")
            )
            .hex()
            .upper()
        )
        self._counter = itertools.count(random.getrandbits(16))
        self._ms = -1

    def _month(self, now: float) -> None:
        t = time.localtime(now)
        start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        nxt = time.mktime((t.tm_year + (t.tm_mon == 12), t.tm_mon % 12 + 1, 1, 0, 0, 0, 0, 0, -1))
        self._month_start, self._next_month = start, nxt

    def __call__(self) -> str:
        if self._generation != _fork_generation:
            self._reset()
        now = time.time()
        if now >= self._next_month:
            self._month(now)
        ms = int((now - self._month_start) * 1000) & 0xFFFFFFFF
        if ms != self._ms:
            self._ms = ms
            self._head = f"{self._prefix}{ms:08X}"
        # %-formatting: half the time of an f-string's format spec, per id
        return "%s%04X" % (self._head, next(self._counter) & 0xFFFF)  # noqa: UP031

    def reserve(self, n: int) -> tuple[str, int]:
        """(head, first counter value) for n ids made elsewhere (the batch
        encoder in C): id k is head + the 4 hex digits of (first + k) &
        0xFFFF; the counter moves on by n."""
        head = self()[:-4]  # the prefix and the time, as a single id has them
        seq = next(self._counter)
        self._counter = itertools.count(seq + n)
        return head, seq & 0xFFFF


_local_ip_cache: list[str] = []


def _local_ip() -> str:
    if not _local_ip_cache:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect(("192.0.2.1", 9))
                _local_ip_cache.append(str(s.getsockname()[0]))
        except OSError:
            _local_ip_cache.append("127.0.0.1")
    return _local_ip_cache[0]


#: new_unique_id() -> a fresh UNIQ_KEY value.
new_unique_id = _UniqIdGenerator()


def local_ip() -> str:
    """The address other hosts reach this process at (clientIP)."""
    return _local_ip()
