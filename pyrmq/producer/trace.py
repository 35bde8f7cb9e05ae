"""TraceDispatcher: writes a client's trace records to the trace topic,
asynchronously and in batches (RocketMQ's AsyncTraceDispatcher).

A producer or push consumer with ``enable_msg_trace=True`` hands its
records (pyrmq.common.trace) to ``append``, which encodes them into a
buffer in C (rmqcore.TraceBuffer; a producer's Pub records go to
``append_pub``, written there as each send is answered, no Python object
kept per send): a background task sends them, every ``flush_interval`` seconds or as soon as
``batch_size`` are queued, as messages of at most ``batch_size`` records
(BATCH_SIZE) and ``max_body`` bytes (RocketMQ's 128,000) to the trace topic
through a Producer of its own group (``_INNER_TRACE_PRODUCER-<group>``)
riding the traced client's connections, with send_async, zlib-compressed
(sysFlag COMPRESSED, which every RocketMQ reader inflates) on a C thread
that never takes the GIL (rmqcore.DeflateWorker): a flush hands full
bodies to it, and the next flush sends what it has compressed. Nothing a
trace does slows or fails the user's send or listener: a full queue
(``max_pending``) drops records (counted in ``dropped``), a failed trace
send is logged and counted (``failed``), and shutdown flushes for at most
``shutdown_timeout`` seconds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from pyrmq.common.message import COMPRESS_BODY_OVER, PROPERTY_KEYS, Message
from pyrmq.common.results import SendStatus
from pyrmq.common.trace import (
    DEFAULT_REGION,
    TRACE_PRODUCER_GROUP_PREFIX,
    TRACE_TOPIC,
    TraceRecord,
)
from rmqcore import MAX_PROPERTIES_LENGTH, DeflateWorker, TraceBuffer

if TYPE_CHECKING:
    from pyrmq.client.instance import ClientInstance

log = logging.getLogger("pyrmq.client")

#: records in a trace message: RocketMQ's clients put 100 in one; each
#: trace message costs the traced client's event loop about 35 us to take,
#: hand over, send and settle, whatever its records, and the broker a
#: message's store and dispatch: three times the records, a third of that
#: (measured: 0.50 -> 0.36 us of the loop per traced send). 300 records are
#: about 51 KB (3 KB compressed) and 10 KB of keys, within max_body and
#: MAX_TRACE_KEYS, and the trace tools read any number
BATCH_SIZE = 300
#: zlib level of trace messages: level 5 (RocketMQ's) deflates them only
#: 5% smaller and takes longer
TRACE_COMPRESS_LEVEL = 1
#: bytes of keys (message ids and keys) a trace message carries at most: a
#: CommitLog record holds MAX_PROPERTIES_LENGTH bytes of properties, and a
#: batch of messages with long keys would otherwise be refused, its records
#: lost; 8 KB are left for UNIQ_KEY and the other properties
MAX_TRACE_KEYS = MAX_PROPERTIES_LENGTH - 8 * 1024
#: trace messages handed to the compression thread and not yet sent; beyond
#: them (a thread that cannot keep up) a body is compressed on the loop
MAX_DEFLATING = 64
#: seconds between shutdown's looks at the compression thread's progress
_DEFLATE_POLL = 0.002


class TraceDispatcher:
    def __init__(
        self,
        client: ClientInstance,
        group: str,
        trace_topic: str | None = None,
        *,
        batch_size: int = BATCH_SIZE,
        max_body: int = 128_000,
        flush_interval: float = 0.1,
        max_pending: int = 20_000,
        shutdown_timeout: float = 5.0,
    ) -> None:
        # imported here: producer.py starts a TraceDispatcher of its own
        from pyrmq.producer.producer import Producer

        self.trace_topic = trace_topic or TRACE_TOPIC
        #: the traced client's group (of its Pub records)
        self.group = group
        self.batch_size = batch_size
        self.max_body = max_body
        self.flush_interval = flush_interval
        self.max_pending = max_pending
        self.shutdown_timeout = shutdown_timeout
        self.producer = Producer(
            f"{TRACE_PRODUCER_GROUP_PREFIX}-{group}"[:255],
            retry_times_when_send_async_failed=1,
            # compressed as every RocketMQ client compresses a body over
            # 4 KB, at zlib's fastest level: a batch of records shares most
            # of its bytes (group, topic, host, id prefixes), so 100 Pub
            # records (17 KB) deflate to 1 KB, and the broker stores a
            # fifth of the bytes (the keys, one message id a record, stay
            # as they are). The dispatcher's DeflateWorker does it, off the
            # loop; this producer only for a body the worker did not take
            compress_msg_body_over_howmuch=COMPRESS_BODY_OVER,
            compress_level=TRACE_COMPRESS_LEVEL,
            max_message_size=max(max_body, 4 << 20),
            # the traced client's connections (and its TLS and ACL): a
            # connection of its own costs the traced process a socket's
            # reads and writes of its own per trace message
            client_instance=client,
            # a trace message is a batch of records already; sent as it
            # always was, one request each (and not traced: no tracer here)
            auto_batch=False,
        )
        #: a flush is scheduled on the loop (call_soon), not yet run
        self._flush_scheduled = False
        self._loop_ref: asyncio.AbstractEventLoop | None = None
        #: the records, encoded in C (Pub records as each send is answered); every
        #: batch_size-th schedules a flush, so a busy producer's trace goes
        #: out a batch at a time (a burst of large trace messages each
        #: flush_interval would hold the broker from the user's sends)
        self._records = TraceBuffer(
            group, SendStatus.SEND_OK, DEFAULT_REGION, max_pending, batch_size, self._flush_soon
        )
        #: append_pub(message, send result, store host, began ms, cost ms):
        #: the Pub record of an answered send (never raises, never blocks;
        #: beyond max_pending, or unreadable, it is dropped and counted)
        self.append_pub = self._records.append
        #: compresses full trace messages on a thread of its own: about
        #: 33 us per 100 Pub records that the loop, where the traced
        #: client's sends run, no longer spends
        self._deflater = DeflateWorker(TRACE_COMPRESS_LEVEL, MAX_DEFLATING)
        self._deflate_failed = False
        self._drops_logged = 0
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Future[Any]] = set()
        #: trace messages sent and failed
        self.sent = 0
        self.failed = 0

    async def start(self) -> None:
        await self.producer.start()
        self._loop_ref = asyncio.get_running_loop()
        self._task = self._loop_ref.create_task(self._loop(), name="pyrmq:trace:dispatch")

    @property
    def dropped(self) -> int:
        """Records dropped: the queue was full, or a record's fields could
        not be read."""
        return self._records.dropped

    def append(self, record: TraceRecord) -> None:
        """Queue a SubBefore, SubAfter or EndTransaction record (never
        blocks, never raises)."""
        try:
            data, keys = record.encode(), record.trace_keys()
        except Exception as e:  # a record built with fields of the wrong kind
            self._records.dropped += 1
            self._records.last_error = e
            return
        self._records.append_encoded(data, keys)

    def _flush_soon(self) -> None:
        """A batch is ready: flush once the current callback is done (one
        loop callback per batch, however many records arrive meanwhile)."""
        if not self._flush_scheduled and self._loop_ref is not None:
            self._flush_scheduled = True
            self._loop_ref.call_soon(self._flush, True)

    async def _loop(self) -> None:
        """What waits less than a batch goes out every flush_interval."""
        while True:
            await asyncio.sleep(self.flush_interval)
            self._flush()

    def _flush(self, whole: bool = False) -> None:
        """Send what is queued, or with `whole` only full trace messages (a
        batch was appended: the records after the last full one wait for
        the next, or for the flush interval)."""
        self._flush_scheduled = False
        self._send_deflated()
        records = self._records
        for data, keys in records.take(self.max_body, self.batch_size, MAX_TRACE_KEYS, whole):
            if len(data) < COMPRESS_BODY_OVER or not self._deflate_later(data, keys):
                self._send(data, keys)  # the producer compresses it if it must
        if records.dropped != self._drops_logged:
            log.warning(
                "trace: %d trace records dropped so far (the last error: %r)",
                records.dropped,
                records.last_error,
            )
            self._drops_logged = records.dropped

    def _deflate_later(self, data: bytes, keys: str) -> bool:
        """Hand a trace message's body to the compression thread: False when
        it cannot take it (MAX_DEFLATING are out, or no thread started)."""
        try:
            return self._deflater.submit(data, keys)
        except Exception as e:  # no thread: the producer compresses on the loop
            if not self._deflate_failed:
                self._deflate_failed = True
                log.warning("trace: compressing trace messages on the event loop: %s", e)
            return False

    def _send_deflated(self, done: list[tuple[bytes | None, bytes, Any]] | None = None) -> None:
        """Send the trace messages the compression thread has done (or
        `done`, what its close gave back)."""
        for deflated, data, keys in self._deflater.done() if done is None else done:
            if deflated is None:  # not compressed (no memory, or closed): the producer does
                self._send(data, keys)
            else:
                self._send(deflated, keys, deflated=True)

    def _send(self, data: bytes, keys: str, *, deflated: bool = False) -> None:
        msg = Message(self.trace_topic, data)
        if keys:
            msg.properties[PROPERTY_KEYS] = keys
        try:
            if deflated:
                fut = self.producer.send_deflated_async(msg, self._sent)
            else:
                fut = self.producer.send_async(msg, self._sent)
        except Exception as e:  # not started, shut down, a bad topic
            self.failed += 1
            log.warning("trace: %d bytes of trace records not sent: %s", len(data), e)
            return
        self._inflight.add(fut)
        fut.add_done_callback(self._inflight.discard)

    def _sent(self, result: Any, exc: BaseException | None) -> None:
        if exc is None:
            self.sent += 1
        else:
            self.failed += 1
            log.warning("trace: a trace message to %s failed: %s", self.trace_topic, exc)

    async def shutdown(self) -> None:
        """Send what is queued (bounded in time), then stop."""
        self._loop_ref = None  # no more flushes scheduled by a batch
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.shutdown_timeout
        self._flush()
        # the compression thread's last bodies: each takes well under a
        # millisecond, so this waits for a few at most; what a starved
        # thread has not done in half the time is compressed here
        deflated_by = deadline - self.shutdown_timeout / 2
        while self._deflater.pending and loop.time() < deflated_by:
            await asyncio.sleep(_DEFLATE_POLL)
            self._send_deflated()
        self._send_deflated(self._deflater.close())
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=max(0.0, deadline - loop.time()))
        await self.producer.shutdown()
