"""Client auto-batching: concurrent single sends to one queue go out as one
SEND_BATCH_MESSAGE (RocketMQ 5's ProduceAccumulator, Java's `autoBatch`;
Kafka's `linger.ms` + `batch.size`), each caller still getting its own
SendResult or its own error.

A Producer with auto_batch on hands each batchable send() / send_async()
of one Message to its SendAccumulator, which keeps one open batch per key:
(topic, None) for queues picked round robin (the batch picks its queue when
it leaves, as one send would), (topic, queue) for a queue the caller named
or its selector chose. An open batch leaves

- at once, when it holds `max_bytes` of entries or MAX_COUNT messages;
- at the end of the event loop's iteration (loop.call_soon) when no batch
  of its key is in flight: a lone awaited send waits one loop turn, not
  the delay;
- otherwise when a batch of its key is answered, or `max_delay` seconds
  after its first message, whichever comes first: while the broker works on
  one batch the next one fills (a group commit, as the broker's own SYNC
  flush is). max_delay 0: always at the end of the loop iteration.

A batch of one message goes as the plain single send it is. A batch goes
through the producer's usual send (queue choice, retries on another broker,
fault bookkeeping, deadline: the earliest of its callers'); the answer's
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
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import rmqcore
from pyrmq.common.errors import ClientError
from pyrmq.common.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    Message,
    MessageQueue,
    new_unique_id,
)
from pyrmq.common.results import SendResult
from pyrmq.common.topics import RETRY_GROUP_TOPIC_PREFIX
from pyrmq.producer.prepare import SendJob, check_message
from pyrmq.producer.selector import MessageQueueSelector

if TYPE_CHECKING:
    from pyrmq.producer.producer import Producer, SendCallback

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
ENTRY_FIXED = 22
#: what a UNIQ_KEY property the encoder adds takes ("UNIQ_KEY", 32 hex
#: digits, two separators)
_UNIQ_BYTES = 42
#: properties that make a message unbatchable (the broker refuses them in
#: a batch, or treats them per message)
_SINGLE_ONLY = (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TRANSACTION_PREPARED)

#: a send whose deadline passed while it lingered still gets one attempt
#: this long (the linger is at most max_delay, 10 ms by default)
_MIN_TIMEOUT = 0.001

Key = tuple[str, MessageQueue | None]


class _Entry:
    """One caller's message in an open batch."""

    __slots__ = ("callback", "counted", "deadline", "mq", "msg", "out", "retries")

    def __init__(
        self,
        msg: Message,
        mq: MessageQueue | None,
        out: asyncio.Future[SendResult],
        callback: SendCallback | None,
        counted: bool,
        deadline: float,
        retries: int,
    ) -> None:
        self.msg = msg
        self.mq = mq
        self.out = out
        self.callback = callback
        self.counted = counted
        self.deadline = deadline
        self.retries = retries


class _Open:
    """The open batch of one key."""

    __slots__ = ("entries", "handle", "size")

    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self.size = 0
        self.handle: asyncio.Handle | None = None


class SendAccumulator:
    """The auto-batching of one Producer (ProduceAccumulator). Counters:
    `batches` requests that carried more than one message, `batched`
    messages they carried, `singles` flushes of a lone message."""

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
        self._p = producer
        self.max_delay = max_delay_ms / 1000
        self.max_bytes = max_bytes
        self._open: dict[Key, _Open] = {}
        #: requests of each key sent and not yet answered
        self._busy: dict[Key, int] = {}
        self.batches = 0
        self.batched = 0
        self.singles = 0

    @property
    def stats(self) -> dict[str, int]:
        """batches: requests that carried more than one single send;
        batched: the sends they carried; singles: sends that went alone
        through the batcher (nothing to batch them with)."""
        return {"batches": self.batches, "batched": self.batched, "singles": self.singles}

    @property
    def pending(self) -> int:
        """Messages in open batches, not sent yet."""
        return sum(len(b.entries) for b in self._open.values())

    # -- taking sends -------------------------------------------------------------------

    def offer(
        self,
        msg: Message,
        mq: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
        timeout: float | None,
        retries: int,
        callback: SendCallback | None,
        counted: bool,
    ) -> asyncio.Future[SendResult] | None:
        """The future of msg's send when it joins a batch; None when it
        cannot be batched (the caller sends it alone). Raises ClientError
        for a message no broker would take, as the single path does.
        timeout None: the producer's send_msg_timeout."""
        size = self._entry_size(msg)
        if size is None:
            return None
        check_message(msg, self._p.max_message_size)
        topic = msg.topic
        if selector is not None:
            info = self._p.topic_publish_info_table.get(topic)
            if info is None or not info.queues:
                return None
            try:
                picked = selector(list(info.queues), msg, arg)
            except Exception:
                return None  # the single path reports it
            if not isinstance(picked, MessageQueue):
                return None
            mq = picked
        elif mq is not None and mq.topic != topic:
            raise ClientError(f"queue {mq} is not a queue of topic {topic!r}")
        if timeout is None:
            timeout = self._p.send_msg_timeout
        loop = asyncio.get_running_loop()
        out: asyncio.Future[SendResult] = loop.create_future()
        key = (topic, mq)
        batch = self._open.get(key)
        if batch is not None and (
            batch.size + size > self.max_bytes or len(batch.entries) >= MAX_COUNT
        ):
            self._flush(key)
            batch = None
        if batch is None:
            batch = self._open[key] = _Open()
        batch.entries.append(
            _Entry(msg, mq, out, callback, counted, loop.time() + timeout, retries)
        )
        batch.size += size
        if counted:
            self._p._inflight += 1
        if batch.size >= self.max_bytes or len(batch.entries) >= MAX_COUNT:
            self._flush(key)
        elif batch.handle is None:
            if self.max_delay == 0 or not self._busy.get(key):
                batch.handle = loop.call_soon(self._flush, key, batch)
            else:
                batch.handle = loop.call_later(self.max_delay, self._flush, key, batch)
        return out

    def _entry_size(self, msg: Message) -> int | None:
        """msg's bytes in a batch (properties estimated), or None when msg
        takes the single path."""
        if not isinstance(msg, Message):
            return None
        props = msg.properties
        if props:
            for k in _SINGLE_ONLY:
                if k in props:
                    return None
            if props.get(PROPERTY_WAIT_STORE_MSG_OK) == "false":
                return None
            for k in props:
                if k.startswith("TIMER_") or k == "__STARTDELIVERTIME":
                    return None
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return None
        n = len(msg.body)
        if n >= self._p.compress_msg_body_over_howmuch:
            return None
        plen = sum(len(k) + len(v) + 2 for k, v in props.items()) if props else 0
        if PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
            plen += _UNIQ_BYTES
        size = ENTRY_FIXED + n + plen
        return size if size <= self.max_bytes else None

    # -- sending batches ----------------------------------------------------------------

    def flush_all(self) -> None:
        """Send every open batch now (shutdown)."""
        for key in list(self._open):
            self._flush(key)

    def _flush(self, key: Key, which: _Open | None = None) -> None:
        batch = self._open.get(key)
        if batch is None or (which is not None and batch is not which):
            return  # sent already (by size, or an answer, before its timer)
        del self._open[key]
        if batch.handle is not None:
            batch.handle.cancel()
        entries = batch.entries
        if len(entries) == 1:
            self._send_alone(key, entries[0])
            return
        p = self._p
        msgs = [e.msg for e in entries]
        head, seq = new_unique_id.reserve(len(msgs))
        try:
            body, ids = rmqcore.encode_message_batch(
                msgs, key[0], head, seq, p.max_message_size, Message
            )
        except (ValueError, TypeError):
            # a property the encoder refuses: each message alone, so only
            # its own caller hears of it
            for e in entries:
                self._send_alone(key, e)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        timeout = max(min(e.deadline for e in entries) - now, _MIN_TIMEOUT)
        retries = min(e.retries for e in entries)
        job = SendJob(key[0], body, "", 0, ids, 0, True, msgs[0], key[1], None, None)
        self.batches += 1
        self.batched += len(entries)
        self._busy[key] = self._busy.get(key, 0) + 1
        p._inflight += 1  # shutdown waits for the batch
        born = int(time.time() * 1000)
        p._send_future(
            job, timeout, retries, self._answered(key, entries, ids, born, now), counted=True
        )

    def _answered(
        self, key: Key, entries: list[_Entry], ids: str, born: int, sent_at: float
    ) -> Callable[[SendResult | None, BaseException | None], None]:
        """The batch's callback: each caller's own result, or the error."""

        def done(result: SendResult | None, exc: BaseException | None) -> None:
            p = self._p
            self._idle(key)
            if exc is not None or result is None:
                error = exc or ClientError("the batch send ended without a result")
                error.add_note(f"sent in one batch with {len(entries) - 1} other message(s)")
                for e in entries:
                    p._settle(e.out, e.callback, e.counted, None, error)
                return
            uniq = ids.split(",")
            offset_ids = result.offset_msg_id.split(",")
            if len(offset_ids) != len(entries):
                offset_ids = [""] * len(entries)
            first = result.queue_offset
            tracer = p.tracer
            addr = ""
            cost = 0
            if tracer is not None:
                addr = p.client.find_broker_addr(result.message_queue.broker_name) or ""
                cost = int((asyncio.get_running_loop().time() - sent_at) * 1000)
            for i, e in enumerate(entries):
                r = SendResult(
                    result.send_status,
                    uniq[i],
                    offset_ids[i],
                    result.message_queue,
                    first + i if first >= 0 else first,
                    result.transaction_id,
                    result.region_id,
                )
                if tracer is not None:
                    tracer.append_pub(e.msg, r, addr, born, cost)
                p._settle(e.out, e.callback, e.counted, r, None)

        return done

    def _send_alone(self, key: Key, e: _Entry) -> None:
        """One message as a plain send: its own SEND_MESSAGE_V2."""
        p = self._p
        try:
            job = p._job(e.msg, e.mq, None, None)
        except (ClientError, TypeError) as exc:
            p._settle(e.out, e.callback, e.counted, None, exc)
            return
        self.singles += 1
        self._busy[key] = self._busy.get(key, 0) + 1
        e.out.add_done_callback(lambda _f: self._idle(key))
        timeout = max(e.deadline - asyncio.get_running_loop().time(), _MIN_TIMEOUT)
        p._send_future(job, timeout, e.retries, e.callback, e.counted, out=e.out)

    def _idle(self, key: Key) -> None:
        """A request of key was answered: its next batch may go."""
        left = self._busy.get(key, 0) - 1
        if left > 0:
            self._busy[key] = left
        else:
            self._busy.pop(key, None)
        if key in self._open:
            self._flush(key)
