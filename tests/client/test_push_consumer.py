"""PushConsumer against a real NameServer + Broker (LocalCluster, TCP on
127.0.0.1): clustering and broadcasting delivery, tag filters, batches,
listener kinds, where a new group starts, committed offsets across
restarts, retries through %RETRY%<group> into %DLQ%<group>, flow control,
orderly consumption with broker locks, draining shutdown and the
NOTIFY_CONSUMER_IDS_CHANGED rebalance.

Every wait is a bounded poll (`wait_until`); no test asserts that something
was fast except through those bounds, well above what the step needs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from pyrmq import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from pyrmq.broker.subscription_group import SubscriptionGroupConfig
from pyrmq.client.api import MQClientAPI
from pyrmq.common.errors import BrokerError, RemotingError
from pyrmq.remoting import RemotingClient
from pyrmq.testing import LocalCluster

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
TIMESTAMP = ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
#: every delay level 1 s, so a retry comes back quickly
SHORT_DELAY_LEVELS = " ".join(["1s"] * 18)
#: The heartbeat that creates %RETRY%<group> is answered before the broker
#: has re-registered with the name server, so a new group's first rebalance
#: can miss the retry queue; a short rebalance interval bounds that wait in
#: the retry tests (the default is 20 s).
RETRY_REBALANCE_INTERVAL = 1.0


# -- helpers ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def cluster(tmp_path: Any, **settings: Any) -> AsyncIterator[LocalCluster]:
    c = LocalCluster(str(tmp_path / "store"), **settings)
    await c.start()
    try:
        yield c
    finally:
        await c.shutdown()


@contextlib.asynccontextmanager
async def running(*clients: Any) -> AsyncIterator[None]:
    """Start producers/consumers in order; shut them down in reverse."""
    async with contextlib.AsyncExitStack() as stack:
        for cl in clients:
            await cl.start()
            stack.push_async_callback(cl.shutdown)
        yield


async def wait_until(pred: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def send_bodies(
    producer: Producer,
    topic: str,
    bodies: Iterable[str],
    *,
    tags: str | None = None,
    mq: MessageQueue | None = None,
) -> None:
    for b in bodies:
        await producer.send(Message(topic, b.encode(), tags=tags), mq=mq)
    await wait_routed(producer.client.api, topic)


async def wait_routed(api: MQClientAPI, topic: str, timeout: float = 5.0) -> None:
    """Wait until the name server routes an auto-created topic: the broker
    registers it a moment after the first send, and a consumer that looks
    before then waits for its next route refresh."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await api.get_topic_route(topic) is None:
        if loop.time() > deadline:
            raise AssertionError(f"no route for {topic} after {timeout}s")
        await asyncio.sleep(0.01)


def queue0(topic: str) -> MessageQueue:
    """Tests that want a single busy queue send everything to queue 0 (an
    auto-created topic has 4 queues; the others stay empty)."""
    return MessageQueue(topic, "broker-a", 0)


def owned(consumer: PushConsumer, topic: str) -> set[MessageQueue]:
    return {mq for mq in consumer.rebalance.process_queue_table if mq.topic == topic}


def started_on(consumer: PushConsumer, topic: str, n: int) -> Callable[[], bool]:
    """True once n queues of topic have a start offset (their pulls run)."""
    return lambda: len(consumer.offset_store.clone_offset_table(topic)) >= n


class Collector:
    """Records every delivery; `listen` is the (coroutine) listener."""

    def __init__(self) -> None:
        self.msgs: list[MessageExt] = []

    async def listen(self, msgs: list[MessageExt], ctx: Any) -> None:
        self.msgs.extend(msgs)

    @property
    def bodies(self) -> list[str]:
        return [m.body.decode() for m in self.msgs]

    def count(self) -> int:
        return len(self.msgs)


def push(namesrv: str, group: str, topic: str, listener: Any, **kw: Any) -> PushConsumer:
    expr = kw.pop("sub_expression", "*")
    orderly = kw.pop("orderly", False)
    c = PushConsumer(group, namesrv, **kw)
    c.subscribe(topic, expr)
    if isinstance(listener, Collector):
        listener = listener.listen
    c.register_message_listener(listener, orderly=orderly)
    return c


# -- clustering delivery ---------------------------------------------------------------------


def test_clustering_delivers_each_message_exactly_once(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            got = Collector()
            consumer = push(c.namesrv_addr, "G_once", "OnceT", got, consume_from_where=FIRST)
            before = [f"b{i}" for i in range(60)]
            after = [f"a{i}" for i in range(60)]
            async with running(producer):
                await send_bodies(producer, "OnceT", before)
                async with running(consumer):
                    await send_bodies(producer, "OnceT", after)
                    await wait_until(lambda: got.count() >= 120, "120 messages")
                    await asyncio.sleep(0.3)  # room for duplicates to show up
            assert Counter(got.bodies) == Counter(before + after)
            assert {m.topic for m in got.msgs} == {"OnceT"}
            assert all(m.reconsume_times == 0 for m in got.msgs)

    arun(main(), timeout=30)


def test_failed_pulls_are_retried_and_deliver_once_they_work(arun, tmp_path):
    """A pull that fails reaches the pull loop as its error from the
    answer's read callback, and the loop backs off and pulls again: one the
    broker refuses (the group's consumeEnable off; nothing is delivered
    until it is on), and held pulls whose connection closed under them."""

    async def main() -> None:
        async with cluster(tmp_path) as c:
            groups = c.broker.groups
            groups.update(SubscriptionGroupConfig("G_fail", consume_enable=False))
            producer = Producer("pg", c.namesrv_addr)
            got = Collector()
            consumer = push(c.namesrv_addr, "G_fail", "FailT", got, consume_from_where=FIRST)
            failed: list[BaseException] = []
            pulled = consumer._pulled

            def watched(
                fut: Any, addr: str, mq: Any, pq: Any, sub: Any, resp: Any, exc: Any
            ) -> None:
                pulled(fut, addr, mq, pq, sub, resp, exc)
                if fut.done() and not fut.cancelled() and fut.exception() is not None:
                    failed.append(fut.exception())

            consumer._pulled = watched  # type: ignore[method-assign]
            first = [f"f{i}" for i in range(10)]
            then = [f"t{i}" for i in range(10)]
            async with running(producer):
                await send_bodies(producer, "FailT", first)
                async with running(consumer):
                    await wait_until(lambda: bool(failed), "a refused pull", timeout=15)
                    assert isinstance(failed[0], BrokerError), failed[0]
                    assert "no permission" in str(failed[0]), failed[0]
                    assert got.count() == 0, got.bodies
                    groups.update(SubscriptionGroupConfig("G_fail", consume_enable=True))
                    await wait_until(lambda: got.count() >= 10, "the first 10", timeout=20)
                    # the held pulls' connection goes away under them
                    await wait_until(
                        lambda: c.broker.pull_processor.held_count > 0, "a held pull", timeout=15
                    )
                    seen = len(failed)
                    consumer.client.remoting.close_connection(c.broker_addr)
                    await wait_until(lambda: len(failed) > seen, "a failed held pull", timeout=15)
                    assert isinstance(failed[-1], RemotingError), failed[-1]
                    await send_bodies(producer, "FailT", then)
                    await wait_until(lambda: got.count() >= 20, "the next 10", timeout=20)
                    await asyncio.sleep(0.3)  # room for duplicates to show up
            assert Counter(got.bodies) == Counter(first + then)

    arun(main(), timeout=90)


def test_tag_filter_delivers_only_matching_tags(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            got = Collector()
            consumer = push(
                c.namesrv_addr,
                "G_tags",
                "TagT",
                got,
                consume_from_where=FIRST,
                sub_expression="TagA || TagB",
            )
            want = []
            async with running(producer):
                for i in range(40):
                    tag = ("TagA", "TagB", "TagC", None)[i % 4]
                    await send_bodies(producer, "TagT", [f"{tag}-{i}"], tags=tag)
                    if tag in ("TagA", "TagB"):
                        want.append(f"{tag}-{i}")
                # the last message matches: once it is in, every queue was read past
                # the non-matching ones
                await send_bodies(producer, "TagT", ["TagB-last"], tags="TagB")
                want.append("TagB-last")
                async with running(consumer):
                    await wait_until(lambda: got.count() >= len(want), "tagged messages")
                    await asyncio.sleep(0.3)
            assert sorted(got.bodies) == sorted(want)
            assert {m.tags for m in got.msgs} == {"TagA", "TagB"}

    arun(main(), timeout=30)


def test_consume_message_batch_max_size(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            sizes: list[int] = []
            got = Collector()

            async def listener(msgs: list[MessageExt], ctx: Any) -> None:
                sizes.append(len(msgs))
                await got.listen(msgs, ctx)

            consumer = push(
                c.namesrv_addr,
                "G_batch",
                "BatchT",
                listener,
                consume_from_where=FIRST,
                consume_message_batch_max_size=8,
            )
            bodies = [f"m{i}" for i in range(70)]
            async with running(producer):
                await send_bodies(producer, "BatchT", bodies, mq=queue0("BatchT"))
                async with running(consumer):
                    await wait_until(lambda: got.count() >= 70, "70 messages")
            assert sorted(got.bodies) == sorted(bodies)
            assert max(sizes) == 8 and min(sizes) >= 1, sizes
            # 70 messages in pulls of at most 32 -> batches of 8 with a short tail per pull
            assert sizes.count(8) >= 6, sizes

    arun(main(), timeout=30)


def test_coroutine_listener_runs_on_the_loop_and_function_listener_in_a_pool(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            coro_threads: list[str] = []
            func_threads: list[str] = []
            coro_got: list[str] = []
            func_got: list[str] = []
            lock = threading.Lock()

            async def coro_listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
                coro_threads.append(threading.current_thread().name)
                coro_got.extend(m.body.decode() for m in msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            def func_listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
                with lock:
                    func_threads.append(threading.current_thread().name)
                    func_got.extend(m.body.decode() for m in msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            c1 = push(c.namesrv_addr, "G_coro", "KindT", coro_listener, consume_from_where=FIRST)
            c2 = push(c.namesrv_addr, "G_func", "KindT", func_listener, consume_from_where=FIRST)
            bodies = [f"m{i}" for i in range(20)]
            async with running(producer):
                await send_bodies(producer, "KindT", bodies)
                async with running(c1, c2):
                    await wait_until(
                        lambda: len(coro_got) >= 20 and len(func_got) >= 20, "both groups"
                    )
            assert sorted(coro_got) == sorted(bodies)
            assert sorted(func_got) == sorted(bodies)
            here = threading.current_thread().name
            assert set(coro_threads) == {here}
            assert here not in func_threads
            assert all(n.startswith("pyrmq-consume-G_func") for n in func_threads), func_threads

    arun(main(), timeout=30)


def _called_from(name: str) -> bool:
    """Whether a function called `name` is on the calling thread's stack."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == name:
            return True
        f = f.f_back
    return False


def test_coroutine_listener_runs_as_its_own_task_whether_it_waits_or_not(arun, tmp_path):
    """On Python 3.12+ the listener of a pull's messages starts inside the
    read callback that decoded them (an eager task), before 3.12 a loop turn
    later; either way it runs as a task of its own (asyncio.timeout works,
    current_task is named), a listener that waits and one that does not
    both get every message once, and the offsets of both are committed."""

    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            got: list[str] = []
            tasks: set[str] = set()
            in_read_callback: list[bool] = []

            async def listener(msgs: list[MessageExt], ctx: Any) -> None:
                in_read_callback.append(_called_from("_pulled"))
                task = asyncio.current_task()
                assert task is not None
                tasks.add(task.get_name())
                async with asyncio.timeout(5):
                    for m in msgs:
                        if int(m.body) % 2:
                            await asyncio.sleep(0.001)  # suspends: the rest runs later
                        got.append(m.body.decode())

            bodies = [str(i) for i in range(40)]
            consumer = push(c.namesrv_addr, "G_eager", "EagerT", listener, consume_from_where=FIRST)
            async with running(producer):
                await send_bodies(producer, "EagerT", bodies[:1])
                async with running(consumer):
                    await wait_until(started_on(consumer, "EagerT", 4), "the pulls to start")
                    for b in bodies[1:]:  # one at a time: each woken pull brings one
                        await producer.send(Message("EagerT", b.encode()))
                    await wait_until(lambda: len(got) >= len(bodies), "every message")
                    await asyncio.sleep(0.2)  # nothing comes twice
                    ends = {
                        mq: await producer.client.api.get_max_offset(c.broker_addr, mq)
                        for mq in owned(consumer, "EagerT")
                    }
                    table = consumer.offset_store.clone_offset_table("EagerT")
            assert sorted(got, key=int) == bodies
            assert tasks == {"pyrmq:consumer:consume"}
            assert table == ends
            # every pull answer is handed over in _pulled, the read callback
            assert in_read_callback
            if sys.version_info >= (3, 12):
                assert all(in_read_callback), in_read_callback
            else:
                assert not any(in_read_callback), in_read_callback

    arun(main(), timeout=60)


def test_a_loop_task_factory_makes_the_consume_tasks(arun, tmp_path):
    """A loop with a task factory of its own (context propagation,
    monitoring) gets the consume tasks made by it on every Python, so they
    start a loop turn later, not eagerly."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        made: list[str] = []

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
            made.append(getattr(coro, "__qualname__", ""))
            return asyncio.Task(coro, loop=loop, **kw)

        loop.set_task_factory(factory)
        try:
            async with cluster(tmp_path) as c:
                producer = Producer("pg", c.namesrv_addr)
                got: list[str] = []
                in_read_callback: list[bool] = []

                async def listener(msgs: list[MessageExt], ctx: Any) -> None:
                    in_read_callback.append(_called_from("_pulled"))
                    got.extend(m.body.decode() for m in msgs)

                bodies = [f"m{i}" for i in range(10)]
                consumer = push(c.namesrv_addr, "G_fac", "FacT", listener, consume_from_where=FIRST)
                async with running(producer):
                    await send_bodies(producer, "FacT", bodies)
                    async with running(consumer):
                        await wait_until(lambda: len(got) >= len(bodies), "every message")
            assert sorted(got) == bodies
            assert in_read_callback and not any(in_read_callback), in_read_callback
            assert any(q.endswith("ConsumeMessageConcurrentlyService._consume") for q in made), made
        finally:
            loop.set_task_factory(None)

    arun(main(), timeout=60)


# -- where a new group starts, and committed offsets -----------------------------------------


def test_consume_from_where_first_last_timestamp(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            early = [f"early{i}" for i in range(8)]
            late = [f"late{i}" for i in range(8)]
            fresh = [f"fresh{i}" for i in range(8)]
            async with running(producer):
                await send_bodies(producer, "WhereT", early)
                await asyncio.sleep(0.05)
                ts = int(time.time() * 1000)
                await asyncio.sleep(0.05)
                await send_bodies(producer, "WhereT", late)
                first, last, stamp = Collector(), Collector(), Collector()
                c_first = push(c.namesrv_addr, "G_first", "WhereT", first, consume_from_where=FIRST)
                c_last = push(c.namesrv_addr, "G_last", "WhereT", last, consume_from_where=LAST)
                c_ts = push(
                    c.namesrv_addr,
                    "G_ts",
                    "WhereT",
                    stamp,
                    consume_from_where=TIMESTAMP,
                    consume_timestamp=ts,
                )
                async with running(c_first, c_last, c_ts):
                    for cons in (c_first, c_last, c_ts):
                        await wait_until(started_on(cons, "WhereT", 4), "start offsets")
                    await send_bodies(producer, "WhereT", fresh)
                    await wait_until(
                        lambda: first.count() >= 24 and last.count() >= 8 and stamp.count() >= 16,
                        "all three groups",
                    )
                    await asyncio.sleep(0.3)
            assert sorted(first.bodies) == sorted(early + late + fresh)
            assert sorted(last.bodies) == sorted(fresh)
            assert sorted(stamp.bodies) == sorted(late + fresh)

    arun(main(), timeout=30)


def test_committed_offsets_survive_a_consumer_restart(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            old = [f"old{i}" for i in range(30)]
            new = [f"new{i}" for i in range(6)]
            async with running(producer):
                await send_bodies(producer, "RestartT", old)
                one = Collector()
                async with running(
                    push(c.namesrv_addr, "G_rs", "RestartT", one, consume_from_where=FIRST)
                ):
                    await wait_until(lambda: one.count() >= 30, "first run")
                assert sorted(one.bodies) == sorted(old)
                await send_bodies(producer, "RestartT", new)
                two = Collector()
                async with running(
                    push(c.namesrv_addr, "G_rs", "RestartT", two, consume_from_where=FIRST)
                ):
                    await wait_until(lambda: two.count() >= 6, "second run")
                    await asyncio.sleep(0.5)  # a redelivery of old messages would show up now
                assert sorted(two.bodies) == sorted(new)

    arun(main(), timeout=30)


# -- retries and the dead-letter queue -------------------------------------------------------


async def read_topic(namesrv: str, topic: str, n: int, timeout: float = 10.0) -> list[MessageExt]:
    """Every message of topic (at least n), read with an assigned PullConsumer."""
    pc = PullConsumer("G_reader", namesrv, consume_from_where=FIRST, auto_commit=False)
    out: list[MessageExt] = []
    async with running(pc):
        await wait_routed(pc.client.api, topic)  # created by the broker a moment ago
        pc.assign(await pc.fetch_message_queues(topic))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(out) < n and loop.time() < deadline:
            out.extend(await pc.poll(0.2))
    return out


def test_reconsume_later_goes_through_retry_topic_then_dlq(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, message_delay_level=SHORT_DELAY_LEVELS) as c:
            producer = Producer("pg", c.namesrv_addr)
            seen: list[MessageExt] = []
            good: list[str] = []

            async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
                for m in msgs:
                    if m.body == b"bad":
                        seen.append(m)
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER
                    good.append(m.body.decode())
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            consumer = push(
                c.namesrv_addr,
                "G_retry",
                "RetryT",
                listener,
                consume_from_where=FIRST,
                max_reconsume_times=2,
                rebalance_interval=RETRY_REBALANCE_INTERVAL,
            )
            async with running(producer):
                await send_bodies(producer, "RetryT", ["ok1", "bad", "ok2"])
                await consumer.start()
                try:
                    await wait_until(lambda: len(seen) >= 3, "two redeliveries", timeout=15)
                    dlq = await read_topic(c.namesrv_addr, "%DLQ%G_retry", 1)
                    await asyncio.sleep(0.5)
                finally:
                    await consumer.shutdown()
            assert sorted(good) == ["ok1", "ok2"]
            assert [m.reconsume_times for m in seen] == [0, 1, 2]
            # a redelivered message shows its original topic again
            assert [m.topic for m in seen] == ["RetryT"] * 3
            assert all(m.retry_topic == "RetryT" for m in seen[1:])
            assert seen[0].msg_id == seen[1].msg_id == seen[2].msg_id
            assert [m.body for m in dlq] == [b"bad"]
            assert dlq[0].topic == "%DLQ%G_retry"
            assert dlq[0].reconsume_times == 3
            assert dlq[0].properties.get("RETRY_TOPIC") == "RetryT"

    arun(main(), timeout=40)


def test_raising_listener_counts_as_reconsume_later(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, message_delay_level=SHORT_DELAY_LEVELS) as c:
            producer = Producer("pg", c.namesrv_addr)
            seen: list[tuple[str, int, str]] = []

            def listener(msgs: list[MessageExt], ctx: Any) -> None:
                for m in msgs:
                    seen.append((m.body.decode(), m.reconsume_times, m.topic))
                    if m.body == b"boom" and m.reconsume_times == 0:
                        raise RuntimeError("listener failure (expected by the test)")

            consumer = push(
                c.namesrv_addr,
                "G_raise",
                "RaiseT",
                listener,
                consume_from_where=FIRST,
                rebalance_interval=RETRY_REBALANCE_INTERVAL,
            )
            async with running(producer):
                await send_bodies(producer, "RaiseT", ["fine", "boom"])
                async with running(consumer):
                    await wait_until(lambda: len(seen) >= 3, "the redelivery", timeout=15)
                    await asyncio.sleep(0.5)
            assert sorted(seen) == [
                ("boom", 0, "RaiseT"),
                ("boom", 1, "RaiseT"),
                ("fine", 0, "RaiseT"),
            ]

    arun(main(), timeout=40)


# -- broadcasting ----------------------------------------------------------------------------


def test_broadcasting_every_member_gets_every_message_and_resumes_from_its_file(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            path1 = tmp_path / "b1" / "offsets.json"
            path2 = tmp_path / "b2" / "offsets.json"
            one, two = Collector(), Collector()

            def member(listener: Collector, path: Any) -> PushConsumer:
                return push(
                    c.namesrv_addr,
                    "G_bc",
                    "BcT",
                    listener,
                    consume_from_where=FIRST,
                    message_model=MessageModel.BROADCASTING,
                    offset_store_path=str(path),
                )

            first = [f"m{i}" for i in range(24)]
            async with running(producer):
                await send_bodies(producer, "BcT", first)
                async with running(member(one, path1), member(two, path2)):
                    await wait_until(lambda: one.count() >= 24 and two.count() >= 24, "both")
                    await asyncio.sleep(0.3)
                assert sorted(one.bodies) == sorted(first)
                assert sorted(two.bodies) == sorted(first)
                table = json.loads(path1.read_text())["offsetTable"]
                assert set(table) == {f"BcT@broker-a@{q}" for q in range(4)}, table
                assert sum(table.values()) == 24
                more = [f"n{i}" for i in range(5)]
                await send_bodies(producer, "BcT", more)
                again = Collector()
                async with running(member(again, path1)):
                    await wait_until(lambda: again.count() >= 5, "restarted member")
                    await asyncio.sleep(0.5)
                assert sorted(again.bodies) == sorted(more)
                assert sum(json.loads(path1.read_text())["offsetTable"].values()) == 29

    arun(main(), timeout=30)


# -- flow control ----------------------------------------------------------------------------


def test_flow_control_bounds_the_process_queue(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            threshold, batch = 50, 32
            counts: list[int] = []
            got = Collector()
            consumer: PushConsumer

            async def slow(msgs: list[MessageExt], ctx: Any) -> None:
                counts.append(consumer.rebalance.process_queue_table[ctx.message_queue].msg_count)
                await asyncio.sleep(0.003)
                await got.listen(msgs, ctx)

            consumer = push(
                c.namesrv_addr,
                "G_flow",
                "FlowT",
                slow,
                consume_from_where=FIRST,
                pull_threshold_for_queue=threshold,
                pull_batch_size=batch,
                consume_thread_max=1,
            )
            bodies = [f"m{i}" for i in range(300)]
            async with running(producer):
                await send_bodies(producer, "FlowT", bodies, mq=queue0("FlowT"))
                async with running(consumer):
                    await wait_until(lambda: got.count() >= 300, "300 messages", timeout=20)
            assert sorted(got.bodies) == sorted(bodies)
            # pulls stop once more than `threshold` are cached: at most one pull past it
            assert max(counts) <= threshold + batch, max(counts)
            assert max(counts) > batch  # a second pull did happen before the limit

    arun(main(), timeout=40)


# -- orderly ---------------------------------------------------------------------------------


def test_orderly_keeps_queue_order_through_suspends_and_holds_broker_locks(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            deliveries: dict[int, list[tuple[int, int]]] = defaultdict(list)
            suspended: set[tuple[int, int]] = set()
            done: set[tuple[int, int]] = set()

            async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
                (m,) = msgs
                key = (m.queue_id, m.queue_offset)
                deliveries[m.queue_id].append((m.queue_offset, m.reconsume_times))
                if m.queue_offset % 5 == 2 and key not in suspended:
                    suspended.add(key)
                    ctx.suspend_current_queue_time_millis = 20
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                done.add(key)
                return ConsumeOrderlyStatus.SUCCESS

            consumer = push(
                c.namesrv_addr, "G_ord", "OrdT", listener, consume_from_where=FIRST, orderly=True
            )
            per_queue = 15
            async with running(producer):
                mqs = [MessageQueue("OrdT", "broker-a", q) for q in (0, 1)]
                for mq in mqs:
                    await send_bodies(
                        producer, "OrdT", [f"q{mq.queue_id}-{i}" for i in range(per_queue)], mq=mq
                    )
                remoting = RemotingClient(name="other-client")
                api = MQClientAPI(remoting, [c.namesrv_addr])
                try:
                    async with running(consumer):
                        await wait_until(lambda: len(done) >= 2 * per_queue, "every message")
                        stolen = await api.lock_batch_mq(c.broker_addr, "G_ord", "other@1", mqs)
                        assert stolen == set(), "the consumer's broker locks were handed out"
                    # shutdown unlocks: now another client gets them
                    taken = await api.lock_batch_mq(c.broker_addr, "G_ord", "other@1", mqs)
                    assert taken == set(mqs)
                    await api.unlock_batch_mq(c.broker_addr, "G_ord", "other@1", mqs)
                finally:
                    await remoting.shutdown()
            for qid, seq in deliveries.items():
                offsets = [off for off, _ in seq]
                # first sightings come in queue order, without gaps
                firsts = list(dict.fromkeys(offsets))
                assert firsts == list(range(per_queue)), (qid, offsets)
                # a suspended message is the very next one delivered again
                for i, (off, times) in enumerate(seq):
                    if (qid, off) in suspended and times == 0:
                        assert seq[i + 1] == (off, 1), (qid, seq)
            assert len(suspended) == 2 * 3

    arun(main(), timeout=30)


# -- shutdown and rebalance ------------------------------------------------------------------


def test_shutdown_drains_running_listeners_and_commits_their_offsets(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            started: set[str] = set()
            finished: set[str] = set()
            entered = asyncio.Event()

            async def slow(msgs: list[MessageExt], ctx: Any) -> None:
                for m in msgs:
                    started.add(m.body.decode())
                entered.set()
                await asyncio.sleep(0.25)
                finished.update(m.body.decode() for m in msgs)

            bodies = [f"m{i}" for i in range(8)]
            consumer = push(
                c.namesrv_addr,
                "G_drain",
                "DrainT",
                slow,
                consume_from_where=FIRST,
                consume_thread_max=2,
                await_termination_seconds=10,
            )
            async with running(producer):
                await send_bodies(producer, "DrainT", bodies, mq=queue0("DrainT"))
                await consumer.start()
                try:
                    await asyncio.wait_for(entered.wait(), 10)
                    in_flight = set(started)
                finally:
                    await consumer.shutdown()
                assert in_flight and in_flight <= finished
                assert started == finished  # nothing was cut off mid-listener
                await send_bodies(producer, "DrainT", ["after"])
                again = Collector()
                async with running(
                    push(c.namesrv_addr, "G_drain", "DrainT", again, consume_from_where=FIRST)
                ):
                    await wait_until(lambda: "after" in again.bodies, "the new message")
                    await asyncio.sleep(0.3)
                assert sorted(again.bodies) == sorted({*bodies, "after"} - finished)

    arun(main(), timeout=30)


def test_new_member_makes_the_first_give_up_queues_at_once(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            got1, got2 = Collector(), Collector()
            # the periodic rebalance (20 s) is far beyond every wait below
            c1 = push(c.namesrv_addr, "G_join", "JoinT", got1, consume_from_where=FIRST)
            c2 = push(c.namesrv_addr, "G_join", "JoinT", got2, consume_from_where=FIRST)
            assert c1.rebalance_interval >= 20
            async with running(producer):
                await send_bodies(producer, "JoinT", ["warm"])
                async with running(c1):
                    await wait_until(lambda: len(owned(c1, "JoinT")) == 4, "c1 owns all")
                    async with running(c2):
                        await wait_until(
                            lambda: len(owned(c1, "JoinT")) == 2 and len(owned(c2, "JoinT")) == 2,
                            "queues split between the two members",
                            timeout=8,
                        )
                        assert owned(c1, "JoinT").isdisjoint(owned(c2, "JoinT"))
                        bodies = [f"m{i}" for i in range(20)]
                        await send_bodies(producer, "JoinT", bodies)
                        await wait_until(
                            lambda: set(bodies) <= {*got1.bodies, *got2.bodies}, "new messages"
                        )
                        assert {m.queue_id for m in got2.msgs if m.body != b"warm"} <= {
                            mq.queue_id for mq in owned(c2, "JoinT")
                        }

    arun(main(), timeout=30)
