"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36): SendMessageProcessor.

A batch is code 320, or code 10/310 with batch "1"/"true" (the C++ client
sends its batches that way; Java's broker misreads "1" and stores one
garbled message, we store the batch). A compressed batch (sysFlag bit 0) is
inflated before it is split; single messages are stored as received,
compressed or not, with the flag kept."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

import rmqcore
from pyrmq.broker.dedup import DuplicateDetector, batch_properties
from pyrmq.broker.ha.service import HAService
from pyrmq.broker.processor.headers import header_int
from pyrmq.broker.processor.send_answer import (
    SLAVE_NOT_AVAILABLE_REMARK,
    born_host_of,
    durable_answer,
    settled_ok,
)
from pyrmq.broker.stats import BrokerStatsManager
from pyrmq.broker.subscription_group import SubscriptionGroupManager
from pyrmq.broker.timer import TIMER_TOPIC
from pyrmq.broker.topic_config import PERM_READ, PERM_WRITE, TopicConfig, TopicConfigManager
from pyrmq.broker.transaction.service import TransactionalMessageService
from pyrmq.common.errors import (
    BrokerSystemError,
    DiskFullError,
    IllegalMessageError,
    MessageIllegalError,
    NoPermissionError,
    ServiceNotAvailableError,
    StoreError,
    SystemBusyError,
)
from pyrmq.common.threads import single_thread_executor
from pyrmq.common.topics import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TBW102,
    TRANS_HALF_TOPIC,
    dlq_topic,
    is_system_topic,
    retry_topic,
)
from pyrmq.metrics import BrokerTallies
from pyrmq.remoting import RemotingCommand, ResponseCode
from pyrmq.remoting.codes import RequestCode
from pyrmq.remoting.command import FLAG_ONEWAY
from pyrmq.remoting.connection import Connection, HandlerResult
from pyrmq.storage import MessageStore

if TYPE_CHECKING:
    from pyrmq.broker.processor.send_fast import SendFastPath

log = logging.getLogger("pyrmq.broker")

#: SEND_MESSAGE_V2's one-letter header keys -> SEND_MESSAGE's names
V2_FIELDS = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
_TRUE = ("1", "true", "True", "TRUE")
SYSFLAG_COMPRESSED = rmqcore.SYSFLAG_COMPRESSED
_TX_MASK = 0xC
_TX_PREPARED = 0x4


def _is_half_message(sysflag: int, props: str) -> bool:
    """A transaction's half message: sysFlag TRANSACTION_PREPARED, or the
    TRAN_MSG property (which RocketMQ's broker goes by)."""
    if sysflag & _TX_MASK == _TX_PREPARED:
        return True
    if "TRAN_MSG" not in props:
        return False
    return rmqcore.decode_properties(props).get("TRAN_MSG", "").lower() == "true"


#: compressed batches up to this size inflate inline (well under a
#: millisecond); larger ones on the inflate thread
INFLATE_INLINE_MAX = 32 * 1024
#: an inflated batch may hold up to this many maxMessageSize of messages
BATCH_INFLATE_FACTOR = 4
_INT_FIELDS = ("queueId", "sysFlag", "bornTimestamp", "reconsumeTimes", "flag")


def _int(fields: dict[str, str], key: str, default: int | None = None) -> int:
    return header_int(fields, key, default, error=MessageIllegalError)


class SendMessageProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        *,
        delay_levels: int,
        max_reconsume_times: int,
        retry_queue_nums: int,
        max_message_size: int,
        broker_permission: int,
        send_queue_capacity: int = 10_000,
        fast_failure: bool = True,
        broker_role: str = "ASYNC_MASTER",
        ha: HAService | None = None,
        transactions: TransactionalMessageService | None = None,
        dedup: DuplicateDetector | None = None,
        timer_max_delay_ms: int | None = None,
    ) -> None:
        self.store = store
        #: called as each request of sends is served, here or on the C send
        #: path (the broker's busy poller's touch(), pyrmq/broker/busy_poll.py)
        self.on_send: Callable[[], None] | None = None
        #: timerWheelEnable and timerMaxDelaySec: timed messages (5.x
        #: delivery timestamps) go to the timer (None: stored as they are)
        self.timer_max_delay_ms = timer_max_delay_ms
        self.topics = topics
        self.delay_levels = delay_levels
        self.max_reconsume_times = max_reconsume_times
        self.retry_queue_nums = retry_queue_nums
        self.max_message_size = max_message_size
        self.broker_permission = broker_permission
        #: sendThreadPoolQueueCapacity: sends that may wait for the disk at once
        self.send_queue_capacity = send_queue_capacity
        #: brokerFastFailureEnable: SYSTEM_BUSY once the disk lags (see _refuse_if_busy)
        self.fast_failure = fast_failure
        self._busy_after = store.config.os_page_cache_busy_time_out_mills / 1000
        self._sync = store.config.flush_disk_type.value == "SYNC_FLUSH"
        #: brokerRole: a SLAVE refuses sends; a SYNC_MASTER answers once a
        #: slave holds the message (ha waits for it)
        self._slave = broker_role == "SLAVE"
        self._ha = ha if broker_role == "SYNC_MASTER" else None
        self._inflater: ThreadPoolExecutor | None = None
        #: half messages go here (None: refused, rejectTransactionMessage)
        self.transactions = transactions
        #: duplicateDetection: a resent message is answered, not stored again
        self.dedup = dedup
        #: sends answered SYSTEM_BUSY (runtime info, tests)
        self.busy_refusals = 0
        #: oneway sends taken while the disk lagged, their connection held
        self.oneway_holds = 0
        #: per-topic counters (statsAll); set by the broker
        self.stats: BrokerStatsManager | None = None
        #: consumer groups' retry settings (retryQueueNums, retryMaxTimes);
        #: None: the broker-wide defaults above
        self.groups: SubscriptionGroupManager | None = None
        #: metrics on: messages in are counted here (plain integers)
        self.tallies: BrokerTallies | None = None
        #: the common send's C path (send_fast.py); told the topics fit for it
        self.fast: SendFastPath | None = None

    @property
    def sync_flush(self) -> bool:
        return self._sync

    @property
    def replica_wait(self) -> HAService | None:
        """A SYNC_MASTER's HAService while sends wait for a slave."""
        return self._ha if self._ha is not None and self._ha.required_acks > 0 else None

    def takes_plain_sends(self) -> bool:
        """Whether a plain send is stored and answered with nothing but the
        store's flush to wait for (SendFastPath may serve it then)."""
        return (
            bool(self.broker_permission & PERM_WRITE)
            and not self._slave
            and self.dedup is None
            and (not self._sync or self._busy() is None)
        )

    def _retry_queue_nums(self, group: str) -> int:
        sgc = self.groups.find(group) if self.groups is not None else None
        return max(1, sgc.retry_queue_nums) if sgc is not None else self.retry_queue_nums

    def set_role(self, broker_role: str, ha: HAService | None) -> None:
        """Controller mode: this broker became master (its HAService says
        how many slaves a send waits for) or slave."""
        self._slave = broker_role == "SLAVE"
        self._ha = ha if not self._slave else None

    # -- SEND_MESSAGE / V2 / BATCH ----------------------------------------------

    def process_send(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        if self.on_send is not None:
            self.on_send()
        f = cmd.ext_fields
        if cmd.code != RequestCode.SEND_MESSAGE:
            f = {V2_FIELDS.get(k, k): v for k, v in f.items()}
        batch = cmd.code == RequestCode.SEND_BATCH_MESSAGE or f.get("batch") in _TRUE
        if not self.broker_permission & PERM_WRITE:
            raise NoPermissionError("the broker does not allow writes now")
        if self._slave:
            raise ServiceNotAvailableError(
                "service not available now: messages are put to the slave; a slave takes no "
                "sends, send to its master (brokerId 0)"
            )
        if self._sync and not cmd.flag & FLAG_ONEWAY:
            self._refuse_if_busy()
        topic = f.get("topic")
        if not topic:
            raise MessageIllegalError("the request header lacks topic")
        props = f.get("properties", "")
        half = _is_half_message(_int(f, "sysFlag", 0), props)
        if half and is_system_topic(topic):
            raise NoPermissionError(
                f"a transactional message cannot be sent to the system topic {topic}"
            )
        tc = self._topic_for_send(topic, f)
        if self.fast is not None and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            self.fast.learn(topic, tc.queue_nums)
        g = f.get
        try:
            queue_id = int(g("queueId") or -1)
            sysflag = int(g("sysFlag") or 0)
            born_ts = int(g("bornTimestamp") or 0)
            reconsume = int(g("reconsumeTimes") or 0)
            user_flag = int(g("flag") or 0)
            if not (
                -(2**31) <= sysflag < 2**31
                and -(2**63) <= born_ts < 2**63
                and 0 <= reconsume < 2**31
                and -(2**31) <= user_flag < 2**31
            ):
                raise ValueError
        except ValueError:
            got = {k: g(k) for k in _INT_FIELDS}
            raise MessageIllegalError(
                f"these header fields must be integers in range: {got}"
            ) from None
        if queue_id < 0:
            queue_id = random.randrange(tc.write_queue_nums or 1)
        elif queue_id >= tc.queue_nums:
            raise BrokerSystemError(
                f"request queueId[{queue_id}] is illegal, topic {topic} has {tc.queue_nums} queues"
            )
        body = cmd.body
        if len(body) > self.max_message_size and not batch:
            raise MessageIllegalError(
                f"message body size {len(body)} exceeds maxMessageSize {self.max_message_size}"
            )
        if batch:
            return self._send_batch(cmd, conn, topic, queue_id, sysflag, born_ts, props)
        if half:
            return self._send_half(
                conn, cmd, f, topic, queue_id, sysflag, born_ts, props, user_flag, reconsume
            )
        sent_topic, message_type = topic, "normal"
        with _STORE_ERRORS:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
                sgc = self.groups.find(group) if self.groups is not None else None
                default_max = sgc.retry_max_times if sgc is not None else self.max_reconsume_times
                max_times = _int(f, "maxReconsumeTimes", default_max)
                if reconsume >= max_times:
                    dlq = self._ensure_dlq(group)
                    topic, queue_id = dlq.topic_name, random.randrange(dlq.write_queue_nums)
            # the answer names the queue the client sent to, as Java's does,
            # even when a delay parks the message in SCHEDULE_TOPIC_XXXX
            reply_queue_id = queue_id
            if (
                ("TIMER_DELIVER_MS\x01" in props or "TIMER_DELAY_SEC\x01" in props)
                and not sysflag & _TX_MASK
                and self.timer_max_delay_ms is not None
            ):
                timed = self._timed(topic, queue_id, props, self.timer_max_delay_ms)
                if timed is not None:
                    topic, queue_id, props = timed
                    message_type = "delay"
            elif "DELAY\x01" in props and not sysflag & _TX_MASK:
                topic, queue_id, props = self._scheduled(topic, queue_id, props)
                message_type = "delay"
            if self.dedup is not None:
                first = self.dedup.stored(topic, props)
                if first is not None:
                    return self._answer_stored(conn, cmd, first)
            r = self.store.put_message_nowait(
                topic,
                queue_id,
                body,
                props,
                flag=user_flag,
                sysflag=sysflag,
                born_timestamp=born_ts,
                born_host=born_host_of(conn),
                reconsume_times=reconsume,
            )
            if self.dedup is not None:
                self.dedup.remember(topic, props, r)
        if self.stats is not None:
            self.stats.inc_topic_put(topic, 1, r.wrote_bytes)
        tallies = self.tallies
        if tallies is not None:
            tallies.sent(sent_topic, message_type, 1, len(body))
        return self._answer(conn, cmd, r, r.msg_id, reply_queue_id, props)

    def _send_half(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        f: dict[str, str],
        topic: str,
        queue_id: int,
        sysflag: int,
        born_ts: int,
        props: str,
        user_flag: int,
        reconsume: int,
    ) -> HandlerResult:
        """A transaction's half message (TransactionalMessageService); the
        answer names the real queue and the half queue offset, which
        END_TRANSACTION brings back as tranStateTableOffset."""
        if self.transactions is None:
            raise NoPermissionError(
                "the broker sending transaction message is forbidden (rejectTransactionMessage)"
            )
        p = rmqcore.decode_properties(props)
        p.pop("DELAY", None)  # a half message is not delayed (RocketMQ's clients drop it)
        group = p.get("PGROUP") or f.get("producerGroup", "")
        if not group:
            raise MessageIllegalError("a transactional message needs its producer group (PGROUP)")
        sent = self.transactions.pending_half(group, p.get("UNIQ_KEY", ""))
        if sent is not None:
            # the producer did not get the first answer: not stored twice
            return self._answer_stored(
                conn, cmd, self.store.look_message_by_offset(sent.commit_log_offset)
            )
        with _STORE_ERRORS:
            r = self.transactions.prepare(
                topic,
                queue_id,
                cmd.body,
                p,
                group=group,
                flag=user_flag,
                sysflag=sysflag,
                born_timestamp=born_ts,
                born_host=born_host_of(conn),
                reconsume_times=reconsume,
            )
        if self.tallies is not None:
            self.tallies.sent(topic, "transaction", 1, len(cmd.body))
        return self._answer(conn, cmd, r, r.msg_id, queue_id, props)

    def _answer_stored(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        m: dict[str, Any],
        batch_ids: str | None = None,
        batch_bytes: int = 0,
    ) -> HandlerResult:
        """A message sent again that this broker stored already (a retry
        after a lost answer): the first send's answer (its offset id, queue
        and queue offset; the queue it was sent to for a delayed one), once
        it is as durable as the first answer waited for. A batch: its
        first record, the ids of all and the bytes they take."""
        props = m["properties"]
        qid = m["queue_id"]
        if m["topic"] in (SCHEDULE_TOPIC, TRANS_HALF_TOPIC):
            real = rmqcore.decode_properties(props).get("REAL_QID", "")
            qid = int(real) if real.isdigit() else qid
        answer = cmd.response(
            ResponseCode.SUCCESS,
            {
                "msgId": batch_ids
                or rmqcore.offset_msg_id(m["store_host"], m["commit_log_offset"]),
                "queueId": str(qid),
                "queueOffset": str(m["queue_offset"]),
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )
        if cmd.flag & FLAG_ONEWAY:
            return None
        end = m["commit_log_offset"] + (batch_bytes or m["store_size"])
        replica = None
        if self._ha is not None and self._ha.required_acks > 0:
            if self._ha.is_slave_ok(end):
                replica = self._ha.wait_replicated(end)
            else:
                answer.code = ResponseCode.SLAVE_NOT_AVAILABLE
                answer.remark = SLAVE_NOT_AVAILABLE_REMARK
        if not self._sync and replica is None:
            return answer

        async def durable() -> RemotingCommand:
            if self._sync:
                await self.store.wait_durable(end)
            if replica is not None and not await replica:
                answer.code = ResponseCode.FLUSH_SLAVE_TIMEOUT
                answer.remark = "the slave did not confirm the message within syncFlushTimeout"
            return answer

        return durable()

    def _refuse_if_busy(self) -> None:
        """Flow control while the disk does not keep up with SYNC_FLUSH,
        before anything is written (a send answered SYSTEM_BUSY is not
        stored; the producer tries again, on another broker when it has
        one). RocketMQ's BrokerFastFailure and the send queue's bound, for a
        broker whose sends wait for their flush rather than for a thread:
        [OVERLOAD] once sendThreadPoolQueueCapacity sends wait (each holds
        only its answer, so this bounds the broker's memory), and, with
        brokerFastFailureEnable, [PCBUSY_CLEAN_QUEUE] once the oldest has
        waited longer than osPageCacheBusyTimeOutMills, or the disk, at the
        speed of its recent slow flushes, would take longer than that for
        what is waiting (so a burst is not taken in only to time out)."""
        busy = self._busy()
        if busy is not None:
            self.busy_refusals += 1
            raise SystemBusyError(busy)

    def _busy(self) -> str | None:
        """The SYSTEM_BUSY remark while the disk lags (_refuse_if_busy)."""
        waiting, age, ahead = self.store.flush_backlog
        if waiting >= self.send_queue_capacity:
            return (
                "[OVERLOAD]system busy, start flow control for a while "
                f"({waiting} sends are waiting for the disk)"
            )
        if self.fast_failure and max(age, ahead) > self._busy_after:
            return (
                "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, "
                f"period in queue: {age * 1000:.0f}ms, size of queue: {waiting}, "
                f"flush ahead: {ahead * 1000:.0f}ms"
            )
        return None

    def _answer(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        r: rmqcore.AppendResult,
        msg_id: str,
        queue_id: int,
        props: str,
    ) -> HandlerResult:
        """The send response (SendMessageResponseHeader; values as strings),
        after the append is durable in SYNC_FLUSH unless WAIT is false."""
        ext = {
            "msgId": msg_id,
            "queueId": str(queue_id),
            "queueOffset": str(r.queue_offset),
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        }
        answer = cmd.response(ResponseCode.SUCCESS, ext)
        if self._sync and cmd.flag & FLAG_ONEWAY:
            # A oneway send cannot be answered SYSTEM_BUSY (its sender reads
            # no answer: refused, it would be lost). It is stored; while the
            # disk lags, its connection is read no further until it is
            # durable, so TCP slows the sender down instead.
            fut = self.store.durable_future(r)
            if fut is not None and not fut.done() and self._busy() is not None:
                self.oneway_holds += 1
                conn.hold_reading(fut)
            return None
        if "WAIT\x01false" in props or cmd.flag & FLAG_ONEWAY:
            return answer
        flush = self.store.durable_future(r) if self._sync else None
        replica = None
        if self._ha is not None and self._ha.required_acks > 0:
            end = r.phys_offset + r.wrote_bytes
            if self._ha.is_slave_ok(end):
                replica = self._ha.wait_replicated(end)
            else:
                # stored on the master only; the client decides (RocketMQ's
                # SendStatus.SLAVE_NOT_AVAILABLE)
                answer.code = ResponseCode.SLAVE_NOT_AVAILABLE
                answer.remark = SLAVE_NOT_AVAILABLE_REMARK
        waits = [f for f in (flush, replica) if f is not None and not settled_ok(f)]
        if not waits:
            return answer
        # the waits hold the answer only, not the request and its body
        left = [len(waits)]

        def one_done(_: asyncio.Future[bool]) -> None:
            left[0] -= 1
            if left[0] == 0:
                conn.send_soon(durable_answer(answer, flush, replica))

        for w in waits:
            w.add_done_callback(one_done)
        return None

    def _topic_for_send(self, topic: str, f: dict[str, str]) -> TopicConfig:
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise NoPermissionError(f"sending message to topic[{topic}] is forbidden")
        tc = self.topics.get(topic)
        if tc is None:
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = self.topics.create_system_group_topic(
                    topic,
                    self._retry_queue_nums(topic[len(RETRY_GROUP_TOPIC_PREFIX) :]),
                    PERM_READ | PERM_WRITE,
                )
            else:
                tc = self.topics.create_in_send(
                    topic, f.get("defaultTopic", TBW102), _int(f, "defaultTopicQueueNums", 4)
                )
        if not tc.writable:
            raise NoPermissionError(f"the topic[{topic}] sending message is forbidden")
        return tc

    def _send_batch(
        self,
        cmd: RemotingCommand,
        conn: Connection,
        topic: str,
        queue_id: int,
        sysflag: int,
        born_ts: int,
        props: str,
    ) -> HandlerResult:
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise MessageIllegalError("batch request does not support retry group topic")
        if "DELAY\x01" in props:
            raise MessageIllegalError("batch messages cannot have a delay level")
        if sysflag & _TX_MASK or _is_half_message(0, props):
            raise MessageIllegalError("batch messages cannot be transactional")
        body = cmd.body
        if not sysflag & SYSFLAG_COMPRESSED:
            return self._put_batch(cmd, conn, topic, queue_id, sysflag, born_ts, props, body)
        sysflag &= ~SYSFLAG_COMPRESSED
        if len(body) <= INFLATE_INLINE_MAX:
            body = self._inflate(body)
            return self._put_batch(cmd, conn, topic, queue_id, sysflag, born_ts, props, body)
        return self._inflate_then_put(cmd, conn, topic, queue_id, sysflag, born_ts, props, body)

    async def _inflate_then_put(
        self,
        cmd: RemotingCommand,
        conn: Connection,
        topic: str,
        queue_id: int,
        sysflag: int,
        born_ts: int,
        props: str,
        compressed: bytes,
    ) -> RemotingCommand | None:
        """A large compressed batch is inflated on the inflate thread (zlib
        releases the GIL), not on the event loop; the put follows on the loop."""
        if self._inflater is None:
            self._inflater = single_thread_executor("pyrmq-inflate")
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(self._inflater, self._inflate, compressed)
        result = self._put_batch(cmd, conn, topic, queue_id, sysflag, born_ts, props, body)
        assert result is None or isinstance(result, RemotingCommand)
        return result

    def _inflate(self, body: bytes) -> bytes:
        limit = self.max_message_size * BATCH_INFLATE_FACTOR
        try:
            d = zlib.decompressobj()
            out = d.decompress(body, limit + 1)
        except zlib.error as e:
            raise MessageIllegalError(f"compressed batch body does not inflate: {e}") from None
        if d.unconsumed_tail or len(out) > limit:
            raise MessageIllegalError(f"the inflated batch is larger than {limit} bytes")
        return out

    def _put_batch(
        self,
        cmd: RemotingCommand,
        conn: Connection,
        topic: str,
        queue_id: int,
        sysflag: int,
        born_ts: int,
        props: str,
        body: bytes,
    ) -> HandlerResult:
        first_props = None
        if self.dedup is not None:
            each = batch_properties(body)
            if each:
                first_props = each[0]
                found = self.dedup.stored_batch(topic, each)
                if found is not None:
                    m, length = found
                    host = m["store_host"]
                    ids = self.store.core.offset_msg_ids(host, m["commit_log_offset"], length)
                    return self._answer_stored(conn, cmd, m, ids, length)
        with _STORE_ERRORS:
            r = self.store.put_messages_nowait(
                topic,
                queue_id,
                body,
                sysflag=sysflag,
                born_timestamp=born_ts,
                born_host=born_host_of(conn),
            )
        if self.dedup is not None and first_props is not None:
            self.dedup.remember(topic, first_props, r)
        if self.stats is not None:
            self.stats.inc_topic_put(topic, r.count, r.wrote_bytes)
        if self.tallies is not None:
            self.tallies.sent(topic, "normal", r.count, len(body))
        ids = self.store.core.offset_msg_ids(r.store_host, r.phys_offset, r.wrote_bytes)
        return self._answer(conn, cmd, r, ids, queue_id, props)

    def shutdown(self) -> None:
        if self.fast is not None:
            self.fast.close()  # its C send threads put into the store
        if self._inflater is not None:
            self._inflater.shutdown(wait=True, cancel_futures=True)
            self._inflater = None

    def _scheduled(self, topic: str, queue_id: int, props: str) -> tuple[str, int, str]:
        """Divert a DELAY message to SCHEDULE_TOPIC_XXXX (queue level - 1)."""
        p = rmqcore.decode_properties(props)
        try:
            level = int(p.get("DELAY", "0"))
        except ValueError:
            raise MessageIllegalError(f"DELAY property {p.get('DELAY')!r} is not a level") from None
        if level <= 0:
            return topic, queue_id, props
        level = min(level, self.delay_levels)
        p["REAL_TOPIC"] = topic
        p["REAL_QID"] = str(queue_id)
        return SCHEDULE_TOPIC, level - 1, rmqcore.encode_properties(p).decode()

    @staticmethod
    def _timed(
        topic: str, queue_id: int, props: str, max_delay_ms: int
    ) -> tuple[str, int, str] | None:
        """Divert a timed message (TIMER_DELIVER_MS, or TIMER_DELAY_SEC from
        now) to the timer's topic; None when it is due already."""
        p = rmqcore.decode_properties(props)
        now = int(time.time() * 1000)
        try:
            if "TIMER_DELIVER_MS" in p:
                due = int(p["TIMER_DELIVER_MS"])
            else:
                due = now + int(p["TIMER_DELAY_SEC"]) * 1000
        except ValueError:
            raise MessageIllegalError(
                "TIMER_DELIVER_MS and TIMER_DELAY_SEC must be integers (ms since the epoch, s)"
            ) from None
        if due - now > max_delay_ms:
            raise MessageIllegalError(
                f"timer message is due in {(due - now) // 1000} s, beyond timerMaxDelaySec "
                f"({max_delay_ms // 1000} s)"
            )
        if due <= now:
            return None
        p["TIMER_DELIVER_MS"] = str(due)
        p.pop("TIMER_DELAY_SEC", None)
        p["REAL_TOPIC"] = topic
        p["REAL_QID"] = str(queue_id)
        return TIMER_TOPIC, 0, rmqcore.encode_properties(p).decode()

    def _ensure_dlq(self, group: str) -> TopicConfig:
        return self.topics.create_system_group_topic(dlq_topic(group), 1, PERM_READ | PERM_WRITE)

    # -- CONSUMER_SEND_MSG_BACK -------------------------------------------------

    def process_send_back(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """Put a message a consumer failed on into %RETRY%<group> (through
        the delay levels) or, after maxReconsumeTimes, into %DLQ%<group>."""
        if self._slave:
            raise ServiceNotAvailableError(
                "service not available now: a slave takes no messages back; send them to "
                "the master (brokerId 0)"
            )
        f = cmd.ext_fields
        group = f.get("group", "")
        if not group:
            raise MessageIllegalError("CONSUMER_SEND_MSG_BACK lacks group")
        offset = _int(f, "offset")
        delay_level = _int(f, "delayLevel", 0)
        max_times, retry_queues = self.max_reconsume_times, self.retry_queue_nums
        if self.groups is not None:
            sgc = self.groups.require(group)
            max_times, retry_queues = sgc.retry_max_times, sgc.retry_queue_nums
        if cmd.version >= 121 and f.get("maxReconsumeTimes"):
            max_times = _int(f, "maxReconsumeTimes")
        if retry_queues <= 0:
            # the group takes no retries: the message is dropped, as RocketMQ does
            return cmd.response(ResponseCode.SUCCESS)
        rtopic = self.topics.create_system_group_topic(
            retry_topic(group), retry_queues, PERM_READ | PERM_WRITE
        )
        try:
            msg = self.store.look_message_by_offset(offset)
        except (StoreError, ValueError):
            raise BrokerSystemError(f"look message by offset failed, {offset}") from None
        props = rmqcore.decode_properties(msg["properties"])
        if "RETRY_TOPIC" not in props:
            props["RETRY_TOPIC"] = msg["topic"]
        props["WAIT"] = "false"
        reconsume = msg["reconsume_times"]
        if reconsume >= max_times or delay_level < 0:
            tc = self._ensure_dlq(group)
            topic, queue_id, level = tc.topic_name, 0, 0
        else:
            topic, queue_id = rtopic.topic_name, random.randrange(rtopic.write_queue_nums or 1)
            level = delay_level if delay_level > 0 else 3 + reconsume
        if "ORIGIN_MESSAGE_ID" not in props:
            props["ORIGIN_MESSAGE_ID"] = props.get("UNIQ_KEY") or rmqcore.offset_msg_id(
                msg["store_host"], msg["commit_log_offset"]
            )
        props.pop("DELAY", None)
        if level > 0:
            level = min(level, self.delay_levels)
            props["DELAY"] = str(level)
            props["REAL_TOPIC"] = topic
            props["REAL_QID"] = str(queue_id)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
        with _STORE_ERRORS:
            self.store.put_copy(msg, topic, queue_id, props, reconsume + 1)
        if self.stats is not None:
            self.stats.inc_send_back(group, msg["topic"])
        return cmd.response(ResponseCode.SUCCESS)


class _StoreErrors:
    """`with _STORE_ERRORS:` store exceptions of a put as the RocketMQ
    codes a producer expects (a class, not a generator context manager: it
    is on every send's path)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, tp: type[BaseException] | None, e: BaseException | None, tb: object
    ) -> Literal[False]:
        if e is None:
            return False
        if isinstance(e, IllegalMessageError):
            raise MessageIllegalError(str(e)) from None
        if isinstance(e, DiskFullError):
            # RocketMQ's words first: "service not available now. It may be
            # caused by one of the following reasons: the broker's disk is
            # full [CL: ...], ..."; then what exactly refused
            raise ServiceNotAvailableError(
                f"service not available now: the broker's disk is full [{e}]; free space or "
                "let retention delete expired files"
            ) from None
        if isinstance(e, StoreError):
            raise BrokerSystemError(f"store error: {e}") from None
        if isinstance(e, OSError):
            # the put's only system calls create the next CommitLog or
            # ConsumeQueue file: out of descriptors (EMFILE), of memory for
            # the mapping, an I/O error (RocketMQ's CREATE_MAPPEDFILE_FAILED)
            raise BrokerSystemError(
                f"create mapped file failed, server is busy or broken: {e}"
            ) from None
        return False


_STORE_ERRORS = _StoreErrors()
