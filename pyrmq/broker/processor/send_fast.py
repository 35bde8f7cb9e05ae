"""The common send served in C: SendFastPath drives rmqcore.SendPath.

A SEND_MESSAGE / SEND_MESSAGE_V2 that is not a batch, not delayed or timed,
not transactional, not to a retry topic, to a topic the Python path has
already served, goes from its frame to the stored record and its encoded
answer inside rmqcore (rmqcore/_sendpath.pyx), while the connection splits
its frames: no RemotingCommand, dict or task per message. Everything else,
and every request the C path has a doubt about, goes to
SendMessageProcessor.process_send, which stays the one definition of what a
send does; a test pins the C path's records and answers to it byte for
byte (tests/integration/test_send_fast.py).

This module does what is per chunk of frames, not per message: whether the
C path may run at all (it does not while ACL, duplicate detection, a
slave role, a read-only broker, a full disk or a lagging
SYNC_FLUSH disk are in play), and after a chunk the topic statistics, the
arrival notices to long-polling pulls, the index and allocation wake-ups,
and in SYNC_FLUSH and on a SYNC_MASTER one wait for the chunk's last byte
to be durable and held by the slaves before its answers go out together.

brokerConfig sendFastPathEnable (pyrmq, default true) turns it off.

More than one core: with sendMessageThreadPoolNums > 1, a chunk of at least
LANE_MIN_BYTES of whole frames is handed to one of the C send threads
(rmqcore/_sendlanes.pyx) instead of being served inline; the loop meanwhile
serves the other connections. The connection splits nothing more until the
chunk comes back: what it reads meanwhile is kept, up to LANE_HOLD_BYTES,
past which it stops reading. The pool's eventfd wakes the loop, which then
finishes the chunk as an inline one: bookkeeping, answers, the frames after
the served ones through the Python path, then what was kept. Small chunks
(one send at a time) stay inline: a hand-over costs two thread wake-ups.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import rmqcore
from pyrmq.broker.processor.send_answer import (
    SLAVE_NOT_AVAILABLE_REMARK,
    born_host_of,
    durable_answer,
    settled_ok,
)
from pyrmq.broker.topic_config import TopicConfigManager
from pyrmq.common.errors import StoreError
from pyrmq.remoting import RemotingCommand, RequestCode, ResponseCode
from pyrmq.remoting.command import FrameDecoder, ReadBytes
from pyrmq.remoting.connection import Connection
from pyrmq.storage import MessageStore

if TYPE_CHECKING:
    from pyrmq.broker.processor.send import SendMessageProcessor
    from pyrmq.remoting.server import RemotingServer

Frames = tuple[list[tuple[int, Any, bytes]], int]

#: chunks with fewer bytes of whole frames are served inline (about 40
#: 128-byte sends of the C++ client)
LANE_MIN_BYTES = 16 * 1024
#: what a connection may keep read while its chunk is on a C send thread
#: (it reads on meanwhile: pausing and resuming its reading for every chunk
#: cost the loop ~15% of its time under pipelined sends)
LANE_HOLD_BYTES = 1024 * 1024

log = logging.getLogger("pyrmq.broker")


class SendFastPath:
    """A RemotingServer's frame splitter (Connection.fast_path) that serves
    the common send in C for the SendMessageProcessor it stands beside."""

    def __init__(
        self,
        processor: SendMessageProcessor,
        server: RemotingServer,
        store: MessageStore,
        topics: TopicConfigManager,
    ) -> None:
        self._processor = processor
        self._server = server
        self._store = store
        self._topics = topics
        self._sp: rmqcore.SendPath | None = None
        self._sp_core: rmqcore.MessageStoreCore | None = None
        self._topics_version: dict[str, int] | None = None
        #: C send threads to start with the path (sendMessageThreadPoolNums - 1)
        self.lanes = 0
        #: chunks of at least this many bytes go to a C send thread
        self.lane_min_bytes = LANE_MIN_BYTES
        #: a connection keeps at most about this many bytes read while its
        #: chunk is on a C send thread; then it stops reading until it is back
        self.lane_hold_bytes = LANE_HOLD_BYTES
        #: how often that happened
        self.lane_holds = 0
        self._lanes_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        #: frames served here (runtime info, tests, the benchmarks)
        self.served = 0
        #: of which on the C send threads
        self.served_on_lanes = 0
        #: called after a chunk's puts, before its answers, when they
        #: touched a queue (the broker's PullMessageProcessor.wake_held: the
        #: pulls they woke are answered in the same loop iteration)
        self.wake_pulls: Callable[[], None] | None = None

    def learn(self, topic: str, queue_nums: int) -> None:
        """The Python path found topic fit for a plain send."""
        sp = self._path()
        if sp is not None:
            sp.learn(topic, queue_nums)

    def _path(self) -> rmqcore.SendPath | None:
        core = self._store.writable_core()
        if core is None:
            return None
        if self._sp is None or self._sp_core is not core:
            self._close_lanes()
            p = self._processor
            self._sp = rmqcore.SendPath(core, p.max_message_size, oneway_ok=not p.sync_flush)
            self._sp_core = core
            self._topics_version = None
            if self.lanes and not self._closed:
                self._start_lanes(self._sp)
        if self._topics.data_version is not self._topics_version:
            # a topic was created, changed or deleted: learnt again
            self._sp.forget_all()
            self._topics_version = self._topics.data_version
        return self._sp

    def split(self, conn: Connection, buf: ReadBytes, max_frame: int) -> Frames:
        """split_frames for conn, the common sends served on the way."""
        hooked = self._server.has_rpc_hooks or conn.rpc_hook is not None
        if hooked or not self._processor.takes_plain_sends():
            return rmqcore.split_frames(buf, max_frame)
        sp = self._path()
        if sp is None:
            return rmqcore.split_frames(buf, max_frame)
        if conn.split_busy:
            # kept until its chunk on a C send thread is back; past
            # LANE_HOLD_BYTES what the peer sends waits in the socket
            if len(buf) >= self.lane_hold_bytes and self._lanes_loop is not None:
                self._hold(conn, self._lanes_loop)
            return [], 0
        sp.want_touched = self._store.has_arrival_listeners
        t0 = time.perf_counter_ns()
        if self._lanes_loop is not None and len(buf) >= self.lane_min_bytes and not conn.tls:
            used = self._hand_over(sp, conn, buf, max_frame, t0)
            if used:
                return [], used
        chunk = sp.split(buf, max_frame, born_host_of(conn))
        if chunk.handled:
            self._settle(conn, chunk, t0)
        if chunk.error is not None:
            raise ValueError(chunk.error)
        # a send behind a pull (a client producing and consuming on one
        # connection sends its next pull and a send in one write): the
        # frames before it are served first, it is split again after them
        conn.split_again = chunk.split_again
        return chunk.frames, chunk.used

    # -- the C send threads -------------------------------------------------

    def _start_lanes(self, sp: rmqcore.SendPath) -> None:
        try:
            sp.start_lanes(self.lanes)
        except (OSError, MemoryError, ValueError, StoreError) as e:
            log.error("C send threads not started, every chunk is served inline: %s", e)
            self.lanes = 0
            return
        loop = self._lanes_loop = asyncio.get_running_loop()
        loop.add_reader(sp.lanes_fd, self._collect)

    def _hand_over(
        self,
        sp: rmqcore.SendPath,
        conn: Connection,
        buf: ReadBytes,
        max_frame: int,
        t0: int,
    ) -> int:
        """Hand buf's whole frames to a C send thread: the bytes handed
        over, or 0 (fewer than lane_min_bytes of them, or no thread)."""
        end = rmqcore.whole_frames_end(buf, max_frame)
        if end == 0 or end < self.lane_min_bytes or not conn.is_open:
            return 0
        # the thread keeps what it is given, and buf is the connection's
        # read buffer (reused by the next read) or its decoder's: copied
        data = bytes(memoryview(buf)[:end])
        if not sp.submit(data, max_frame, born_host_of(conn), (conn, t0)):
            return 0
        # the connection reads on meanwhile: what it reads is kept (split()
        # returns nothing) until the chunk is back
        conn.split_busy = True
        return end

    def _hold(self, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        """conn reads nothing more until its chunk is back from its C send
        thread (too much is kept already)."""
        if conn.split_held is None:
            self.lane_holds += 1
            conn.split_held = loop.create_future()
            conn.hold_reading(conn.split_held)

    def _collect(self) -> None:
        """The eventfd said chunks are back from the C send threads."""
        if self._sp is not None:
            self._finish_all(self._sp.collect())

    def _finish_all(self, chunks: list[rmqcore.SendChunk]) -> None:
        for chunk in chunks:
            try:
                self._finish(chunk)
            except Exception:
                log.exception("finishing %d sends served on a C send thread", chunk.handled)

    def _finish(self, chunk: rmqcore.SendChunk) -> None:
        """A chunk back from a C send thread, finished as split() finishes
        one served inline; then its connection reads on."""
        conn, t0 = chunk.token
        try:
            if chunk.handled:
                self.served_on_lanes += chunk.handled
                self._settle(conn, chunk, t0)
            if chunk.error is not None:
                conn.abort(f"bad frame: {chunk.error}")
                return
        finally:
            conn.split_busy = False
            held, conn.split_held = conn.split_held, None
            if held is not None:
                held.set_result(None)
        conn.serve_frames(chunk.frames)

    def _close_lanes(self) -> None:
        sp, loop = self._sp, self._lanes_loop
        if sp is None or loop is None:
            return
        loop.remove_reader(sp.lanes_fd)
        self._lanes_loop = None
        self._finish_all(sp.close_lanes())

    def close(self) -> None:
        """Stop the C send threads (before the store closes); the chunks
        they held are finished here. Later chunks are served inline."""
        self._closed = True
        self._close_lanes()

    def _settle(self, conn: Connection, chunk: rmqcore.SendChunk, t0: int) -> None:
        """What follows a chunk's puts: its arrival notices and the answers
        of the pulls they woke, then its own answers, then its statistics.
        The held pulls' answers leave before the producers' acks: on the
        2-vCPU VM that took produce-to-consume's NATS p50 / pyrmq p50 from
        1.25-1.36 to 1.37-1.57, and a lone awaited send's p50 with a
        caught-up consumer attached from 0.137 to 0.127 ms (bench/README.md,
        "The held pulls' answers before the producer's ack"). Those of
        them that go back on the sends' own connection leave in one write
        with the acks (Connection.cork): its client wakes and reads once
        (bench/README.md, "One connection for producing and consuming")."""
        self.served += chunk.handled
        on_send = self._processor.on_send
        if on_send is not None:
            on_send()
        # a pull of this same connection that the chunk woke (a client that
        # produces and consumes on one connection) leaves with the acks
        corked = conn.cork()
        try:
            try:
                self._notify(chunk)
                self._answer(conn, chunk, t0)
            finally:
                if corked:
                    conn.uncork()
        finally:
            try:
                self._tally(chunk)
            except Exception:
                log.exception("statistics after %d sends served in C failed", chunk.handled)

    def _notify(self, chunk: rmqcore.SendChunk) -> None:
        """The chunk's arrival notices, and the pulls they woke answered."""
        n = chunk.handled
        try:
            self._store.appended(chunk.needs_allocate, chunk.touched)
        except Exception:
            log.exception("arrival notices after %d sends served in C failed", n)
        if chunk.touched and self.wake_pulls is not None:
            try:
                self.wake_pulls()
            except Exception:
                log.exception("waking the pulls after %d sends served in C failed", n)

    def _tally(self, chunk: rmqcore.SendChunk) -> None:
        """The topic statistics and the metrics' message tallies of a chunk."""
        p = self._processor
        stats, tallies = p.stats, p.tallies
        if stats is None and tallies is None:
            return
        for topic, count, wrote, body in chunk.stats:
            if stats is not None:
                stats.inc_topic_put(topic, count, wrote)
            if tallies is not None:
                tallies.sent(topic, "normal", count, body)

    def _answer(self, conn: Connection, chunk: rmqcore.SendChunk, t0: int) -> None:
        """A chunk's answers: now in ASYNC_FLUSH; in SYNC_FLUSH once its last
        byte is durable, on a SYNC_MASTER once the slaves hold it; each told
        to the RPC metrics."""
        p = self._processor
        n = chunk.handled
        answers = chunk.answers
        observe = self._server.rpc_observer is not None
        # each send is told the chunk's time per send, and in SYNC_FLUSH or
        # on a SYNC_MASTER the wait before its answer as well
        per_send_ns = (time.perf_counter_ns() - t0) // n if observe else 0
        if not answers:
            if observe:
                self._tell(chunk, per_send_ns, how="oneway")  # as handle() tells a oneway send
            return
        flush = self._store.durable_future_at(chunk.end_offset, n) if p.sync_flush else None
        replica = None
        code: int = ResponseCode.SUCCESS
        ha = p.replica_wait
        if ha is not None:
            if ha.is_slave_ok(chunk.end_offset):
                replica = ha.wait_replicated(chunk.end_offset)
            else:
                # stored on the master only; the clients decide
                # (SendStatus.SLAVE_NOT_AVAILABLE), as send.py's _answer
                answers = _each(answers, _slave_not_available)
                code = ResponseCode.SLAVE_NOT_AVAILABLE
        waits = [f for f in (flush, replica) if f is not None and not settled_ok(f)]
        if not waits:
            conn.send_bytes(answers)
            if observe:
                self._tell(chunk, per_send_ns, code)
            return
        started = time.perf_counter_ns()
        left = [len(waits)]

        def one_done(_: asyncio.Future[bool]) -> None:
            left[0] -= 1
            if left[0] > 0:
                return
            sent, answered = answers, code
            if not all(settled_ok(w) for w in waits):
                change = functools.partial(durable_answer, flush=flush, replica=replica)
                sent = _each(answers, change)
                answered = FrameDecoder().feed(sent[: _first_frame_len(sent)])[0].code
            conn.send_bytes(sent)
            if observe:
                self._tell(chunk, per_send_ns + time.perf_counter_ns() - started, answered)

        for w in waits:
            w.add_done_callback(one_done)

    def _tell(
        self,
        chunk: rmqcore.SendChunk,
        ns: int,
        code: int = ResponseCode.SUCCESS,
        how: str = "success",
    ) -> None:
        """The RPC metrics: each of the chunk's sends took ns."""
        us, v2 = ns // 1000, chunk.handled_v2
        server = self._server
        if chunk.handled > v2:
            server.observe_many(RequestCode.SEND_MESSAGE, chunk.handled - v2, code, how, us)
        if v2:
            server.observe_many(RequestCode.SEND_MESSAGE_V2, v2, code, how, us)


def _each(answers: bytes, change: Callable[[RemotingCommand], RemotingCommand]) -> bytes:
    """The answer frames after change(answer) of each (the rare outcomes:
    no slave, a timeout, a failed flush; SUCCESS stays as C wrote it)."""
    cmds = [change(c) for c in FrameDecoder().feed(answers)]
    if all(c.code == ResponseCode.SUCCESS for c in cmds):
        return answers
    return b"".join(c.encode() for c in cmds)


def _first_frame_len(frames: bytes) -> int:
    return 4 + int.from_bytes(frames[:4], "big")


def _slave_not_available(answer: RemotingCommand) -> RemotingCommand:
    answer.code = ResponseCode.SLAVE_NOT_AVAILABLE
    answer.remark = SLAVE_NOT_AVAILABLE_REMARK
    return answer
