"""PULL_MESSAGE (11): PullMessageProcessor and PullRequestHoldService.

A pull that finds nothing and may be suspended (sysFlag bit 1) is held until
a message is dispatched to its queue (the store's arrival listener wakes it
at once) or suspendTimeoutMillis passes; then it is answered like a fresh
pull. Bodies of at least transfer_by_sendfile_min_bytes go to the socket by
sendfile from the pinned CommitLog segments; smaller ones are gathered into
one copy (measured: per-range sendfile of small records is slower). TLS
connections always take the copy. A copied answer to a JSON request
without a SQL92 filter is built whole in C (store.pull_answer, one call
from the get to the frame; pullFastPathEnable); the others here, from the
same get result (tests/integration/test_pull_fast.py pins the two)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from pyrmq.broker.client_manager import ConsumerManager
from pyrmq.broker.offset_manager import ConsumerOffsetManager
from pyrmq.broker.processor.headers import header_int, header_str
from pyrmq.broker.stats import BrokerStatsManager
from pyrmq.broker.subscription_group import SubscriptionGroupManager
from pyrmq.broker.topic_config import TopicConfigManager
from pyrmq.common.errors import (
    BrokerError,
    BrokerSystemError,
    NoPermissionError,
    SubscriptionNotExistError,
    TopicNotExistError,
)
from pyrmq.common.filter import Sql92Filter
from pyrmq.common.subscription import SubscriptionData
from pyrmq.common.topics import RETRY_GROUP_TOPIC_PREFIX
from pyrmq.metrics import BrokerTallies
from pyrmq.remoting import RemotingCommand, ResponseCode
from pyrmq.remoting.command import SERIALIZE_JSON
from pyrmq.remoting.connection import Connection, FileRanges
from pyrmq.storage import MessageStore
from pyrmq.storage.zero_copy import coalesce_ranges

log = logging.getLogger("pyrmq.broker")

FLAG_COMMIT_OFFSET = 1
FLAG_SUSPEND = 2
FLAG_SUBSCRIPTION = 4
#: longest hold, whatever the client asks: its own async pull timeout is 30 s
MAX_SUSPEND_MS = 20_000
#: held pulls per connection; beyond it a pull is answered at once, so a
#: client flooding pulls on empty queues cannot grow the broker's memory
#: (a RocketMQ client keeps about one outstanding pull per queue)
MAX_HELD_PER_CONNECTION = 4096
#: body_max of a pull that is never sent by sendfile (TLS): any size
MAX_COPIED_BODY = 1 << 62
#: seconds before an error answers a pull that allowed suspending
ERROR_BACKOFF = 1.0

_CODE_OF_STATUS = {
    "FOUND": ResponseCode.SUCCESS,
    "MESSAGE_WAS_REMOVING": ResponseCode.PULL_RETRY_IMMEDIATELY,
    "NO_MATCHED_MESSAGE": ResponseCode.PULL_RETRY_IMMEDIATELY,
    "OFFSET_FOUND_NULL": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_OVERFLOW_BADLY": ResponseCode.PULL_OFFSET_MOVED,
    "OFFSET_OVERFLOW_ONE": ResponseCode.PULL_NOT_FOUND,
    "OFFSET_TOO_SMALL": ResponseCode.PULL_OFFSET_MOVED,
}


@dataclasses.dataclass(slots=True, eq=False)
class PullRequest:
    """One held pull (RocketMQ PullRequest of the hold service)."""

    conn: Connection
    cmd: RemotingCommand
    topic: str
    queue_id: int
    offset: int
    max_msgs: int
    codes: frozenset[int]
    #: a SQL92 subscription's filter (evaluated on each message's properties)
    sql: Sql92Filter | None = None
    timer: asyncio.TimerHandle | None = None
    done: bool = False
    #: the consumer group pulling (metrics: messages out, inflight)
    group: str = ""


#: RocketMQ's getMessage looks at up to max(16000 bytes of ConsumeQueue,
#: maxMsgNums units) to fill a filtered pull: 800 messages
MAX_FILTER_SCAN = 800


@dataclasses.dataclass(slots=True)
class _Filtered:
    """A get_message result with the records a property filter kept."""

    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    ranges: list[tuple[int, int]]
    total_bytes: int


def _filter_by_properties(store: MessageStore, req: PullRequest, r: Any, limit: int) -> Any:
    """Keep the records whose properties req.sql selects, reading on until
    req.max_msgs are kept or MAX_FILTER_SCAN looked at (as RocketMQ's
    getMessage does for a filter); nothing kept is NO_MATCHED_MESSAGE with
    next_begin_offset past what was looked at."""
    sql = req.sql
    assert sql is not None
    if r.status != "FOUND":
        return r
    kept: list[tuple[int, int]] = []
    start = req.offset  # the queue offset of r.ranges[0]
    next_begin = r.next_begin_offset
    scanned = 0
    for _ in range(MAX_FILTER_SCAN):  # each round looks at one record at least
        if not r.ranges:
            break
        # unfiltered, a batch is consecutive queue offsets from `start`
        consecutive = r.next_begin_offset == start + len(r.ranges)
        for i, rng in enumerate(r.ranges):
            if sql.matches(store.properties_at(rng[0])):
                kept.append(rng)
                if len(kept) >= req.max_msgs and consecutive:
                    next_begin = start + i + 1
                    break
        else:
            next_begin = r.next_begin_offset
        scanned += len(r.ranges)
        if len(kept) >= req.max_msgs or scanned >= MAX_FILTER_SCAN:
            break
        nxt = store.get_message(req.topic, req.queue_id, next_begin, req.max_msgs, None, limit)
        if nxt.status != "FOUND":
            break
        start, r = next_begin, nxt
    status = "FOUND" if kept else "NO_MATCHED_MESSAGE"
    return _Filtered(
        status, next_begin, r.min_offset, r.max_offset, kept, sum(size for _, size in kept)
    )


class PullMessageProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        consumers: ConsumerManager,
        offsets: ConsumerOffsetManager,
        *,
        long_polling_enable: bool = True,
        short_polling_time_ms: int = 1000,
        enable_property_filter: bool = False,
        sendfile_min_bytes: int = 16 * 1024,
        broker_permission: int = 6,
        broker_role: str = "ASYNC_MASTER",
        slave_read_enable: bool = False,
        memory_limit_bytes: int = 0,
        answer_in_c: bool = True,
    ) -> None:
        self.store = store
        self.topics = topics
        self.consumers = consumers
        self.offsets = offsets
        self.long_polling_enable = long_polling_enable
        self.short_polling_time_ms = short_polling_time_ms
        self.enable_property_filter = enable_property_filter
        self.sendfile_min_bytes = sendfile_min_bytes
        self.broker_permission = broker_permission
        self.slave = broker_role == "SLAVE"
        #: slaveReadEnable: suggest the slave (brokerId 1) to a consumer
        #: whose pull reads further than memory_limit_bytes behind the
        #: CommitLog's end (accessMessageInMemoryMaxRatio of RAM)
        self.slave_read_enable = slave_read_enable
        self.memory_limit_bytes = memory_limit_bytes
        #: pullFastPathEnable: answer what a common pull finds with one
        #: frame built in C (store.pull_answer)
        self.answer_in_c = answer_in_c
        #: pulls answered so (runtime info, tests, the benchmarks)
        self.answered_in_c = 0
        #: metrics on: messages out and pull offsets are counted here
        self.tallies: BrokerTallies | None = None
        #: controller mode, on a master: the CommitLog offset its SyncStateSet
        #: holds (RocketMQ 5's confirmOffset). Consumers read only below it:
        #: a record past it may be cut if this master fails over, and a
        #: consumer that had read it would skip the record that takes its
        #: queue offset on the new master. None: no limit.
        self.confirm_limit: Callable[[], int] | None = None
        #: per-group counters (statsAll); set by the broker
        self.stats: BrokerStatsManager | None = None
        #: consumer groups (consumeEnable; autoCreateSubscriptionGroup);
        #: None: every group may pull
        self.groups: SubscriptionGroupManager | None = None
        #: (topic, queue_id) -> held pulls
        self._held: dict[tuple[str, int], list[PullRequest]] = {}
        self._to_wake: set[tuple[str, int]] = set()
        #: the loop's call of _wake for what is in _to_wake (None: none due)
        self._wake_handle: asyncio.Handle | None = None
        store.add_arrival_listener(self.notify_message_arriving)

    # -- the request ------------------------------------------------------------

    def process(self, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            self._process(conn, cmd)
        except BrokerError as e:
            try:
                suspend = int(cmd.ext_fields.get("sysFlag") or 0) & FLAG_SUSPEND
            except ValueError:
                suspend = 0
            if not suspend:
                raise
            # A push consumer re-pulls at once after an error answer, without
            # back-off (RocketMQ's C++ client does): answer a suspendable pull's
            # error after ERROR_BACKOFF so a deleted topic or a bad queue
            # cannot make it spin against the broker.
            resp = cmd.response(e.code, remark=e.remark)
            asyncio.get_running_loop().call_later(ERROR_BACKOFF, _send_if_open, conn, resp)

    def _process(self, conn: Connection, cmd: RemotingCommand) -> None:
        f = cmd.ext_fields
        group = header_str(f, "consumerGroup", cmd.code)
        topic = header_str(f, "topic", cmd.code)
        queue_id = header_int(f, "queueId", code=cmd.code, bits=32)
        offset = header_int(f, "queueOffset", code=cmd.code)
        max_msgs = header_int(f, "maxMsgNums", 32)
        sysflag = header_int(f, "sysFlag", 0)
        suspend_ms = header_int(f, "suspendTimeoutMillis", 0)
        if not self.broker_permission & 4:
            raise NoPermissionError("the broker does not allow reads now")
        if self.groups is not None:
            sgc = self.groups.require(group)
            if not sgc.consume_enable:
                raise NoPermissionError(f"subscription group no permission, {group}")
        tc = self.topics.get(topic)
        if tc is None:
            raise TopicNotExistError(f"topic[{topic}] not exist, apply first please!")
        if not tc.readable:
            raise NoPermissionError(f"the topic[{topic}] pulling message is forbidden")
        if not 0 <= queue_id < tc.read_queue_nums:
            raise BrokerSystemError(
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}]"
            )
        if sysflag & FLAG_SUBSCRIPTION:
            sub = SubscriptionData.parse(topic, f.get("subscription"), 0, f.get("expressionType"))
        else:
            found = self.consumers.find_subscription(group, topic)
            if found is None:
                raise SubscriptionNotExistError(
                    f"the consumer's subscription not exist, group: {group} topic: {topic}"
                )
            sub = found
        if sub.sql is not None and not self.enable_property_filter:
            raise BrokerSystemError(
                f"The broker does not support consumer to filter message by {sub.expression_type} "
                "(set enablePropertyFilter=true in broker.conf)"
            )
        if sysflag & FLAG_COMMIT_OFFSET and not self.slave:
            commit = header_int(f, "commitOffset", -1)
            if commit >= 0:
                self.offsets.commit_offset(group, topic, queue_id, commit)
        max_msgs = max(1, min(max_msgs, 1024))
        # a retry topic holds the group's own messages, which its filter
        # selected once already (RocketMQ filters them by the real topic's
        # subscription; they pass it again)
        sql = None if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else sub.sql
        req = PullRequest(
            conn, cmd, topic, queue_id, offset, max_msgs, sub.code_set, sql, group=group
        )
        held = len(conn.attrs.get("held_pulls", ()))
        final = not sysflag & FLAG_SUSPEND or held >= MAX_HELD_PER_CONNECTION
        if self._answer(req, final=final, hold_unmatched=False):
            return
        # Nothing there: hold it (long polling) or, with long polling off,
        # look again after shortPollingTimeMills.
        wait_ms = suspend_ms if self.long_polling_enable else self.short_polling_time_ms
        wait = max(0, min(wait_ms, MAX_SUSPEND_MS)) / 1000
        self._hold(req, wait)

    def _answer(self, req: PullRequest, final: bool, hold_unmatched: bool = True) -> bool:
        """Answer req if there is something to say; False means "nothing
        yet" (only when not final)."""
        store = self.store
        conn, cmd = req.conn, req.cmd
        # a controller-mode master serves only what its SyncStateSet holds:
        # a record beyond that is as if it had not arrived (held, or 19)
        limit = self.confirm_limit() if self.confirm_limit is not None else -1
        r: Any
        if (
            self.answer_in_c
            and req.sql is None
            and cmd.serialize_type == SERIALIZE_JSON
            and conn.carries_frames
        ):
            # the common pull: what it finds is answered with one frame
            # built in C, unless its body goes by sendfile
            frame, r = store.pull_answer(
                req.topic,
                req.queue_id,
                req.offset,
                req.max_msgs,
                req.codes or None,
                limit,
                cmd.opaque,
                cmd.version,
                self.sendfile_min_bytes - 1 if self._may_sendfile(conn) else MAX_COPIED_BODY,
                # suggest the slave past this point (as _consuming_slowly)
                self.store.commit_log_max_offset - self.memory_limit_bytes
                if self.slave_read_enable
                else -1,
            )
            if frame is not None:
                self.answered_in_c += 1
                self._count(req, r)
                conn.send_bytes(frame)
                return True
        else:
            r = store.get_message(
                req.topic, req.queue_id, req.offset, req.max_msgs, req.codes or None, limit
            )
            if req.sql is not None:
                r = _filter_by_properties(store, req, r, limit)
        status = r.status
        code = _CODE_OF_STATUS.get(status)
        if code is None:  # NO_MATCHED_LOGIC_QUEUE / NO_MESSAGE_IN_QUEUE
            code = ResponseCode.PULL_OFFSET_MOVED if req.offset else ResponseCode.PULL_NOT_FOUND
        if not final and (
            code == ResponseCode.PULL_NOT_FOUND
            or (hold_unmatched and status == "NO_MATCHED_MESSAGE")
        ):
            # Held pulls wake only for a message their filter matches (Java's
            # hold service checks the tag code); a held pull that saw only
            # other tags answers 20 with the advanced offset at its deadline.
            if req.sql is not None and status == "NO_MATCHED_MESSAGE":
                # what it saw does not match: never evaluate it again
                req.offset = r.next_begin_offset
            return False
        if code == ResponseCode.PULL_OFFSET_MOVED and self.slave:
            # a slave may be behind its master: it never moves a consumer's
            # offset (RocketMQ's offsetCheckInSlave=false)
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        ext = {
            "nextBeginOffset": str(r.next_begin_offset),
            "minOffset": str(r.min_offset),
            "maxOffset": str(r.max_offset),
            "suggestWhichBrokerId": "1" if self._consuming_slowly(r) else "0",
        }
        if code != ResponseCode.SUCCESS:
            conn.send(cmd.response(code, ext, remark=status))
            return True
        resp = cmd.response(ResponseCode.SUCCESS, ext)
        total = r.total_bytes
        self._count(req, r)
        # over TLS the bytes must pass through the cipher: one gathered copy
        if total >= self.sendfile_min_bytes and self._may_sendfile(conn):
            ranges = coalesce_ranges(r.ranges)
            items = []
            try:
                for off, size in ranges:
                    items.append((store.pin(off), off, size))
            except Exception:
                for pin, _, _ in items:
                    pin.release()
                raise
            conn.send_with_file_body(resp.encode_prefix(total), FileRanges(items))
        else:
            resp.body = store.read(r.ranges)
            conn.send(resp)
        return True

    @staticmethod
    def _may_sendfile(conn: Connection) -> bool:
        """Over TLS the bytes must pass through the cipher: one gathered
        copy; a connection may also have sendfile turned off, and a proxy's
        in-process channel takes the answer as a command."""
        return conn.carries_frames and not conn.tls and conn.attrs.get("sendfile", True)

    def _count(self, req: PullRequest, r: Any) -> None:
        """The statistics and metrics of a pull that found messages (r a
        GetResult, or the _Filtered of a property filter)."""
        n = len(r.ranges)
        if self.stats is not None:
            self.stats.inc_group_get(req.group, req.topic, n, r.total_bytes)
        tallies = self.tallies
        if tallies is not None:
            tallies.pulled(req.topic, req.group, n, r.total_bytes)
            tallies.pulled_to(req.group, req.topic, req.queue_id, r.next_begin_offset)

    def _consuming_slowly(self, r: Any) -> bool:
        """RocketMQ's suggestPullingFromSlave: the pulled data is further
        behind the CommitLog's end than the master keeps in memory."""
        if not self.slave_read_enable or not r.ranges:
            return False
        return self.store.commit_log_max_offset - r.ranges[0][0] > self.memory_limit_bytes

    # -- PullRequestHoldService --------------------------------------------------

    def wake_all(self) -> None:
        """Look again at every held pull (a slave after replicated data
        landed: its queues are not known one by one)."""
        if not self._held:
            return
        self._to_wake.update(self._held)
        self._wake_soon()

    def _wake_soon(self) -> None:
        if self._wake_handle is None:
            self._wake_handle = asyncio.get_running_loop().call_soon(self._wake)

    def _hold(self, req: PullRequest, wait: float) -> None:
        loop = asyncio.get_running_loop()
        key = (req.topic, req.queue_id)
        self._held.setdefault(key, []).append(req)
        req.timer = loop.call_later(wait, self._expire, req)
        req.conn.attrs.setdefault("held_pulls", set()).add(req)

    def _release(self, req: PullRequest) -> None:
        req.done = True
        if req.timer is not None:
            req.timer.cancel()
        key = (req.topic, req.queue_id)
        held = self._held.get(key)
        if held is not None:
            with contextlib.suppress(ValueError):
                held.remove(req)
            if not held:
                del self._held[key]
        req.conn.attrs.get("held_pulls", set()).discard(req)

    def _expire(self, req: PullRequest) -> None:
        if req.done:
            return
        self._release(req)
        if req.conn.is_open:
            try:
                self._answer(req, final=True)
            except Exception:
                log.exception("answering a held pull failed")

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener: wake pulls held on (topic, queue_id)
        once this burst of puts is done (one wake-up per queue per burst)."""
        key = (topic, queue_id)
        if key not in self._held:
            return
        self._to_wake.add(key)
        self._wake_soon()

    def wake_held(self) -> None:
        """Answer now the held pulls this loop iteration's puts woke,
        instead of at the start of the next iteration. The C send path
        calls it once a chunk's answers are written: the woken consumers'
        answers then leave in the same iteration, right behind the
        producers', one loop turn sooner (bench/README.md, "Produce to
        consume"). The loop's call of _wake is cancelled: it would find
        nothing left, and costs a loop handle a send."""
        handle = self._wake_handle
        if handle is not None:
            handle.cancel()
            self._wake()

    def _wake(self) -> None:
        self._wake_handle = None
        keys, self._to_wake = self._to_wake, set()
        for key in keys:
            for req in list(self._held.get(key, ())):
                if req.done:
                    continue
                if not req.conn.is_open:
                    self._release(req)
                    continue
                try:
                    if self._answer(req, final=False):
                        self._release(req)
                except Exception:
                    self._release(req)
                    log.exception("answering a woken pull failed")

    def channel_closed(self, conn: Connection) -> None:
        for req in list(conn.attrs.get("held_pulls", ())):
            self._release(req)

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def shutdown(self) -> None:
        """Answer every held pull now (a clean broker stop): the client then
        pulls again at once instead of waiting out its 30 s pull timeout."""
        for key in list(self._held):
            for req in list(self._held.get(key, ())):
                self._release(req)
                if req.conn.is_open:
                    try:
                        self._answer(req, final=True)
                    except Exception:
                        log.exception("answering a held pull at shutdown failed")


def _send_if_open(conn: Connection, resp: RemotingCommand) -> None:
    if conn.is_open:
        conn.send(resp)
