"""Results a client gets back: SendResult/SendStatus and PullResult/PullStatus
(STYLE.md section 4: the codes listed here are statuses, every other
response code raises a BrokerError)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass, field

import rmqcore
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


#: makes SendResults through their slots, for the producer's per-message
#: paths (the frozen dataclass's __init__, seven object.__setattr__ calls
#: looked up by name, costs several times this); an auto-batch's answer
#: makes its callers' results with it in one C loop (rmqcore.SendBatch)
send_result_maker = rmqcore.SlotsBuilder(
    SendResult, [f.name for f in dataclasses.fields(SendResult)]
)

#: SendResult(...) made by send_result_maker: the seven values in field
#: order, all given
new_send_result: Callable[
    [SendStatus, str, str, MessageQueue, int, str | None, str | None], SendResult
] = send_result_maker


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
