"""pyrmq's own asyncio client and the real RocketMQ C++ client (PyPI ``rocketmq==0.4.4``)
on one ``pyrmq standalone`` server: what one side sends, the other receives intact.

* pyrmq Producer -> C++ PushConsumer (single sends, a batch, a compressed body, tags,
  keys, user properties; the C++ msg id is our SendResult.msg_id, the UNIQ_KEY);
* C++ Producer -> pyrmq PushConsumer and PullConsumer (the same, compressed by the C++
  client, and its batch);
* one consumer group with a C++ and a pyrmq PushConsumer: both compute the same
  AllocateMessageQueueAveragely split of 8 queues and together consume everything once;
* a pyrmq consumer answering RECONSUME_LATER for C++-produced messages gets them back from
  %RETRY%<group> intact.

The pyrmq clients run on an event loop in a thread of their own (``Loop``), so the C++
client's blocking calls and callbacks and the pyrmq clients run side by side; every call
into that loop is bounded in time. What the wheel can and cannot do: conftest.py.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

try:
    import rocketmq.client  # noqa: F401
except Exception as exc:  # ImportError, or OSError when the bundled librocketmq.so won't load
    pytest.skip(
        f"the RocketMQ C++ client (pip install rocketmq==0.4.4) is not usable here: {exc!r}",
        allow_module_level=True,
    )

from pyrmq import (
    AllocateMessageQueueAveragely,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    SendResult,
)
from pyrmq.common.message import SYSFLAG_COMPRESSED

from .cpp import (
    BODY_LEN,
    Collector,
    Received,
    assert_send_ok,
    ensure_topic,
    make_message,
    pull_until,
    settle,
    unique,
    wait_route,
)

T = TypeVar("T")

WAIT = 30.0  # seconds to wait for messages that should arrive promptly
AUTO_QUEUES = 4  # an auto-created topic (see test_cpp_client.py)
MIXED_QUEUES = 8
USER_PROPS = ("p1", "p2", "p3")  # user property names the tests set and read back


# --- the pyrmq side ---------------------------------------------------------------------------


class Loop:
    """An asyncio loop in a daemon thread for the pyrmq clients of one test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(started.set)
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="interop:pyrmq-loop", daemon=True)
        self.thread.start()
        assert started.wait(10), "the event loop thread did not start"

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = WAIT) -> T:
        """Run coro on the loop and return its result; fail after `timeout` s."""

        async def bounded() -> T:
            async with asyncio.timeout(timeout):
                return await coro

        fut = asyncio.run_coroutine_threadsafe(bounded(), self.loop)
        return fut.result(timeout + 5)

    def close(self) -> list[str]:
        """Cancel what is left, stop the loop; returns the names of tasks left pending."""

        async def cancel_rest() -> list[str]:
            me = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
            return [t.get_name() for t in rest]

        try:
            pending = self.run(cancel_rest(), 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()
        return pending


def received_of(m: MessageExt, consumer: str) -> Received:
    """A pyrmq delivery in the form the C++ collectors use."""
    return Received(
        consumer=consumer,
        topic=m.topic,
        tags=(m.tags or "").encode(),
        keys=" ".join(m.keys).encode(),
        body=m.body,
        msg_id=m.msg_id,
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
        reconsume_times=m.reconsume_times,
        born_ms=m.born_timestamp,
        store_ms=m.store_timestamp,
        arrival=time.time(),
        props={k: v.encode() for k, v in m.properties.items()},
        store_size=m.store_size,
        sys_flag=m.sys_flag,
    )


Handler = Callable[[MessageExt, ConsumeConcurrentlyContext], ConsumeConcurrentlyStatus]


class PyClients:
    """pyrmq clients on one Loop, shut down (bounded) at the end of the test."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self.loop = Loop()
        self._clients: list[Producer | PushConsumer | PullConsumer] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = WAIT) -> T:
        return self.loop.run(coro, timeout)

    def _build(self, factory: Callable[[], T]) -> T:
        async def build() -> T:  # asyncio objects are made on the loop that uses them
            return factory()

        return self.run(build(), 10)

    def producer(self) -> Producer:
        p = self._build(
            lambda: Producer(
                unique("PID_py"), self.namesrv, instance_name=unique("py"), send_msg_timeout=5.0
            )
        )
        self._clients.append(p)
        self.run(p.start())
        return p

    def push_consumer(
        self,
        group: str,
        topic: str,
        collector: Collector,
        *,
        handler: Handler | None = None,
        from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    ) -> PushConsumer:
        """A push consumer whose listener records each delivery into `collector`;
        ``handler(msg, ctx)`` gives the status (default CONSUME_SUCCESS)."""
        c = self._build(
            lambda: PushConsumer(
                group,
                self.namesrv,
                consume_from_where=from_where,
                instance_name=unique("pyc"),
                await_termination_seconds=5.0,
            )
        )
        c.subscribe(topic)

        def listener(
            msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext
        ) -> ConsumeConcurrentlyStatus:
            status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
            for m in msgs:
                collector.add(received_of(m, collector.name))
                if handler is not None:
                    got = handler(m, ctx)
                    if got is not ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
                        status = got
            return status

        c.register_message_listener(listener)
        self._clients.append(c)
        self.run(c.start())
        return c

    def pull_consumer(self, group: str, topic: str) -> PullConsumer:
        c = self._build(
            lambda: PullConsumer(
                group,
                self.namesrv,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                instance_name=unique("pyl"),
            )
        )
        c.subscribe(topic)
        self._clients.append(c)
        self.run(c.start())
        return c

    def shutdown(self, client: Producer | PushConsumer | PullConsumer) -> None:
        self.run(client.shutdown(), 30)

    def close(self) -> None:
        errors = []
        for c in reversed(self._clients):
            try:
                self.shutdown(c)
            except Exception as exc:
                errors.append(repr(exc))
        self._clients.clear()
        pending = self.loop.close()
        assert not errors, f"pyrmq client shutdown failed: {errors}"
        assert not pending, f"tasks left pending after shutdown: {pending}"


@pytest.fixture
def py(server) -> Iterator[PyClients]:
    c = PyClients(server.namesrv)
    yield c
    c.close()


# --- checks -----------------------------------------------------------------------------------


def by_body(msgs: list[Received]) -> dict[bytes, Received]:
    """Index deliveries by body, failing on a body delivered twice."""
    dups = {b[:60]: n for b, n in Counter(m.body for m in msgs).items() if n > 1}
    assert not dups, f"delivered more than once: {list(dups.items())[:5]}"
    return {m.body: m for m in msgs}


def assert_same_set(got: object, sent: object) -> None:
    got, sent = set(got), set(sent)  # type: ignore[call-overload]
    assert got == sent, (
        f"missing {len(sent - got)} (e.g. {[b[:60] for b in sorted(sent - got)[:3]]}), "
        f"unexpected {len(got - sent)} (e.g. {[b[:60] for b in sorted(got - sent)[:3]]})"
    )


def is_uniq_key(msg_id: str) -> bool:
    return len(msg_id) == 32 and all(c in "0123456789ABCDEF" for c in msg_id)


class Sent:
    """What one message was sent with."""

    def __init__(
        self,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | None = None,
        props: dict[str, str] | None = None,
        binary: bool = False,
    ) -> None:
        self.body, self.tags, self.keys, self.props = body, tags, keys, dict(props or {})
        self.binary = binary
        self.msg_id = ""

    def py_message(self, topic: str) -> Message:
        props = dict(self.props)
        if self.binary:  # lets the C++ listener read the body past its NUL bytes
            props[BODY_LEN] = str(len(self.body))
        return Message(topic, self.body, tags=self.tags, keys=self.keys, properties=props)

    def cpp_message(self, topic: str):  # -> rocketmq.client.Message
        return make_message(
            topic, self.body, tags=self.tags, keys=self.keys, props=self.props, binary=self.binary
        )

    def check(self, m: Received, topic: str) -> None:
        """m is this message, intact, with the msg id it was sent with."""
        what = self.body[:40]
        assert m.body == self.body, (what, len(m.body), len(self.body))
        assert m.topic == topic, (what, m.topic)
        assert m.tags == (self.tags or "").encode(), (what, m.tags)
        assert m.keys == (self.keys or "").encode(), (what, m.keys)
        for k, v in self.props.items():
            assert m.props.get(k) == v.encode(), (what, k, m.props)
        assert is_uniq_key(m.msg_id), (what, m.msg_id)
        assert m.msg_id == self.msg_id, (what, m.msg_id, self.msg_id)


def content_cases(tag: str, n_text: int = 6) -> list[Sent]:
    """Texts with tags, keys (one or two) and user properties (UTF-8 too); a compressible
    text over 4 KiB; a compressible binary body over 4 KiB with NUL bytes; an
    incompressible binary body over 4 KiB; a small binary body."""
    rng = random.Random(tag)
    cases = [
        Sent(
            f"{tag}:text:{i}".encode(),
            tags=("TagA", "TagB", None)[i % 3],
            keys=f"k{i}" if i % 2 else f"k{i} order-{i}",
            props={"p1": f"v{i}", "p2": "\u5024-utf8", "p3": "a=b;c d"} if i % 3 != 2 else {},
        )
        for i in range(n_text)
    ]
    cases += [
        Sent(f"{tag}:big:".encode() + b"compress me " * 700, tags="TagBig", keys="big"),
        Sent(
            f"{tag}:bin:".encode() + bytes(range(256)) * 20,
            tags="TagBin",
            keys="bin",
            props={"p1": "binary"},
            binary=True,
        ),
        Sent(f"{tag}:rnd:".encode() + rng.randbytes(6000), keys="rnd", binary=True),
        Sent(f"{tag}:nul:".encode() + b"\0a\0b\0", keys="nul", binary=True),
    ]
    return cases


# --- 1. pyrmq producer -> C++ push consumer ---------------------------------------------------


def test_pyrmq_producer_to_cpp_push_consumer(clients, py):
    """Single sends, a batch, bodies over 4 KiB (compressed by pyrmq), binary bodies, tags,
    keys and user properties from pyrmq's Producer arrive intact at the C++ PushConsumer,
    whose msg id is our SendResult.msg_id (the UNIQ_KEY)."""
    name, group = unique("T_py2cpp"), unique("GID_py2cpp")
    cp = clients.producer()
    assert ensure_topic(clients, cp, name) == AUTO_QUEUES
    col = Collector("cpp")
    clients.push_consumer(group, name, col, extra_props=USER_PROPS)
    settle(cp, name, [col], queues=AUTO_QUEUES, mode="split")

    singles = content_cases(f"py2cpp:{name}")
    batch = [
        Sent(f"py2cpp:{name}:batch:{i}".encode(), tags=f"TagB{i % 2}", keys=f"bk-{i}",
             props={"p1": str(i), "p3": "batch"})
        for i in range(5)
    ]  # fmt: skip
    prod = py.producer()

    async def send_all() -> tuple[list[SendResult], SendResult]:
        results = [await prod.send(s.py_message(name)) for s in singles]
        batch_result = await prod.send_batch([s.py_message(name) for s in batch])
        return results, batch_result

    results, batch_result = py.run(send_all())
    for s, res in zip(singles, results, strict=True):
        assert res.ok and is_uniq_key(res.msg_id), res
        s.msg_id = res.msg_id
    assert batch_result.ok, batch_result
    batch_ids = batch_result.msg_id.split(",")
    assert len(batch_ids) == len(batch) and all(map(is_uniq_key, batch_ids)), batch_result
    for s, mid in zip(batch, batch_ids, strict=True):
        s.msg_id = mid

    every = singles + batch
    assert col.wait_bodies([s.body for s in every], WAIT), (
        f"missing {len({s.body for s in every} - set(col.bodies()))} of {len(every)}; "
        f"listener errors: {col.errors[:2]}"
    )
    time.sleep(1.0)  # let duplicates, if any, show up
    got = by_body(col.messages)
    assert_same_set(got, [s.body for s in every])
    for s in every:
        s.check(got[s.body], name)
    assert len({got[s.body].msg_id for s in every}) == len(every)
    # the batch: one queue, consecutive offsets from the result's
    members = [got[s.body] for s in batch]
    assert {m.queue_id for m in members} == {batch_result.message_queue.queue_id}
    assert [m.queue_offset for m in members] == list(
        range(batch_result.queue_offset, batch_result.queue_offset + len(batch))
    )
    # pyrmq compressed the compressible bodies over 4 KiB: the stored record is smaller
    for s in singles:
        if b":big:" in s.body or b":bin:" in s.body:
            assert got[s.body].store_size < len(s.body) // 2, (s.body[:30], got[s.body])
        elif b":rnd:" in s.body:
            assert got[s.body].store_size > len(s.body), "random bytes do not shrink"
    assert not col.errors, col.errors


# --- 2. C++ producer -> pyrmq push and pull consumers ------------------------------------------


def test_cpp_producer_to_pyrmq_consumers(clients, py):
    """What the C++ Producer sends (bodies over 4 KiB that it compresses, binary bodies,
    tags, keys, user properties, a batch) arrives intact at pyrmq's PushConsumer and at its
    PullConsumer, with the msg id of the C++ SendResult (batch members: the UNIQ_KEY the
    C++ client gave each, as its own PullConsumer sees it)."""
    name = unique("T_cpp2py")
    cp = clients.producer()
    singles = content_cases(f"cpp2py:{name}")
    for s in singles:
        res = cp.send_sync(s.cpp_message(name))
        assert_send_ok(res)
        s.msg_id = res.msg_id
    batch = [
        Sent(f"cpp2py:{name}:batch:{i}".encode(), tags=f"TagB{i % 2}", keys=f"bk-{i}",
             props={"p1": str(i), "p3": "batch"})
        for i in range(5)
    ]  # fmt: skip
    res = cp.send_batch([s.cpp_message(name) for s in batch])
    assert_send_ok(res, batch=True)
    every = singles + batch
    bodies = [s.body for s in every]

    # The C++ client's own view of the batch members' ids (its SendResult has none).
    assert wait_route(clients, name) == AUTO_QUEUES
    cpp_view = by_body(pull_until(clients.pull_consumer(), name, bodies, timeout=WAIT))
    assert_same_set(cpp_view, bodies)
    for s in batch:
        s.msg_id = cpp_view[s.body].msg_id
        assert is_uniq_key(s.msg_id), cpp_view[s.body]
    assert len({s.msg_id for s in every}) == len(every)

    push_col = Collector("py-push")
    py.push_consumer(
        unique("GID_cpp2py"), name, push_col, from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    assert push_col.wait_bodies(bodies, WAIT), (
        f"push: missing {len(set(bodies) - set(push_col.bodies()))} of {len(bodies)}"
    )

    pull = py.pull_consumer(unique("GID_cpp2py_pull"), name)
    pulled: list[Received] = []

    async def poll_all() -> None:
        want = set(bodies)
        while not want <= {m.body for m in pulled}:
            pulled.extend(received_of(m, "py-pull") for m in await pull.poll(timeout=1.0))

    py.run(poll_all(), WAIT)
    time.sleep(1.0)

    for col_name, msgs in (("push", push_col.messages), ("pull", pulled)):
        got = by_body(msgs)
        assert_same_set(got, bodies)
        for s in every:
            m = got[s.body]
            s.check(m, name)
            assert m.queue_offset == cpp_view[s.body].queue_offset, (col_name, s.body[:30])
            assert m.queue_id == cpp_view[s.body].queue_id, (col_name, s.body[:30])
            big = len(s.body) > 4096  # the C++ client compresses these, whatever the ratio
            assert bool(m.sys_flag & SYSFLAG_COMPRESSED) == big, (
                col_name,
                s.body[:30],
                m.sys_flag,
            )
        members = [got[s.body] for s in batch]
        assert len({m.queue_id for m in members}) == 1, (col_name, members)
        assert [m.queue_offset for m in members] == list(
            range(res.offset, res.offset + len(batch))
        ), col_name


# --- 3. one group, a C++ and a pyrmq push consumer ---------------------------------------------


def test_mixed_consumer_group_splits_queues(clients, py, server, create_topic):
    """A C++ and a pyrmq PushConsumer in one clustering group on a topic of 8 queues.

    The C++ consumer runs alone first (and commits its offsets); the pyrmq one joins while
    messages keep coming (the rebalance window: the C++ consumer hands 4 queues over at
    its committed offsets, so nothing is lost, and what was consumed past the last commit
    may come twice). Once settled, both compute the same AllocateMessageQueueAveragely split
    over the sorted client ids and queues (4 + 4), and every message, from either producer,
    is consumed exactly once, by the owner of its queue. When the pyrmq consumer leaves, the
    C++ one continues its queues from the offsets pyrmq committed."""
    name, group = unique("T_mixed"), unique("GID_mixed")
    create_topic(server, name, MIXED_QUEUES)
    assert wait_route(clients, name, MIXED_QUEUES) == MIXED_QUEUES
    cp = clients.producer()
    cpp_col, py_col = Collector("cpp"), Collector("py")
    clients.push_consumer(group, name, cpp_col)
    settle(cp, name, [cpp_col], queues=MIXED_QUEUES, mode="split")

    # A: the C++ consumer alone; then one offset-persist period, so the broker has them.
    alone = [f"mixed:{name}:alone:{i}".encode() for i in range(24)]
    for body in alone:
        assert_send_ok(cp.send_sync(make_message(name, body)))
    assert cpp_col.wait_bodies(alone, WAIT), f"missing {set(alone) - set(cpp_col.bodies())}"
    time.sleep(5.5)

    # B: the pyrmq consumer joins while a pyrmq producer keeps sending.
    prod = py.producer()
    joining: list[bytes] = []
    stop = threading.Event()

    async def stream() -> None:
        i = 0
        while not stop.is_set():
            body = f"mixed:{name}:join:{i}".encode()
            assert (await prod.send(Message(name, body))).ok
            joining.append(body)
            i += 1
            await asyncio.sleep(0.02)

    streaming = asyncio.run_coroutine_threadsafe(stream(), py.loop.loop)
    try:
        time.sleep(0.5)
        pc = py.push_consumer(group, name, py_col)
        owner = settle(cp, name, [cpp_col, py_col], queues=MIXED_QUEUES, mode="split", timeout=90)
        time.sleep(0.5)
    finally:
        stop.set()
        streaming.result(10)
    assert sorted(Counter(owner.values()).values()) == [4, 4], owner
    window = alone + joining
    deadline = time.monotonic() + WAIT
    while set(window) - set(cpp_col.bodies() + py_col.bodies()) and time.monotonic() < deadline:
        time.sleep(0.2)

    # Both sides agree with AllocateMessageQueueAveragely over the broker's member list.
    async def members() -> tuple[list[str], set[MessageQueue]]:
        addr = pc.client.any_broker_of(name)
        assert addr is not None
        cids = await pc.client.api.get_consumer_id_list(addr, group)
        return cids, set(pc.rebalance.topic_subscribe_info_table[name])

    cids, mqs = py.run(members())
    assert len(cids) == 2 and pc.client_id in cids, cids
    assert {mq.queue_id for mq in mqs} == set(range(MIXED_QUEUES)), mqs
    strategy = AllocateMessageQueueAveragely()
    expected = {}
    for cid in cids:
        for mq in strategy.allocate(group, cid, sorted(mqs), sorted(cids)):
            expected[mq.queue_id] = "py" if cid == pc.client_id else "cpp"
    assert owner == expected, (owner, expected, sorted(cids))
    assert {mq.queue_id for mq in pc.rebalance.process_queue_table if mq.topic == name} == {
        q for q, who in expected.items() if who == "py"
    }

    # C: steady state, messages from both producers.
    steady = [f"mixed:{name}:steady:{i}".encode() for i in range(96)]

    async def send_py(chunk: list[bytes]) -> None:
        for body in chunk:
            assert (await prod.send(Message(name, body, keys=body.decode()))).ok

    py.run(send_py(steady[::2]))
    for body in steady[1::2]:
        assert_send_ok(cp.send_sync(make_message(name, body, keys=body.decode())))
    deadline = time.monotonic() + WAIT
    while set(steady) - set(cpp_col.bodies() + py_col.bodies()) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)  # let duplicates, if any, show up

    deliveries = Counter(cpp_col.bodies() + py_col.bodies())
    both = set(cpp_col.bodies()) & set(py_col.bodies())
    twice = {b for b, n in deliveries.items() if n > 1}
    steady_by = {
        c.name: [m for m in c.messages if b":steady:" in m.body] for c in (cpp_col, py_col)
    }
    joined_by = {c.name: [m for m in c.messages if b":join:" in m.body] for c in (cpp_col, py_col)}
    print(
        f"\nmixed group: C++ queues {sorted(q for q, w in owner.items() if w == 'cpp')}, pyrmq "
        f"queues {sorted(q for q, w in owner.items() if w == 'py')}; before the join "
        f"{len(alone)} sent, C++ consumed {sum(b':alone:' in m.body for m in cpp_col.messages)}; "
        f"while joining {len(joining)} sent, C++ consumed {len(joined_by['cpp'])}, pyrmq "
        f"{len(joined_by['py'])}; settled: {len(steady)} sent, C++ {len(steady_by['cpp'])}, "
        f"pyrmq {len(steady_by['py'])}; delivered twice {len(twice)} (consumed by both "
        f"{len(both)}); client ids {sorted(cids)}"
    )
    assert_same_set(deliveries, window + steady)
    assert not {b for b in twice if b":steady:" in b}, "a message was consumed twice after settling"
    assert len(twice) <= len(joining) // 2 + MIXED_QUEUES, f"{len(twice)} duplicates in the window"
    for name_, msgs in steady_by.items():
        assert msgs, f"{name_} got none of the steady-state messages"
        wrong = {m.queue_id for m in msgs if owner[m.queue_id] != name_}
        assert not wrong, f"{name_} consumed queues {wrong} it does not own ({owner})"

    # D: the pyrmq consumer leaves (final offset commit, UNREGISTER_CLIENT); the C++ one
    # takes its queues over from those offsets: nothing it consumed comes again.
    py.shutdown(pc)
    settle(cp, name, [cpp_col], queues=MIXED_QUEUES, mode="split")
    after = [f"mixed:{name}:after:{i}".encode() for i in range(32)]
    for body in after:
        assert_send_ok(cp.send_sync(make_message(name, body)))
    assert cpp_col.wait_bodies(after, WAIT), f"missing {set(after) - set(cpp_col.bodies())}"
    time.sleep(1.0)
    again = [m.body for m in cpp_col.messages if b":steady:" in m.body]
    assert Counter(again) == Counter(m.body for m in steady_by["cpp"]), (
        f"after the pyrmq consumer left, the C++ one consumed {len(again)} steady-state "
        f"messages (it had {len(steady_by['cpp'])}): pyrmq's offsets were not committed"
    )
    assert_same_set(cpp_col.bodies() + py_col.bodies(), window + steady + after)
    for c in (cpp_col, py_col):
        assert not c.errors, c.errors


# --- 4. RECONSUME_LATER of C++-produced messages -----------------------------------------------


def test_pyrmq_retry_of_cpp_produced_messages(clients, py):
    """A pyrmq PushConsumer answering RECONSUME_LATER for C++-produced messages (text, bodies
    the C++ client compressed, binary) gets them back from %RETRY%<group> after the delay:
    twice at level 1 (1 s), so the second send-back is of a record of the retry topic; one
    message once at level 0 (the broker's 3 + reconsumeTimes: 10 s). Each comes back under
    its original topic, with RETRY_TOPIC, the same msg id, ORIGIN_MESSAGE_ID = that id,
    reconsumeTimes 1, 2, the original born timestamp and sysFlag, and body, tags, keys and
    user properties intact; after a success nothing comes again."""
    name, group = unique("T_retry"), unique("GID_retry")
    cp = clients.producer()
    sent = content_cases(f"retry:{name}", n_text=3)
    for s in sent:
        res = cp.send_sync(s.cpp_message(name))
        assert_send_ok(res)
        s.msg_id = res.msg_id
    default_delay = sent[0].body  # left at delay level 0: the broker picks level 3 (10 s)
    fails = {s.body: 1 if s.body == default_delay else 2 for s in sent}
    seen: dict[tuple[bytes, int], float] = {}  # (body, reconsume times) -> time.time()

    def handler(m: MessageExt, ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        seen.setdefault((m.body, m.reconsume_times), time.time())
        if m.reconsume_times < fails.get(m.body, 0):
            if m.body != default_delay:
                ctx.delay_level_when_next_consume = 1
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    col = Collector("py-retry")
    py.push_consumer(
        group, name, col, handler=handler, from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    want = {(body, n) for body, k in fails.items() for n in range(k + 1)}

    def missing(msgs: list[Received]) -> set[tuple[bytes, int]]:
        return want - {(m.body, m.reconsume_times) for m in msgs}

    assert col.wait_for(lambda msgs: not missing(msgs), WAIT + 15), (
        f"missing deliveries (body, reconsumeTimes): "
        f"{sorted((b[:30], n) for b, n in missing(col.messages))}"
    )
    time.sleep(2.0)  # a success is final: nothing comes again
    deliveries = Counter((m.body, m.reconsume_times) for m in col.messages)
    assert set(deliveries) == want, sorted((b[:30], n) for b, n in set(deliveries) ^ want)
    assert all(n == 1 for n in deliveries.values()), deliveries
    got = {(m.body, m.reconsume_times): m for m in col.messages}
    for s in sent:
        first = got[(s.body, 0)]
        s.check(first, name)
        assert "RETRY_TOPIC" not in first.props, first.props
        for n in range(1, fails[s.body] + 1):
            again = got[(s.body, n)]
            s.check(again, name)  # renamed back to the original topic, same UNIQ_KEY
            assert again.props.get("RETRY_TOPIC") == name.encode(), again.props
            assert again.props.get("ORIGIN_MESSAGE_ID") == s.msg_id.encode(), again.props
            assert again.born_ms == first.born_ms, (again.born_ms, first.born_ms)
            assert again.sys_flag == first.sys_flag, (s.body[:30], first.sys_flag, again.sys_flag)
            waited = seen[(s.body, n)] - seen[(s.body, n - 1)]
            low = 10.0 if s.body == default_delay else 1.0
            assert waited >= low - 0.5, f"{s.body[:30]!r} came back after {waited:.1f} s"
    assert not col.errors, col.errors
