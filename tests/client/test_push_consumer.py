"""PushConsumer against a real NameServer + Broker (LocalCluster, TCP on
127.0.0.1): clustering and broadcasting delivery, tag filters, batches,
where a new group starts, committed offsets across
restarts, retries through %RETRY%<group> into %DLQ%<group>, flow control,
orderly consumption with broker locks, draining shutdown and the
NOTIFY_CONSUMER_IDS_CHANGED rebalance. How the listener itself is run:
test_push_listener.py.

Every wait is a bounded poll (`wait_until`); no test asserts that something
was fast except through those bounds, well above what the step needs."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from typing import Any

from pyrmq import (
    ConsumeConcurrentlyStatus,
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
from pyrmq.client.instance import FIRST_ROUTE_REFRESH
from pyrmq.common.errors import BrokerError, RemotingError
from pyrmq.remoting import RemotingClient

from ._push import (
    FIRST,
    LAST,
    RETRY_REBALANCE_INTERVAL,
    SHORT_DELAY_LEVELS,
    TIMESTAMP,
    Collector,
    cluster,
    owned,
    push,
    queue0,
    running,
    send_bodies,
    started_on,
    wait_routed,
    wait_until,
)

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


def test_a_producer_on_the_consumers_client_shares_its_one_connection(arun, tmp_path):
    """Producer(client_instance=consumer.client): one connection to the
    broker carries the sends, their acks, the pulls and their answers (as
    a RocketMQ Java client's one connection a broker); every message is
    delivered once, and the producer's shutdown leaves the consumer's
    client running."""

    async def main() -> None:
        async with cluster(tmp_path) as c:
            got = Collector()
            consumer = push(c.namesrv_addr, "G_one", "OneT", got, consume_from_where=FIRST)
            bodies = [f"o{i}" for i in range(40)]
            later = [f"l{i}" for i in range(10)]
            async with running(consumer):
                producer = Producer("pg_one", None, client_instance=consumer.client)
                async with running(producer):
                    results = [
                        await producer.send(Message("OneT", b.encode())) for b in bodies[:20]
                    ]
                    results += await asyncio.gather(
                        *(producer.send_async(Message("OneT", b.encode())) for b in bodies[20:])
                    )
                    assert all(r.ok for r in results), results
                    await wait_until(lambda: got.count() >= 40, "40 messages")
                    assert len(c.broker.server.connections) == 1, c.broker.server.connections
                other = Producer("pg_other", c.namesrv_addr)
                async with running(other):
                    await send_bodies(other, "OneT", later)
                    await wait_until(lambda: got.count() >= 50, "the 10 sent after")
                await asyncio.sleep(0.3)  # room for duplicates to show up
            assert Counter(got.bodies) == Counter(bodies + later)

    arun(main(), timeout=60)


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

            def watched(fut: Any, addr: str, puller: Any, sub: Any, resp: Any, exc: Any) -> None:
                pulled(fut, addr, puller, sub, resp, exc)
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


def test_a_topic_created_after_the_consumer_started_is_consumed_without_the_periodic_refresh(
    arun, tmp_path
):
    """A consumer subscribed to a topic nothing has created yet asks for its
    route again, backing off to once a second (MISSING_ROUTE_RETRY_MAX), not
    only at the refresh of every route (FIRST_ROUTE_REFRESH after start, then
    poll_name_server_interval) or at its periodic rebalance (rebalance_interval):
    both are far beyond the wait here."""

    async def main() -> None:
        async with cluster(tmp_path) as c:
            got = Collector()
            consumer = push(
                c.namesrv_addr,
                "G_late",
                "LateSubT",
                got,
                consume_from_where=FIRST,
                poll_name_server_interval=600,
                rebalance_interval=600,
            )
            producer = Producer("pg_late", c.namesrv_addr)
            async with running(consumer):
                # past the first refresh of every route
                await asyncio.sleep(FIRST_ROUTE_REFRESH + 0.5)
                async with running(producer):
                    r = await producer.send(Message("LateSubT", b"late"))  # auto-creates it
                    assert r.ok
                    await wait_until(lambda: got.count() >= 1, "the late topic's message", 30)
            assert got.bodies == ["late"]

    arun(main(), timeout=60)
