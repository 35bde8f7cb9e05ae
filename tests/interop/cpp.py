"""Thin helpers around the real RocketMQ C++ client (PyPI ``rocketmq==0.4.4``).

Only the test module imports this, after it has checked that the wheel loads. See the
docstring of ``conftest.py`` for what the wheel offers and where it falls short; every
place below that reaches past the wheel's public Python API says why.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rocketmq.client import (
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    RecvMessage,
    SendResult,
    SendStatus,
)
from rocketmq.exceptions import ProducerSendOrderlyFailed, ffi_check
from rocketmq.ffi import MessageModel, _CConsumeStatus, _CMessageQueue, _CPullStatus, dll

__all__ = [
    "BROADCASTING",
    "CLUSTERING",
    "Clients",
    "Collector",
    "Received",
    "SendStatus",
    "assert_send_ok",
    "ensure_topic",
    "make_message",
    "pull_until",
    "pull_walk",
    "send_to_queue",
    "settle",
    "unique",
    "wait_route",
]

CLUSTERING = MessageModel.CLUSTERING
BROADCASTING = MessageModel.BROADCASTING
CONSUME_SUCCESS = int(_CConsumeStatus.CONSUME_SUCCESS)
RECONSUME_LATER = int(_CConsumeStatus.RECONSUME_LATER)

# The wheel's GetMessageBody prototype returns c_char_p, which stops at the first NUL.
# A second prototype of the same symbol returns the raw pointer, so a body whose length
# the sender wrote into the user property BODY_LEN can be read whole (binary bodies).
_get_body_ptr = dll["GetMessageBody"]
_get_body_ptr.argtypes = [ctypes.c_void_p]
_get_body_ptr.restype = ctypes.c_void_p
BODY_LEN = "body_len"

# Properties copied out of every received message (the handle dies with the callback).
SNAPSHOT_PROPS = ("RETRY_TOPIC", "UNIQ_KEY", "DELAY", "REAL_TOPIC", "ORIGIN_MESSAGE_ID", BODY_LEN)

PROBE = b"probe:"
_seq = itertools.count()


def unique(prefix: str) -> str:
    """A topic or group name no earlier run used: ``[A-Za-z0-9_-]`` only."""
    return f"{prefix}_{os.getpid()}_{next(_seq)}_{uuid.uuid4().hex[:6]}"


def make_message(
    topic: str,
    body: bytes | str,
    *,
    keys: str | None = None,
    tags: str | None = None,
    props: dict[str, str] | None = None,
    delay_level: int | None = None,
    binary: bool = False,
) -> Message:
    """A Message. ``binary=True`` sets the body through SetByteMessageBody with its length
    (the wheel's set_body goes through c_char_p and would cut at the first NUL) and records
    that length in the user property BODY_LEN so that the receiver can read it back."""
    msg = Message(topic)
    data = body.encode() if isinstance(body, str) else body
    if binary:
        ffi_check(dll.SetByteMessageBody(msg._handle, data, len(data)))
        msg.set_property(BODY_LEN, str(len(data)))
    else:
        assert b"\0" not in data, "use binary=True for bodies with NUL bytes"
        msg.set_body(data)
    if keys is not None:
        msg.set_keys(keys)
    if tags is not None:
        msg.set_tags(tags)
    for k, v in (props or {}).items():
        msg.set_property(k, v)
    if delay_level is not None:
        msg.set_delay_time_level(delay_level)
    return msg


def assert_send_ok(res: SendResult, *, batch: bool = False) -> None:
    """A SendResult from our broker: status OK, a UNIQ_KEY msg_id (empty for a batch, whose
    outer message has no UNIQ_KEY in this client), a non-negative queue offset."""
    assert res.status == SendStatus.OK, res
    if batch:
        assert res.msg_id == "", res
    else:
        assert len(res.msg_id) == 32 and all(c in "0123456789ABCDEF" for c in res.msg_id), res
    assert res.offset >= 0, res


@dataclass(eq=False)
class Received:
    """What one delivery showed the listener, copied while the handle was valid."""

    consumer: str
    topic: str
    tags: bytes
    keys: bytes
    body: bytes
    msg_id: str
    queue_id: int
    queue_offset: int
    reconsume_times: int
    born_ms: int
    store_ms: int
    arrival: float  # time.time() when the listener ran
    props: dict[str, bytes] = field(default_factory=dict)
    store_size: int = 0  # the stored record's size (smaller than the body when compressed)
    sys_flag: int = -1  # the stored record's sysFlag; -1 where the client does not show it

    @classmethod
    def of(cls, msg: RecvMessage, consumer: str, extra_props: Iterable[str] = ()) -> Received:
        props = {}
        for name in (*SNAPSHOT_PROPS, *extra_props):
            val = msg.get_property(name)
            if val:
                props[name] = val
        if BODY_LEN in props:
            n = int(props[BODY_LEN])
            ptr = _get_body_ptr(msg._handle)
            prefix = msg.body or b""
            # Read n bytes only if what C sees up to the first NUL agrees with a body of
            # length n; a shorter (truncated) body must not make us read past its end.
            body = ctypes.string_at(ptr, n) if ptr and len(prefix) <= n else prefix
        else:
            body = msg.body or b""
        return cls(
            consumer=consumer,
            topic=msg.topic,
            tags=msg.tags or b"",
            keys=msg.keys or b"",
            body=body,
            msg_id=msg.id,
            queue_id=msg.queue_id,
            queue_offset=msg.queue_offset,
            reconsume_times=msg.reconsume_times,
            born_ms=msg.born_timestamp,
            store_ms=msg.store_timestamp,
            arrival=time.time(),
            props=props,
            store_size=msg.store_size,
        )

    @property
    def is_probe(self) -> bool:
        return self.body.startswith(PROBE)


class Collector:
    """Deliveries seen by one consumer, in arrival order; probes are kept apart."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._messages: list[Received] = []
        self._probes: list[Received] = []
        self.errors: list[str] = []

    def add(self, rec: Received) -> None:
        with self._cond:
            (self._probes if rec.is_probe else self._messages).append(rec)
            self._cond.notify_all()

    def add_error(self, text: str) -> None:
        with self._cond:
            self.errors.append(text)
            self._cond.notify_all()

    @property
    def messages(self) -> list[Received]:
        with self._cond:
            return list(self._messages)

    @property
    def probes(self) -> list[Received]:
        with self._cond:
            return list(self._probes)

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]

    def wait_for(
        self, pred: Callable[[list[Received]], bool], timeout: float, *, probes: bool = False
    ) -> bool:
        """Wait until pred(messages) (or pred(probes)) holds; False after `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if pred(list(self._probes if probes else self._messages)):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))

    def wait_bodies(self, want: Iterable[bytes], timeout: float) -> bool:
        want = set(want)
        return self.wait_for(lambda ms: want <= {m.body for m in ms}, timeout)


def _bounded(fn: Callable[[], object], timeout: float, what: str) -> None:
    """Run fn in a daemon thread; raise if it has not returned after `timeout` s (the C++
    client can block in shutdown when a server misbehaves; a test must not hang on it)."""
    err: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # reported below
            err.append(exc)

    t = threading.Thread(target=run, name=f"interop:{what}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise AssertionError(f"{what} did not return within {timeout:.0f} s")
    if err:
        raise err[0]


class Clients:
    """Creates C++ clients pointed at one name server and shuts them all down at the end.

    Every client gets its own instance name. The C++ client keys its MQClientFactory by
    ``pid-ip@instanceName``; two consumers of one group in one process need different
    names, and separate factories keep one test's clients from sharing state with another's."""

    def __init__(self, namesrv: str, credentials: tuple[str, str] | None = None) -> None:
        self.namesrv = namesrv
        #: ACL (access key, secret key) every client made here signs with
        #: (set_session_credentials, channel "ALIYUN" as the wheel's default)
        self.credentials = credentials
        self._producers: list[Producer] = []
        self._consumers: list[PushConsumer | PullConsumer] = []

    def producer(
        self,
        group: str | None = None,
        *,
        timeout_ms: int = 5000,
        max_message_size: int | None = None,
    ) -> Producer:
        p = Producer(
            group or unique("PID_interop"), timeout=timeout_ms, max_message_size=max_message_size
        )
        # Not wrapped by the wheel's Python class; the C symbol is exported.
        ffi_check(dll.SetProducerInstanceName(p._handle, unique("ip").encode()))
        p.set_namesrv_addr(self.namesrv)
        if self.credentials is not None:
            p.set_session_credentials(*self.credentials, "ALIYUN")
        p.start()
        self._producers.append(p)
        return p

    def push_consumer(
        self,
        group: str,
        topic: str,
        collector: Collector,
        *,
        expression: str = "*",
        model: MessageModel = CLUSTERING,
        handler: Callable[[Received], bool] | None = None,
        start: bool = True,
        extra_props: Iterable[str] = (),
        orderly: bool = False,
    ) -> PushConsumer:
        """A push consumer whose listener snapshots each message into `collector`.

        ``handler(rec)`` returning False means RECONSUME_LATER. The listener is registered
        with our own ctypes callback because the wheel's ``subscribe`` ignores the return
        value of the Python callback and only signals failure by re-raising inside a ctypes
        callback, which ctypes reports as unraisable and then returns an undefined status."""
        c = PushConsumer(group, orderly=orderly, message_model=model)
        c.set_instance_name(unique("ic"))
        c.set_namesrv_addr(self.namesrv)
        c.set_message_batch_max_size(1)
        c.set_thread_count(2)
        if self.credentials is not None:
            c.set_session_credentials(*self.credentials, "ALIYUN")
        extra = tuple(extra_props)

        def on_message(_consumer: int, handle: int) -> int:
            try:
                rec = Received.of(RecvMessage(handle), collector.name, extra)
                ok = True if handler is None else handler(rec)
                collector.add(rec)
                return CONSUME_SUCCESS if ok is not False else RECONSUME_LATER
            except BaseException:
                collector.add_error(traceback.format_exc())
                return RECONSUME_LATER

        ffi_check(dll.Subscribe(c._handle, topic.encode(), expression.encode()))
        c._register_callback(on_message)  # keeps the CFUNCTYPE object alive
        self._consumers.append(c)
        if start:
            c.start()
        return c

    def pull_consumer(self, group: str | None = None) -> PullConsumer:
        c = PullConsumer(group or unique("GID_pull"))
        c.set_namesrv_addr(self.namesrv)
        if self.credentials is not None:
            c.set_session_credentials(*self.credentials, "ALIYUN")
        c.start()
        self._consumers.append(c)
        return c

    def shutdown(self, client: Producer | PushConsumer | PullConsumer, timeout: float = 30) -> None:
        """Shut one client down now (a push consumer commits its offsets here)."""
        _bounded(client.shutdown, timeout, f"{type(client).__name__}.shutdown")

    def close(self) -> None:
        errors = []
        for c in [*reversed(self._consumers), *reversed(self._producers)]:
            try:
                self.shutdown(c)
            except Exception as exc:
                errors.append(repr(exc))
        self._consumers.clear()
        self._producers.clear()
        assert not errors, f"client shutdown failed: {errors}"


def send_to_queue(producer: Producer, msg: Message, queue: int) -> SendResult:
    """send_orderly with the wheel's default selector: queue = arg % number of queues.

    A producer's first send to a broker can fail inside the client before any byte is
    written: the wheel's library (rocketmq-client-cpp 2.0) has
    ``TcpRemotingClient::CreateTransport`` return no transport at all while another thread
    of the same client is still connecting to that address (its heartbeat, right after the
    send fetched the route), and ``sendAutoRetrySelectImpl`` then gives up with "No route
    info of this topic" within microseconds. Only that failure, when it comes faster than
    any broker answer could (well under the 3-s send timeout), is tried again, at most
    twice; a broker that is slow or refuses still fails the send."""
    for _ in range(2):
        started = time.monotonic()
        try:
            return producer.send_orderly(msg, queue)
        except ProducerSendOrderlyFailed as exc:
            fast = time.monotonic() - started < _CLIENT_RACE_S
            if not fast or "No route info" not in str(exc):
                raise
            time.sleep(0.05)  # the other thread's connect completes in well under this
    return producer.send_orderly(msg, queue)


# How quickly the client's own connect race fails a send: no request has gone out then.
_CLIENT_RACE_S = 0.5


def settle(
    producer: Producer,
    topic: str,
    collectors: list[Collector],
    *,
    queues: int,
    mode: str,
    tags: str | None = None,
    timeout: float = 60.0,
    round_wait: float = 4.0,
) -> dict[int, str]:
    """Wait until push consumers are really pulling every queue of `topic`.

    Each round sends one probe message to each queue (send_orderly) and waits up to
    `round_wait` s for them. ``mode="split"`` (clustering): stable once two rounds in a row
    delivered each probe to exactly one consumer, with the same queue -> consumer map and
    every consumer owning a queue. ``mode="each"`` (broadcasting): one round in which every
    consumer got every probe. Returns queue -> consumer name. Probes never count as
    messages in the tests. Needed because this client has no consume-from-first setting:
    a new group starts at the queue's max offset unless the broker says otherwise."""
    assert mode in ("split", "each")
    deadline = time.monotonic() + timeout
    prev: dict[int, str] | None = None
    history = []
    for rnd in itertools.count():
        if time.monotonic() > deadline:
            break
        bodies = {PROBE + f"{topic}:{rnd}:{q}".encode(): q for q in range(queues)}
        for body, q in bodies.items():
            assert_send_ok(send_to_queue(producer, make_message(topic, body, tags=tags), q))

        def seen(c: Collector, bodies: dict[bytes, int] = bodies) -> set[int]:
            return {bodies[p.body] for p in c.probes if p.body in bodies}

        want = set(range(queues))
        end = min(deadline, time.monotonic() + round_wait)
        while time.monotonic() < end:
            got = [seen(c) for c in collectors]
            if mode == "each" and all(g == want for g in got):
                return {q: "*" for q in range(queues)}
            if mode == "split" and sorted(itertools.chain(*got)) == sorted(want):
                break
            time.sleep(0.1)
        got = [seen(c) for c in collectors]
        history.append({c.name: sorted(g) for c, g in zip(collectors, got, strict=True)})
        if mode == "each":
            continue
        owners: dict[int, list[str]] = {q: [] for q in range(queues)}
        for c, g in zip(collectors, got, strict=True):
            for q in g:
                owners[q].append(c.name)
        if all(len(o) == 1 for o in owners.values()) and all(got):
            mapping = {q: o[0] for q, o in owners.items()}
            if mapping == prev:
                return mapping
            prev = mapping
        else:
            prev = None
    raise AssertionError(
        f"consumers of {topic} never settled ({mode}) within {timeout:.0f} s; "
        f"queues seen per round: {history[-5:]}; listener errors: "
        f"{[e for c in collectors for e in c.errors][:3]}"
    )


def _fetch_queues(pc: PullConsumer, topic: str, timeout: float) -> list[tuple[str, int]]:
    """(brokerName, queueId) of every readable queue, retrying while the route appears
    (an auto-created topic reaches the name server when the broker re-registers).

    The client's DefaultMQPullConsumer::fetchSubscribeMessageQueues logs and swallows a
    "no route" error, so status OK with zero queues means "not there (yet)"."""
    deadline = time.monotonic() + timeout
    while True:
        arr = ctypes.POINTER(_CMessageQueue)()
        n = ctypes.c_int()
        status = dll.FetchSubscriptionMessageQueues(
            pc._handle, topic.encode(), ctypes.byref(arr), ctypes.byref(n)
        )
        if status == 0 and n.value > 0:
            try:
                return [(arr[i].brokerName.decode(), arr[i].queueId) for i in range(n.value)]
            finally:
                dll.ReleaseSubscriptionMessageQueue(arr)
        if time.monotonic() > deadline:
            ffi_check(status)  # raises with the client's error text, if it kept one
            raise AssertionError(f"no readable queue of {topic} in the route after {timeout} s")
        time.sleep(0.2)


def wait_route(
    clients: Clients, topic: str, queues: int | None = None, timeout: float = 15.0
) -> int:
    """Wait until the name server has a route for `topic` (with `queues` readable queues, if
    given); returns its readable queue count."""
    pc = clients.pull_consumer()
    deadline = time.monotonic() + timeout
    while True:
        n = len(_fetch_queues(pc, topic, max(0.1, deadline - time.monotonic())))
        if queues is None or n == queues or time.monotonic() > deadline:
            return n
        time.sleep(0.2)


def ensure_topic(clients: Clients, producer: Producer, topic: str) -> int:
    """Auto-create `topic` with one (probe) message and wait for its route, so that push
    consumers started next find its queues at once instead of at the 30-s route refresh."""
    assert_send_ok(producer.send_sync(make_message(topic, PROBE + b"create")))
    return wait_route(clients, topic)


def pull_walk(
    pc: PullConsumer,
    topic: str,
    *,
    expression: str = "*",
    offsets: dict[int, int] | None = None,
    timeout: float = 30.0,
    statuses: list[tuple[int, int, int, int, int]] | None = None,
    extra_props: Iterable[str] = (),
) -> list[Received]:
    """One pass over every queue of `topic`, pulling each from ``offsets[queueId]``
    (default 0, updated in place) until NO_NEW_MSG, as the wheel's ``PullConsumer.pull``
    does, but bounded in time (the wheel's loop retries a BROKER_TIMEOUT forever) and
    recording (queueId, status, offset, nextBeginOffset, size) into `statuses`."""
    offsets = {} if offsets is None else offsets
    deadline = time.monotonic() + timeout
    out: list[Received] = []
    for broker_name, qid in _fetch_queues(pc, topic, timeout):
        mq = _CMessageQueue(topic.encode(), broker_name.encode(), qid)
        off = offsets.get(qid, 0)
        while True:
            if time.monotonic() > deadline:
                raise AssertionError(f"pulling {topic} queue {qid} did not finish in {timeout} s")
            res = dll.Pull(pc._handle, ctypes.pointer(mq), expression.encode(), off, 32)
            try:
                status = res.pullStatus
                if statuses is not None:
                    statuses.append((qid, status, off, res.nextBeginOffset, res.size))
                if status == _CPullStatus.FOUND:
                    for i in range(res.size):
                        msg = RecvMessage(res.msgFoundList[i])
                        out.append(Received.of(msg, "pull", extra_props))
                if status != _CPullStatus.BROKER_TIMEOUT:
                    off = res.nextBeginOffset
            finally:
                dll.ReleasePullResult(res)
            if status == _CPullStatus.NO_NEW_MSG:
                break
            if status == _CPullStatus.BROKER_TIMEOUT:
                time.sleep(0.2)
        offsets[qid] = off
    return out


def pull_until(
    pc: PullConsumer, topic: str, want: Iterable[bytes], *, timeout: float = 30.0, **kw: object
) -> list[Received]:
    """Repeat pull_walk (continuing from the offsets reached) until every body in `want`
    has been pulled or `timeout` s passed; returns everything pulled."""
    want = set(want)
    offsets: dict[int, int] = {}
    got: list[Received] = []
    deadline = time.monotonic() + timeout
    while True:
        got += pull_walk(pc, topic, offsets=offsets, timeout=timeout, **kw)  # type: ignore[arg-type]
        if want <= {m.body for m in got} or time.monotonic() > deadline:
            return got
        time.sleep(0.3)
