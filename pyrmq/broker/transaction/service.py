"""TransactionalMessageService: half messages, their resolution, and what is
pending (RocketMQ's TransactionalMessageServiceImpl and Bridge).

On disk (ordinary CommitLog data, replicated like any other):

- a half message is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with
  ``REAL_TOPIC`` / ``REAL_QID`` (where it goes when committed), ``PGROUP``
  and ``TRAN_MSG``, and the transaction bits of its sysFlag cleared (so the
  half queue indexes it; the real topic's queue does not see it);
- a check-back puts the half message back: a new copy at the end of the
  half queue with ``TRANSACTION_CHECK_TIMES`` counted up and
  ``TRAN_PREPARED_QUEUE_OFFSET`` = the first copy's queue offset (RocketMQ
  sets it on its immunity put-backs; pyrmq on every one), which names the
  transaction: every copy, and the answer to any of them, resolves the same
  one;
- an op record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag ``d``, body
  the transaction's first queue offset in decimal, marks it resolved
  (committed, rolled back, or given up on after ``transactionCheckMax``
  checks, when a copy also goes to ``TRANS_CHECK_MAX_TIME_TOPIC``);
- a commit stores the message in its real topic and queue first (sysFlag
  TRANSACTION_COMMIT, ``REAL_*``/``TRAN_MSG`` dropped,
  ``TRAN_PREPARED_QUEUE_OFFSET`` kept), then the op record;
- progress: the consumer offsets of group ``CID_RMQ_SYS_TRANS`` on the half
  and op queues (consumerOffset.json, as RocketMQ): every transaction with
  a copy at or past the half offset is pending unless an op record at or
  past the op offset resolved it. The op offset passes an op record only
  once the half offset has passed every copy its transaction had when it
  was read (no copy is made after that).

Start-up rebuilds what is pending from those two offsets. A broker killed
between a commit's message and its op record finds the transaction pending
again; before it stores a commit of a transaction found so (or asks its
producer about it), it looks the message up by UNIQ_KEY in the real topic:
a commit is stored at most once."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import rmqcore
from pyrmq.broker.offset_manager import ConsumerOffsetManager
from pyrmq.broker.topic_config import PERM_READ, PERM_WRITE, TopicConfigManager
from pyrmq.common.errors import BrokerSystemError, MessageIllegalError
from pyrmq.common.message import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from pyrmq.common.topics import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANS_SYS_GROUP,
)
from pyrmq.storage import MessageStore

log = logging.getLogger("pyrmq.broker.transaction")

#: EndTransactionRequestHeader.commitOrRollback (MessageSysFlag values)
TRANSACTION_NOT_TYPE = 0
TRANSACTION_COMMIT_TYPE = rmqcore.SYSFLAG_TRANSACTION_COMMIT
TRANSACTION_ROLLBACK_TYPE = rmqcore.SYSFLAG_TRANSACTION_ROLLBACK
_TX_MASK = 0xC
#: the op record's tag (TransactionalMessageUtil.REMOVETAG)
OP_TAG = "d"
_OP_PROPS = rmqcore.encode_properties({"TAGS": OP_TAG, "WAIT": "false"})
_SCAN_BATCH = 32
_DROP_ON_COMMIT = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED)
_DECISIONS = {TRANSACTION_COMMIT_TYPE: "commit", TRANSACTION_ROLLBACK_TYPE: "rollback"}


@dataclasses.dataclass(slots=True)
class HalfMessage:
    """One pending transaction, as its latest copy in the half queue."""

    origin: int  #: the first copy's queue offset: names the transaction
    queue_offset: int  #: the latest copy's
    commit_log_offset: int
    size: int
    group: str
    transaction_id: str  #: UNIQ_KEY
    real_topic: str
    real_queue_id: int
    born_ms: int
    check_times: int
    immunity_ms: int | None
    #: found pending at start-up: its commit may be stored already
    recovered: bool = False
    #: an END_TRANSACTION or check is storing its outcome now
    resolving: bool = False

    def describe(self) -> dict[str, Any]:
        return {
            "transactionId": self.transaction_id,
            "producerGroup": self.group,
            "topic": self.real_topic,
            "queueId": self.real_queue_id,
            "tranStateTableOffset": self.queue_offset,
            "commitLogOffset": self.commit_log_offset,
            "firstQueueOffset": self.origin,
            "bornTimestamp": self.born_ms,
            "checkTimes": self.check_times,
        }


def _int_prop(props: dict[str, str], key: str, default: int) -> int:
    try:
        return int(props.get(key, default))
    except ValueError:
        return default


def _immunity_ms(props: dict[str, str]) -> int | None:
    """CHECK_IMMUNITY_TIME_IN_SECONDS in ms: no check-back before it (None:
    transactionTimeOut applies)."""
    value = props.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
    try:
        return int(float(value) * 1000) if value else None
    except ValueError:
        return None


class TransactionalMessageService:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self._clock = clock
        #: transaction (first queue offset) -> its latest copy
        self.pending: dict[int, HalfMessage] = {}
        #: (producer group, UNIQ_KEY) -> the same, for a resent half message
        self._by_id: dict[tuple[str, str], HalfMessage] = {}
        #: (op queue offset after the record, half max offset when read)
        self._op_marks: deque[tuple[int, int]] = deque()
        self._op_read = 0  #: the op queue is read up to here
        self.started = False
        #: counters for runtime info
        self.committed = 0
        self.rolled_back = 0
        self.discarded = 0

    # -- start-up --------------------------------------------------------------------

    async def start(self) -> None:
        """Rebuild what is pending from the half and op queues."""
        for topic in (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC):
            self.topics.create_system_group_topic(topic, 1, PERM_READ | PERM_WRITE)
        self.pending.clear()
        self._by_id.clear()
        self._op_marks.clear()
        half_from = max(self.half_offset, self.store.min_offset_in_queue(TRANS_HALF_TOPIC, 0))
        async for m in self._scan(TRANS_HALF_TOPIC, half_from):
            h = self._half_of(m)
            if h is not None:
                h.recovered = True
                self._add(h)
        self._op_read = max(self.op_offset, self.store.min_offset_in_queue(TRANS_OP_HALF_TOPIC, 0))
        await self.read_ops()
        # the checker's progress is recorded from the start, not at its
        # first check a transactionCheckInterval later: what reads it
        # (consumer offsets, the metrics' lag of CID_RMQ_SYS_TRANS) sees
        # the same groups all along
        self.advance()
        self.started = True
        if self.pending:
            log.info("transactions: %d pending after start-up", len(self.pending))

    def stop(self) -> None:
        """Save progress and forget what is pending (a slave's is its
        master's)."""
        if self.started:
            self.advance()
        self.started = False
        self.pending.clear()
        self._by_id.clear()
        self._op_marks.clear()

    async def _scan(self, topic: str, offset: int) -> Any:
        """Decoded records of queue 0 of topic from offset to its end, a
        batch at a time (yielding to the loop between batches)."""
        for _ in range(1 << 40):
            r = self.store.get_message(topic, 0, offset, _SCAN_BATCH)
            if r.status != "FOUND":
                if r.status in ("OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY") and (
                    r.next_begin_offset > offset
                ):
                    offset = r.next_begin_offset
                    continue
                return
            for m in rmqcore.decode_records(self.store.read(r.ranges)):
                yield m
            offset = r.next_begin_offset
            await asyncio.sleep(0)

    def _half_of(self, m: dict[str, Any]) -> HalfMessage | None:
        props = rmqcore.decode_properties(m["properties"])
        topic = props.get(PROPERTY_REAL_TOPIC)
        if not topic:
            log.warning(
                "transactions: half message at %d has no REAL_TOPIC; ignored",
                m["commit_log_offset"],
            )
            return None
        return HalfMessage(
            origin=_int_prop(props, PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, m["queue_offset"]),
            queue_offset=m["queue_offset"],
            commit_log_offset=m["commit_log_offset"],
            size=m["store_size"],
            group=props.get(PROPERTY_PRODUCER_GROUP, ""),
            transaction_id=props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
            real_topic=topic,
            real_queue_id=_int_prop(props, PROPERTY_REAL_QUEUE_ID, 0),
            born_ms=m["born_timestamp"],
            check_times=_int_prop(props, PROPERTY_TRANSACTION_CHECK_TIMES, 0),
            immunity_ms=_immunity_ms(props),
        )

    async def read_ops(self) -> None:
        """Read op records written since the last read (by this broker
        before a restart, or by its master before a failover)."""
        half_max = self.store.max_offset_in_queue(TRANS_HALF_TOPIC, 0)
        async for m in self._scan(TRANS_OP_HALF_TOPIC, self._op_read):
            self._op_read = m["queue_offset"] + 1
            try:
                origin = int(m["body"])
            except ValueError:
                log.warning(
                    "transactions: op record %d has body %r; ignored",
                    m["queue_offset"],
                    m["body"][:32],
                )
                continue
            self._forget(origin)
            self._op_marks.append((self._op_read, half_max))

    def _add(self, h: HalfMessage) -> None:
        # a later copy of a transaction replaces an earlier one
        self.pending[h.origin] = h
        if h.transaction_id:
            self._by_id[(h.group, h.transaction_id)] = h

    def _forget(self, origin: int) -> None:
        h = self.pending.pop(origin, None)
        if h is not None and self._by_id.get((h.group, h.transaction_id)) is h:
            del self._by_id[(h.group, h.transaction_id)]

    def pending_half(self, group: str, transaction_id: str) -> HalfMessage | None:
        """The pending transaction of this group with this UNIQ_KEY: a half
        message sent again (the producer retried after an answer it did not
        get) is answered with it, not stored twice."""
        return self._by_id.get((group, transaction_id)) if transaction_id else None

    # -- progress --------------------------------------------------------------------

    @property
    def half_offset(self) -> int:
        return max(0, self.offsets.query_offset(TRANS_SYS_GROUP, TRANS_HALF_TOPIC, 0))

    @property
    def op_offset(self) -> int:
        return max(0, self.offsets.query_offset(TRANS_SYS_GROUP, TRANS_OP_HALF_TOPIC, 0))

    def advance(self) -> None:
        """Move the half offset to the oldest pending copy (or the queue's
        end) and the op offset past the op records nothing needs any more."""
        half = min(
            (h.queue_offset for h in self.pending.values()),
            default=self.store.max_offset_in_queue(TRANS_HALF_TOPIC, 0),
        )
        half = max(half, self.half_offset)
        self.offsets.commit_offset(TRANS_SYS_GROUP, TRANS_HALF_TOPIC, 0, half)
        op = self.op_offset
        while self._op_marks and self._op_marks[0][1] <= half:
            op = max(op, self._op_marks.popleft()[0])
        self.offsets.commit_offset(TRANS_SYS_GROUP, TRANS_OP_HALF_TOPIC, 0, op)

    # -- half messages ---------------------------------------------------------------

    def prepare(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        props: dict[str, str],
        *,
        group: str,
        flag: int,
        sysflag: int,
        born_timestamp: int,
        born_host: bytes,
        reconsume_times: int,
    ) -> rmqcore.AppendResult:
        """Store a half message for topic/queue_id; pending from now on."""
        props = dict(props)
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        props[PROPERTY_PRODUCER_GROUP] = group
        props.pop(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, None)
        props.pop(PROPERTY_TRANSACTION_CHECK_TIMES, None)
        r = self.store.put_message_nowait(
            TRANS_HALF_TOPIC,
            0,
            body,
            rmqcore.encode_properties(props),
            flag=flag,
            sysflag=sysflag & ~_TX_MASK,
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times,
        )
        self._add(
            HalfMessage(
                origin=r.queue_offset,
                queue_offset=r.queue_offset,
                commit_log_offset=r.phys_offset,
                size=r.wrote_bytes,
                group=group,
                transaction_id=props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
                real_topic=topic,
                real_queue_id=queue_id,
                born_ms=born_timestamp,
                check_times=0,
                immunity_ms=_immunity_ms(props),
            )
        )
        return r

    def put_back(self, h: HalfMessage) -> rmqcore.AppendResult:
        """A new copy of h at the end of the half queue, one more check
        counted; h then describes it."""
        m = self.store.look_message_by_offset(h.commit_log_offset)
        props = rmqcore.decode_properties(m["properties"])
        props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(h.check_times + 1)
        props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(h.origin)
        r = self.store.put_copy(m, TRANS_HALF_TOPIC, 0, props, m["reconsume_times"])
        h.queue_offset = r.queue_offset
        h.commit_log_offset = r.phys_offset
        h.size = r.wrote_bytes
        h.check_times += 1
        return r

    # -- resolution ------------------------------------------------------------------

    def find(self, group: str, table_offset: int, commit_log_offset: int) -> HalfMessage:
        """The pending transaction an END_TRANSACTION names, checked as
        RocketMQ's checkPrepareMessage does; a clear error otherwise."""
        try:
            m = self.store.look_message_by_offset(commit_log_offset)
        except Exception:
            raise BrokerSystemError(
                f"Find prepared transaction message failed: no message at commitLogOffset "
                f"{commit_log_offset}"
            ) from None
        if m["topic"] != TRANS_HALF_TOPIC:
            raise BrokerSystemError(
                f"Find prepared transaction message failed: the message at commitLogOffset "
                f"{commit_log_offset} is not a half message (topic {m['topic']})"
            )
        props = rmqcore.decode_properties(m["properties"])
        if props.get(PROPERTY_PRODUCER_GROUP, "") != group:
            raise BrokerSystemError(
                f"The producer group wrong: the half message belongs to "
                f"{props.get(PROPERTY_PRODUCER_GROUP, '')!r}, not {group!r}"
            )
        if m["queue_offset"] != table_offset:
            raise BrokerSystemError(
                f"The transaction state table offset wrong: the half message at "
                f"{commit_log_offset} has queue offset {m['queue_offset']}, not {table_offset}"
            )
        origin = _int_prop(props, PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, m["queue_offset"])
        h = self.pending.get(origin)
        if h is None:
            raise BrokerSystemError(
                f"the transaction of half message {origin} ({props.get('UNIQ_KEY', '')}) was "
                "already committed, rolled back or given up on; nothing changed"
            )
        if h.resolving:
            raise BrokerSystemError(
                f"the transaction of half message {origin} is being resolved now; nothing changed"
            )
        return h

    @staticmethod
    def check_decision(decision: int) -> None:
        if decision not in _DECISIONS:
            raise MessageIllegalError(
                f"commitOrRollback {decision}: expected {TRANSACTION_COMMIT_TYPE} (commit), "
                f"{TRANSACTION_ROLLBACK_TYPE} (rollback) or {TRANSACTION_NOT_TYPE} (unknown)"
            )

    def needs_lookup(self, h: HalfMessage, decision: int) -> bool:
        """Whether committing h must first look for a commit stored before a
        restart (`end`); otherwise `finish` does it all at once."""
        return decision == TRANSACTION_COMMIT_TYPE and h.recovered

    async def end(self, h: HalfMessage, decision: int, *, why: str) -> None:
        """Commit or roll back a pending transaction found by `find`,
        looking first for a commit stored before a restart. The caller
        marks h resolving before its first await (nothing else resolves it
        meanwhile)."""
        self.check_decision(decision)
        h.resolving = True
        try:
            stored = self.needs_lookup(h, decision) and await self.commit_stored(h)
        except BaseException:
            h.resolving = False
            raise
        self.finish(h, decision, commit_stored=stored, why=why)

    def finish(self, h: HalfMessage, decision: int, *, commit_stored: bool, why: str) -> None:
        """Commit (store in the real topic unless commit_stored, then the
        op record) or roll back (the op record only)."""
        self.check_decision(decision)
        try:
            if decision == TRANSACTION_COMMIT_TYPE:
                if not commit_stored:
                    self._store_commit(h)
                self.committed += 1
            else:
                self.rolled_back += 1
            self._resolve(h)
        finally:
            h.resolving = False
        log.debug("transactions: %s %s (%s)", _DECISIONS[decision], h.transaction_id, why)

    async def commit_stored(self, h: HalfMessage) -> bool:
        """Whether the commit of h is in its real topic already (a broker
        stopped between the commit's message and its op record)."""
        if not h.transaction_id:
            return False
        for m in await self.store.query_message(h.real_topic, h.transaction_id, 64):
            props = rmqcore.decode_properties(m["properties"])
            if (
                m["sys_flag"] & _TX_MASK == TRANSACTION_COMMIT_TYPE
                and _int_prop(props, PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, -1) == h.origin
            ):
                return True
        return False

    def _store_commit(self, h: HalfMessage) -> None:
        m = self.store.look_message_by_offset(h.commit_log_offset)
        props = rmqcore.decode_properties(m["properties"])
        for k in _DROP_ON_COMMIT:
            props.pop(k, None)
        props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(h.origin)
        sysflag = (m["sys_flag"] & ~_TX_MASK) | TRANSACTION_COMMIT_TYPE
        self.store.put_copy(m, h.real_topic, h.real_queue_id, props, m["reconsume_times"], sysflag)

    def _resolve(self, h: HalfMessage) -> None:
        """The op record: h is done."""
        self.store.put_message_nowait(TRANS_OP_HALF_TOPIC, 0, str(h.origin).encode(), _OP_PROPS)
        self._forget(h.origin)
        self._op_read = self.store.max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
        self._op_marks.append((self._op_read, self.store.max_offset_in_queue(TRANS_HALF_TOPIC, 0)))

    def discard(self, h: HalfMessage) -> None:
        """Give up on h after transactionCheckMax checks: a copy to
        TRANS_CHECK_MAX_TIME_TOPIC, then the op record."""
        self.topics.create_system_group_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1, PERM_READ | PERM_WRITE)
        m = self.store.look_message_by_offset(h.commit_log_offset)
        props = rmqcore.decode_properties(m["properties"])
        self.store.put_copy(m, TRANS_CHECK_MAX_TIME_TOPIC, 0, props, m["reconsume_times"])
        self._resolve(h)
        self.discarded += 1
        log.warning(
            "transactions: gave up on %s of group %s for %s/%d after %d checks; kept in %s",
            h.transaction_id,
            h.group,
            h.real_topic,
            h.real_queue_id,
            h.check_times,
            TRANS_CHECK_MAX_TIME_TOPIC,
        )
