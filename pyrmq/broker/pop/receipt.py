"""A POP receipt handle and the checkpoint it names.

A message handed out by POP stays the group's until it is acked or its
invisible time passes; the broker keeps a checkpoint (CK) for it, and the
consumer gets a receipt handle that names the checkpoint. The handle is
text, opaque to clients (RocketMQ's ExtraInfoUtil format differs; clients
never parse it), fields separated by one space:

    v1 <retry> <queue id> <queue offset> <pop time ms> <invisible ms> <broker name>

``retry`` is 1 when the message was read from the group's retry topic
(%RETRY%<group>), 0 when from the topic itself; the group and the topic come
with the ack request. A checkpoint is identified by (group, topic read,
queue id, queue offset, pop time): a later pop of the same message (after
its invisible time passed) has a new pop time, so an old handle no longer
names a live checkpoint.

The revive log (``rmq_sys_REVIVE_LOG_<cluster>``, one queue, in the
CommitLog: flushed and replicated as any message) holds JSON bodies:
``{"ck": [...]}`` for checkpoints written by a pop and ``{"ack": [...]}``
for acks, each item ``[group, topic, queue id, offset, pop time,
invisible ms, reconsume times, orderly]`` (an ack's last four are 0)."""

from __future__ import annotations

from dataclasses import dataclass

VERSION = "v1"


class InvalidReceiptHandle(ValueError):
    """A handle this broker did not give, or whose checkpoint is gone (acked,
    or its invisible time passed and the message went back)."""


@dataclass(frozen=True, slots=True)
class CkKey:
    group: str
    topic: str  # the topic read: the topic itself or %RETRY%<group>
    queue_id: int
    offset: int
    pop_time: int


@dataclass(slots=True)
class Checkpoint:
    key: CkKey
    invisible_ms: int
    reconsume_times: int
    orderly: bool
    #: the revive log offset of the record that holds it
    log_offset: int = -1

    @property
    def deadline_ms(self) -> int:
        return self.key.pop_time + self.invisible_ms

    def as_item(self) -> list[object]:
        k = self.key
        return [
            k.group,
            k.topic,
            k.queue_id,
            k.offset,
            k.pop_time,
            self.invisible_ms,
            self.reconsume_times,
            int(self.orderly),
        ]

    @classmethod
    def from_item(cls, item: list[object], log_offset: int) -> Checkpoint:
        g, t, q, o, p, inv, rc, orderly = item
        return cls(
            CkKey(str(g), str(t), int(q), int(o), int(p)),  # type: ignore[call-overload]
            int(inv),  # type: ignore[call-overload]
            int(rc),  # type: ignore[call-overload]
            bool(orderly),
            log_offset,
        )


def key_item(k: CkKey) -> list[object]:
    """An ack record's item."""
    return [k.group, k.topic, k.queue_id, k.offset, k.pop_time, 0, 0, 0]


def encode(ck: Checkpoint, retry: bool, broker_name: str) -> str:
    k = ck.key
    return (
        f"{VERSION} {int(retry)} {k.queue_id} {k.offset} {k.pop_time} {ck.invisible_ms} "
        f"{broker_name}"
    )


@dataclass(frozen=True, slots=True)
class Receipt:
    retry: bool
    queue_id: int
    offset: int
    pop_time: int
    invisible_ms: int
    broker_name: str


def decode(handle: str) -> Receipt:
    parts = handle.split(" ")
    try:
        if len(parts) != 7 or parts[0] != VERSION or parts[1] not in ("0", "1"):
            raise ValueError
        return Receipt(
            parts[1] == "1",
            int(parts[2]),
            int(parts[3]),
            int(parts[4]),
            int(parts[5]),
            parts[6],
        )
    except ValueError:
        raise InvalidReceiptHandle(
            f"receipt handle {handle[:80]!r} was not given by pyrmq"
        ) from None
