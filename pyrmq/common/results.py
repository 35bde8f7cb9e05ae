"""Results a client gets back: SendResult/SendStatus and PullResult/PullStatus
(STYLE.md section 4: the codes listed here are statuses, every other
response code raises a BrokerError)."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from pyrmq.common.message import MessageExt, MessageQueue


class SendStatus(enum.Enum):
    SEND_OK = 0
    FLUSH_DISK_TIMEOUT = 10
    FLUSH_SLAVE_TIMEOUT = 12
    SLAVE_NOT_AVAILABLE = 11


class PullStatus(enum.Enum):
    FOUND = 0
    NO_NEW_MSG = 19
    NO_MATCHED_MSG = 20
    OFFSET_ILLEGAL = 21


@dataclass(frozen=True, slots=True)
class SendResult:
    """The answer to one send (SendResult). `msg_id` is the UNIQ_KEY the
    producer gave the message (comma-joined for a batch), `offset_msg_id` the
    broker's id (store host + CommitLog offset; comma-joined for a batch),
    `queue_offset` the ConsumeQueue offset of the (first) message."""

    send_status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.send_status is SendStatus.SEND_OK


_new = object.__new__
(
    _set_status,
    _set_msg_id,
    _set_offset_msg_id,
    _set_queue,
    _set_queue_offset,
    _set_transaction_id,
    _set_region_id,
) = (getattr(SendResult, f.name).__set__ for f in dataclasses.fields(SendResult))


def new_send_result(
    status: SendStatus,
    msg_id: str,
    offset_msg_id: str,
    mq: MessageQueue,
    queue_offset: int,
    transaction_id: str | None,
    region_id: str | None,
) -> SendResult:
    """SendResult(...) through its slots, for the producer's per-message
    paths: the frozen dataclass's __init__ (seven object.__setattr__ calls
    looked up by name) costs about twice this."""
    r = _new(SendResult)
    _set_status(r, status)
    _set_msg_id(r, msg_id)
    _set_offset_msg_id(r, offset_msg_id)
    _set_queue(r, mq)
    _set_queue_offset(r, queue_offset)
    _set_transaction_id(r, transaction_id)
    _set_region_id(r, region_id)
    return r


class LocalTransactionState(enum.Enum):
    """A transaction listener's answer (RocketMQ's spelling, UNKNOW
    included); the value is END_TRANSACTION's commitOrRollback."""

    COMMIT_MESSAGE = 8
    ROLLBACK_MESSAGE = 12
    UNKNOW = 0


@dataclass(frozen=True, slots=True)
class TransactionSendResult(SendResult):
    """The answer to send_message_in_transaction: the half message's send
    result and what the local transaction said."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


@dataclass(slots=True)
class PullResult:
    """The answer to one pull (PullResult). `msg_found_list` is empty unless
    the status is FOUND; `next_begin_offset` is where the next pull starts.
    `body` holds the undecoded records instead when the pull asked for raw
    (columnar readers decode it with rmqcore.decode_columns)."""

    pull_status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    msg_found_list: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0
    body: bytes = b""
