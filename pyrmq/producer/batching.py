"""Client auto-batching: concurrent single sends to one queue go out as one
SEND_BATCH_MESSAGE (RocketMQ 5's ProduceAccumulator, Java's `autoBatch`;
Kafka's `linger.ms` + `batch.size`), each caller still getting its own
SendResult or its own error.

A Producer with auto_batch on hands each batchable send() / send_async()
of one Message to its SendAccumulator, which keeps one open batch per key:
the topic for queues picked round robin (the batch picks its queue when it
leaves, as one send would), the queue the caller named or its selector
chose otherwise. An open batch leaves

- at once, when it holds `max_bytes` of entries or MAX_COUNT messages;
- when a request of its key is answered, or `max_delay` seconds after its
  first message, whichever comes first: while the broker works on one
  request the next batch fills (a group commit, as the broker's own SYNC
  flush is); max_delay 0: at the end of the event loop's iteration
  (loop.call_soon).

A send that finds nothing of its key in flight and no open batch is not
held at all: it leaves at once as a plain single send, and the sends that
come while it is in flight make the next batch. What a lone awaited send
still pays is
the bookkeeping, ~3 µs (~3% of its p50 in bench.duel); holding it to the
end of the loop iteration instead cost 11% (0.163 against 0.147 ms).

A batched message gets its UNIQ_KEY (msg_id) when its batch is encoded,
in C, not when send_async() returns; read it from the SendResult.

What runs once a message is in C (rmqcore/_batching.pyx): offer(), the
step every send takes, and the settling of a batch's callers; the rules
below and every step off that common path are here.

A batch that holds one message when it leaves goes as a plain single
send. A batch goes through the producer's usual send (queue choice,
retries on another broker, fault bookkeeping, deadline: the earliest of
its callers'); the answer's
msgId is the messages' offset ids joined by commas, its queueOffset the
first message's, so message i gets offset id i and queue offset first + i
(what the Java broker answers a batch, and ours). A failed batch fails
every caller with the same error. A batch whose encoding fails (a
malformed property) is sent message by message instead, so only the bad
message's caller sees an error.

Not batched (the single path, as without auto_batch): delayed, timer and
transactional (half) messages, %RETRY% topics, messages that ask not to
wait for the store (WAIT=false), bodies the producer would compress (at
least compress_msg_body_over_howmuch bytes: a batch is sent uncompressed),
entries over max_bytes, oneway sends, explicit batches, a selector send
before the topic's route is known."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import rmqcore
from pyrmq.common.errors import ClientError
from pyrmq.common.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_START_DELIVER_TIME,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    MessageQueue,
    new_unique_id,
)
from pyrmq.common.results import SendResult, send_result_maker
from pyrmq.common.topics import RETRY_GROUP_TOPIC_PREFIX
from pyrmq.producer.prepare import SendJob, check_message
from pyrmq.producer.selector import MessageQueueSelector

if TYPE_CHECKING:
    from pyrmq.producer.producer import Producer, SendCallback

log = logging.getLogger("pyrmq.producer")

#: topics whose names were checked, remembered up to this many
_CHECKED_TOPICS = 1024
#: messages in one batch at most: the answer carries one 32-character offset
#: id per message in its header (1,024 make a 33 KiB msgId field)
MAX_COUNT = 1024
#: batch_max_delay_ms and batch_max_bytes when not given (Java autoBatch's
#: batchMaxDelayMs is 10 and batchMaxBytes 32 KiB; 128 B bodies fill 32 KiB
#: with ~200 messages, so a window of 1,024 sends is ~5 batches)
DEFAULT_MAX_DELAY_MS = 10
DEFAULT_MAX_BYTES = 32 * 1024
#: a batch entry's fixed bytes (TOTALSIZE, MAGICCODE, BODYCRC, FLAG,
#: BODYLEN, PROPERTIESLENGTH): rmq_format.h section 4
ENTRY_FIXED = rmqcore.BATCH_ENTRY_FIXED
#: what a UNIQ_KEY property the encoder adds takes ("UNIQ_KEY", 32 hex
#: digits, two separators)
_UNIQ_BYTES = 42
#: properties that make a message unbatchable (the broker refuses them in
#: a batch, or treats them per message)
_SINGLE_ONLY = (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_START_DELIVER_TIME,
)
#: and properties named so (timer messages: TIMER_DELIVER_MS, ...); a
#: WAIT=false message too (it does not wait for the store)
_SINGLE_ONLY_PREFIXES = ("TIMER_",)

#: a send whose deadline passed while it lingered still gets one attempt
#: this long (the linger is at most max_delay, 10 ms by default)
_MIN_TIMEOUT = 0.001

#: an open batch's key: the topic (queues round robin) or the queue named
#: or selected (no tuple: one more object to collect per message costs the
#: garbage collector's time on this path)
Key = str | MessageQueue


class SendAccumulator(rmqcore.SendAccumulatorCore):
    """The auto-batching of one Producer (ProduceAccumulator). offer(msg,
    mq, selector, arg, timeout, retries, callback, counted), every send's
    step, is rmqcore.SendAccumulatorCore's: the future of msg's send when
    it joins a batch; None when it cannot be batched (the caller sends it
    alone); raises ClientError for a message no broker would take, as the
    single path does; timeout None: the producer's send_msg_timeout.
    Counters: `batches` requests that carried more than one message,
    `batched` messages they carried, `singles` flushes of a lone message."""

    def __init__(self, producer: Producer, max_delay_ms: int, max_bytes: int | None) -> None:
        if max_bytes is None:
            max_bytes = min(DEFAULT_MAX_BYTES, producer.max_message_size)
        if max_delay_ms < 0:
            raise ValueError(f"batch_max_delay_ms must be >= 0, got {max_delay_ms}")
        if max_bytes <= 0:
            raise ValueError(
                f"batch_max_bytes must be > 0 (bytes of one batch request), got {max_bytes}"
            )
        if max_bytes > producer.max_message_size:
            raise ValueError(
                f"batch_max_bytes ({max_bytes}) must not exceed max_message_size "
                f"({producer.max_message_size}): the broker refuses larger batches"
            )
        super().__init__(
            producer,
            Message,
            max_bytes,
            max_delay_ms / 1000,
            MAX_COUNT,
            ENTRY_FIXED,
            PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
            _UNIQ_BYTES,
            _SINGLE_ONLY,
            _SINGLE_ONLY_PREFIXES,
            PROPERTY_WAIT_STORE_MSG_OK,
        )

    @property
    def stats(self) -> dict[str, int]:
        """batches: requests that carried more than one single send;
        batched: the sends they carried; singles: sends that went alone
        through the batcher (nothing to batch them with)."""
        return {"batches": self.batches, "batched": self.batched, "singles": self.singles}

    @property
    def pending(self) -> int:
        """Messages in open batches, not sent yet."""
        return sum(len(b) for b in self._open.values())

    # -- the steps offer() takes off its common path -----------------------------------

    def _check_topic(self, msg: Message) -> bool:
        """True when msg's topic may be batched (not a %RETRY% topic);
        raises what a broker would refuse (check_message)."""
        p = self._p
        check_message(msg, p.max_message_size)
        ok = not msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        if len(self._topics) >= _CHECKED_TOPICS:
            self._topics.clear()
        self._topics[msg.topic] = ok
        return ok

    def _refuse_queue(self, mq: MessageQueue, topic: str) -> None:
        raise ClientError(f"queue {mq} is not a queue of topic {topic!r}")

    def _select(
        self, msg: Message, selector: MessageQueueSelector, arg: Any
    ) -> MessageQueue | None:
        """The selector's queue for msg while the topic's route is known;
        None otherwise, or when the selector fails (the single path then
        reports that)."""
        info = self._p.topic_publish_info_table.get(msg.topic)
        if info is None or not info.queues:
            return None
        try:
            picked = selector(list(info.queues), msg, arg)
        except Exception:
            return None
        return picked if isinstance(picked, MessageQueue) else None

    # -- sending batches ----------------------------------------------------------------

    def flush_all(self) -> None:
        """Send every open batch now (shutdown)."""
        for key in list(self._open):
            self._flush(key)

    def _flush(self, key: Key, which: rmqcore.SendBatch | None = None) -> None:
        batch = self._open.get(key)
        if batch is None or (which is not None and batch is not which):
            return  # sent already (full, or an answer came first)
        del self._open[key]
        if batch.handle is not None:
            batch.handle.cancel()
        msgs = batch.msgs
        if len(msgs) == 1:
            self._send_alone(key, batch, 0)
            return
        p = self._p
        head, seq = new_unique_id.reserve(len(msgs))
        try:
            body, ids = rmqcore.encode_message_batch(
                msgs, msgs[0].topic, head, seq, p.max_message_size, Message
            )
        except (ValueError, TypeError):
            # a property the encoder refuses: each message alone, so only
            # its own caller hears of it
            for i in range(len(msgs)):
                self._send_alone(key, batch, i)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        timeout = max(batch.timeout - (now - batch.opened), _MIN_TIMEOUT)
        mq = key if isinstance(key, MessageQueue) else None
        job = SendJob(msgs[0].topic, body, "", 0, ids, 0, True, msgs[0], mq, None, None)
        self.batches += 1
        self.batched += len(msgs)
        self._busy[key] = self._busy.get(key, 0) + 1
        p._inflight += 1  # shutdown waits for the batch
        born = int(time.time() * 1000)
        done = functools.partial(self._answered, key, batch, ids, born, now)
        try:
            p._send_future(job, timeout, batch.retries, done, counted=True)
        except Exception as e:  # nothing went out: every caller hears why
            p._inflight -= 1
            done(None, e)

    def _answered(
        self,
        key: Key,
        batch: rmqcore.SendBatch,
        ids: str,
        born: int,
        sent_at: float,
        result: SendResult | None,
        exc: BaseException | None,
    ) -> None:
        """The batch's answer: each caller's own result, or the error; then
        the key's next batch may go. Whatever goes wrong here, no caller is
        left waiting."""
        try:
            self._settle_batch(batch, ids, born, sent_at, result, exc)
        except BaseException as e:
            for out in batch.outs:
                if not out.done():
                    out.set_exception(e)
            raise
        finally:
            self._idle(key)

    def _settle_batch(
        self,
        batch: rmqcore.SendBatch,
        ids: str,
        born: int,
        sent_at: float,
        result: SendResult | None,
        exc: BaseException | None,
    ) -> None:
        p = self._p
        p._inflight -= batch.counted_total
        if p._inflight == 0 and p._idle is not None:
            p._idle.set()
        if exc is not None or result is None:
            error = exc or ClientError("the batch send ended without a result")
            error.add_note(f"sent in one batch with {len(batch) - 1} other message(s)")
            batch.fail(error, log)
            return
        mq = result.message_queue
        tracer, addr, cost = p.tracer, "", 0
        if tracer is not None:
            addr = p.client.find_broker_addr(mq.broker_name) or ""
            cost = int((asyncio.get_running_loop().time() - sent_at) * 1000)
        batch.settle(
            send_result_maker,
            result.send_status,
            ids,
            result.offset_msg_id,
            mq,
            result.queue_offset,
            result.transaction_id,
            result.region_id,
            tracer,
            addr,
            born,
            cost,
            log,
        )

    def _send_now(
        self,
        key: Key,
        msg: Message,
        timeout: float | None,
        retries: int,
        callback: SendCallback | None,
        counted: bool,
    ) -> asyncio.Future[SendResult]:
        """msg as a plain send, at once, its queue marked busy until it is
        answered."""
        p = self._p
        job = p._job(msg, key if isinstance(key, MessageQueue) else None, None, None, checked=True)
        self.singles += 1
        self._busy[key] = self._busy.get(key, 0) + 1
        if counted:
            p._inflight += 1
        return p._send_future(job, timeout, retries, self._then_idle(key, callback), counted)

    def _then_idle(
        self, key: Key, callback: SendCallback | None
    ) -> Callable[[SendResult | None, BaseException | None], None]:
        """A send callback that marks key's request answered, then calls
        `callback`: run where the answer is read, before the caller's task
        wakes (a done-callback on the future was one more loop handle on a
        lone awaited send's round trip)."""

        def answered(result: SendResult | None, exc: BaseException | None) -> None:
            self._idle(key)
            if callback is not None:
                callback(result, exc)

        return answered

    def _send_alone(self, key: Key, batch: rmqcore.SendBatch, i: int) -> None:
        """Message i of batch as a plain send: its own SEND_MESSAGE_V2."""
        p = self._p
        msg, out, callback, counted = batch.entry(i)
        try:
            mq = key if isinstance(key, MessageQueue) else None
            job = p._job(msg, mq, None, None, checked=True)
        except Exception as exc:  # this caller's alone: the batch's others still go
            p._settle(out, callback, counted, None, exc)
            return
        self.singles += 1
        self._busy[key] = self._busy.get(key, 0) + 1
        loop = asyncio.get_running_loop()
        timeout = max(batch.timeout - (loop.time() - batch.opened), _MIN_TIMEOUT)
        done = self._then_idle(key, callback)
        p._send_future(job, timeout, batch.retries, done, counted, out=out)

    def _idle(self, key: Key) -> None:
        """A request of key was answered: its next batch may go."""
        left = self._busy.get(key, 0) - 1
        if left > 0:
            self._busy[key] = left
        else:
            self._busy.pop(key, None)
        if key in self._open:
            self._flush(key)
