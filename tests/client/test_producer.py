"""Producer against real servers: an in-process NameServer + Broker
(LocalCluster) on 127.0.0.1, a second broker on the same name server where
a test needs two, and FaultProxy for a black-holed broker. What a send
stored is read back over TCP with MQClientAPI (pull, view by offset)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

import rmqcore
from pyrmq.client.api import MQClientAPI
from pyrmq.common.errors import ClientError, RemotingError
from pyrmq.common.message import (
    SYSFLAG_COMPRESSED,
    Message,
    MessageQueue,
    decode_offset_msg_id,
)
from pyrmq.common.results import SendResult, SendStatus
from pyrmq.producer import Producer, SelectMessageQueueByHash
from pyrmq.remoting import RemotingClient
from pyrmq.testing import LocalCluster
from pyrmq.testing.proxy import FaultProxy
from tests._waiting import wait_until
from tests.client._producer_env import (
    HEX32,
    PROXY_IP,
    broker_b_behind_proxy,
    create_topic,
    env,
    java_string_hash,
    listen_addr,
    needs_proxy_ip,
    pull_all,
    second_broker,
    stored_at,
)

# -- send: results and what is stored --------------------------------------------------------


def test_send_ok_ids_and_stored_message(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            p, a = e.producer, e.cluster.broker_addr
            msg = Message(
                "ProdT",
                b"hello \x00 world",
                tags="TagA",
                keys=["order-1", "user-7"],
                properties={"color": "blue", "n": "42"},
                flag=7,
            )
            assert msg.unique_key is None
            r = await p.send(msg)
            assert r.send_status is SendStatus.SEND_OK and r.ok
            # msg_id is the UNIQ_KEY the producer set on the message
            assert msg.unique_key is not None and HEX32.match(msg.unique_key)
            assert r.msg_id == msg.unique_key
            assert r.message_queue.topic == "ProdT"
            assert r.message_queue.broker_name == "broker-a"
            assert r.queue_offset == 0
            # offset_msg_id names this broker and the record's CommitLog offset
            host, phys = stored_at(r)
            assert host == a

            for m in (
                await e.api.view_message(a, phys),
                *(await pull_all(e.api, a, r.message_queue, r.queue_offset))[:1],
            ):
                assert m.topic == "ProdT"
                assert m.body == b"hello \x00 world"
                assert m.tags == "TagA"
                assert m.keys == ["order-1", "user-7"]
                assert m.properties["color"] == "blue" and m.properties["n"] == "42"
                assert m.flag == 7
                assert m.msg_id == r.msg_id
                assert m.offset_msg_id == r.offset_msg_id
                assert m.commit_log_offset == phys
                assert m.queue_id == r.message_queue.queue_id
                assert m.queue_offset == r.queue_offset
                assert not m.sys_flag & SYSFLAG_COMPRESSED
            # a second send gets a new id and a later record
            r2 = await p.send(Message("ProdT", b"second"), mq=r.message_queue)
            assert r2.msg_id != r.msg_id and r2.queue_offset == r.queue_offset + 1
            assert stored_at(r2)[1] > phys

    arun(main())


def test_send_keeps_a_unique_key_the_caller_set(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            msg = Message("ProdT", b"x")
            first = await e.producer.send(msg)
            # sending the same Message object again keeps its UNIQ_KEY (a resend)
            again = await e.producer.send(msg)
            assert first.msg_id == again.msg_id == msg.unique_key
            assert first.offset_msg_id != again.offset_msg_id

    arun(main())


def test_send_async_awaited_and_with_callback(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            p, a = e.producer, e.cluster.broker_addr
            # awaited
            msg = Message("AsyncT", b"awaited", tags="T1")
            r = await p.send_async(msg)
            assert r.ok and r.msg_id == msg.unique_key
            assert (await e.api.view_message(a, stored_at(r)[1])).body == b"awaited"

            # callback, success path: called once with (result, None)
            calls: list[tuple[SendResult | None, BaseException | None]] = []
            done = asyncio.Event()

            def cb(result: SendResult | None, error: BaseException | None) -> None:
                calls.append((result, error))
                done.set()

            fut = p.send_async(Message("AsyncT", b"called back"), cb)
            await asyncio.wait_for(done.wait(), 10)
            assert len(calls) == 1
            result, error = calls[0]
            assert error is None and result is not None and result.ok
            assert fut.done() and fut.result() == result
            assert (await e.api.view_message(a, stored_at(result)[1])).body == b"called back"

            # a batch through send_async
            batch = [Message("AsyncT", f"b{i}".encode()) for i in range(3)]
            rb = await p.send_async(batch)
            assert rb.msg_id == ",".join(m.unique_key or "" for m in batch)

            # many in flight at once, all answered
            futs = [p.send_async(Message("AsyncT", f"m{i}".encode())) for i in range(50)]
            results = await asyncio.gather(*futs)
            assert all(x.ok for x in results)
            assert len({x.msg_id for x in results}) == 50

    arun(main())


def test_shutdown_waits_for_async_sends_in_flight(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            p = e.producer
            await create_topic(e.api, e.cluster.broker_addr, "FlightT", 2)
            assert (await p.send(Message("FlightT", b"warm"))).ok  # route, connection
            calls: list[SendResult | None] = []
            futs = [
                p.send_async(Message("FlightT", f"f{i}".encode()), lambda r, err: calls.append(r))
                for i in range(40)
            ]
            await p.shutdown()
            assert all(f.done() and f.result().ok for f in futs)
            assert len(calls) == 40 and all(r is not None and r.ok for r in calls)
            stored = []
            for q in range(2):
                stored += await pull_all(
                    e.api, e.cluster.broker_addr, MessageQueue("FlightT", "broker-a", q)
                )
            assert sorted(m.body for m in stored if m.body != b"warm") == sorted(
                f"f{i}".encode() for i in range(40)
            )

    arun(main())


def test_send_async_callback_error_path(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path, auto_create_topic_enable=False) as e:
            calls: list[tuple[SendResult | None, BaseException | None]] = []
            done = asyncio.Event()

            def cb(result: SendResult | None, error: BaseException | None) -> None:
                calls.append((result, error))
                done.set()

            fut = e.producer.send_async(Message("NoSuchTopicT", b"x"), cb)
            await asyncio.wait_for(done.wait(), 10)
            assert len(calls) == 1
            result, error = calls[0]
            assert result is None
            assert isinstance(error, ClientError)
            assert "NoSuchTopicT" in str(error)
            # the returned future carries the same error
            with pytest.raises(ClientError, match="NoSuchTopicT"):
                await fut
            # a callback that raises is logged, not propagated
            fut2 = e.producer.send_async(Message("NoSuchTopicT", b"x"), lambda r, err: 1 / 0)
            with pytest.raises(ClientError):
                await fut2

    arun(main())


def test_send_oneway_arrives(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            a = e.cluster.broker_addr
            await create_topic(e.api, a, "OnewayT", 2)
            for i in range(4):
                assert await e.producer.send_oneway(Message("OnewayT", f"ow{i}".encode())) is None
            mqs = [MessageQueue("OnewayT", "broker-a", q) for q in range(2)]

            async def bodies() -> list[bytes]:
                got = []
                for mq in mqs:
                    got.extend(m.body for m in await pull_all(e.api, a, mq))
                return sorted(got)

            async def arrived() -> bool:
                return len(await bodies()) == 4

            await wait_until(arrived, "the four oneway sends stored", stall_after=10)
            assert await bodies() == [b"ow0", b"ow1", b"ow2", b"ow3"]

    arun(main())


# -- batches -------------------------------------------------------------------------------


def test_send_batch_one_request_consecutive_offsets(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            p, a = e.producer, e.cluster.broker_addr
            await create_topic(e.api, a, "BatchT", 4)
            # move the queue to offset 1 first, so "consecutive" is not just 0..n
            first = await p.send(
                Message("BatchT", b"before"), mq=MessageQueue("BatchT", "broker-a", 2)
            )
            assert first.queue_offset == 0
            msgs = [
                Message(
                    "BatchT",
                    f"body-{i}".encode(),
                    tags=f"T{i}",
                    keys=[f"k{i}"],
                    properties={"i": str(i)},
                )
                for i in range(5)
            ]
            r = await p.send_batch(msgs, mq=MessageQueue("BatchT", "broker-a", 2))
            assert r.ok and r.queue_offset == 1
            ids = [m.unique_key for m in msgs]
            assert all(i is not None and HEX32.match(i) for i in ids)
            assert len(set(ids)) == 5
            assert r.msg_id == ",".join(ids)  # type: ignore[arg-type]
            offset_ids = r.offset_msg_id.split(",")
            assert len(offset_ids) == 5
            phys = [decode_offset_msg_id(x) for x in offset_ids]
            assert {h for h, _ in phys} == {a}
            assert [o for _, o in phys] == sorted(o for _, o in phys)

            stored = await pull_all(e.api, a, r.message_queue, r.queue_offset)
            assert [m.queue_offset for m in stored] == [1, 2, 3, 4, 5]
            assert [m.body for m in stored] == [f"body-{i}".encode() for i in range(5)]
            assert [m.tags for m in stored] == [f"T{i}" for i in range(5)]
            assert [m.keys for m in stored] == [[f"k{i}"] for i in range(5)]
            assert [m.properties["i"] for m in stored] == [str(i) for i in range(5)]
            assert [m.msg_id for m in stored] == ids
            assert [m.commit_log_offset for m in stored] == [o for _, o in phys]
            # one request: one born timestamp for all five
            assert len({m.born_timestamp for m in stored}) == 1

            # without mq: one queue (round robin picks one per request), consecutive
            msgs2 = [Message("BatchT", f"rr-{i}".encode()) for i in range(4)]
            r2 = await p.send_batch(msgs2)
            stored2 = await pull_all(e.api, a, r2.message_queue, r2.queue_offset)
            assert [m.body for m in stored2] == [f"rr-{i}".encode() for i in range(4)]
            assert [m.queue_offset for m in stored2] == [r2.queue_offset + i for i in range(4)]
            others = [q for q in range(4) if q != r2.message_queue.queue_id and q != 2]
            for q in others:
                assert await pull_all(e.api, a, MessageQueue("BatchT", "broker-a", q)) == []

    arun(main())


def test_send_batch_validation(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path, producer_kw={"max_message_size": 1024}) as e:
            p = e.producer
            cases: list[tuple[list[Message], str]] = [
                ([], "empty"),
                ([Message("BT1", b"a"), Message("BT2", b"b")], "one topic"),
                ([Message("BT1", b"a"), Message("BT1", b"b", delay_level=2)], "delay"),
                ([Message("%RETRY%G", b"a")], "RETRY"),
                ([Message("BT1", b"")], "empty"),
                ([Message("TBW102", b"a")], "TBW102"),
                ([Message("BT1", b"x" * 600), Message("BT1", b"y" * 600)], "max_message_size"),
            ]
            for msgs, words in cases:
                with pytest.raises(ClientError, match=words):
                    await p.send_batch(msgs)
                # send_async validates before it starts: the error is raised at once
                with pytest.raises(ClientError, match=words):
                    p.send_async(msgs)
            # a batch at the limit still goes
            r = await p.send_batch([Message("BT1", b"x" * 300), Message("BT1", b"y" * 300)])
            assert r.ok

    arun(main())


# -- queue choice ------------------------------------------------------------------------------


def test_send_to_explicit_queue(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            p, a = e.producer, e.cluster.broker_addr
            await create_topic(e.api, a, "MqT", 3)
            mqs = await p.fetch_publish_message_queues("MqT")
            assert mqs == [MessageQueue("MqT", "broker-a", q) for q in range(3)]
            for round_ in range(2):
                for mq in reversed(mqs):
                    r = await p.send(Message("MqT", f"{mq.queue_id}-{round_}".encode()), mq=mq)
                    assert r.message_queue == mq and r.queue_offset == round_
            for mq in mqs:
                got = [m.body for m in await pull_all(e.api, a, mq)]
                assert got == [f"{mq.queue_id}-0".encode(), f"{mq.queue_id}-1".encode()]
            with pytest.raises(ClientError, match="not a queue of topic"):
                await p.send(Message("MqT", b"x"), mq=MessageQueue("OtherT", "broker-a", 0))

    arun(main())


def test_send_to_explicit_queue_of_a_topic_without_route(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            # a queue the caller names, of a topic nobody created: auto-created
            mq = MessageQueue("FreshT", "broker-a", 1)
            r = await e.producer.send(Message("FreshT", b"first"), mq=mq)
            assert r.ok and r.message_queue == mq and r.queue_offset == 0
            stored = await pull_all(e.api, e.cluster.broker_addr, mq)
            assert [m.body for m in stored] == [b"first"]
        async with env(tmp_path / "off", auto_create_topic_enable=False) as e:
            with pytest.raises(ClientError, match="FreshT"):
                await e.producer.send(Message("FreshT", b"x"), mq=mq)

    arun(main())


def test_select_by_hash_matches_java(arun, tmp_path):
    keys = [f"order-{i}" for i in range(24)] + ["", "é", "日本語", "😀", "polygenelubricants"]
    # String.hashCode as Java computes it, and a few values known from Java
    assert rmqcore.java_hash("hello") == 99162322
    assert rmqcore.java_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    for k in keys:
        assert rmqcore.java_hash(k) == java_string_hash(k), k

    async def main() -> None:
        async with env(tmp_path) as e:
            p, a = e.producer, e.cluster.broker_addr
            await create_topic(e.api, a, "HashT", 4)
            sel = SelectMessageQueueByHash()
            seen: dict[str, set[int]] = {k: set() for k in keys}
            for round_ in range(3):
                for k in keys:
                    r = await p.send(
                        Message("HashT", f"{k}/{round_}".encode()), selector=sel, arg=k
                    )
                    seen[k].add(r.message_queue.queue_id)
            for k in keys:
                # Java: value = key.hashCode() % size; if (value < 0) value = abs(value)
                h = java_string_hash(k)
                java_queue = abs(h - int(h / 4) * 4)
                assert seen[k] == {java_queue}, k
            assert len({q for s in seen.values() for q in s}) == 4
            # per key, the messages are in send order in their queue
            for q in range(4):
                stored = await pull_all(e.api, a, MessageQueue("HashT", "broker-a", q))
                by_key: dict[str, list[int]] = {}
                for m in stored:
                    k, _, rnd = m.body.decode().rpartition("/")
                    by_key.setdefault(k, []).append(int(rnd))
                for k, rounds in by_key.items():
                    assert rounds == [0, 1, 2], k
            # ints hash to themselves
            r = await p.send(Message("HashT", b"int"), selector=sel, arg=7)
            assert r.message_queue.queue_id == 3

    arun(main())


def test_round_robin_spreads_over_all_write_queues(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            p, a = e.producer, e.cluster.broker_addr
            await create_topic(e.api, a, "RrT", 4)
            counts: dict[int, int] = {}
            for i in range(12):
                r = await p.send(Message("RrT", f"{i}".encode()))
                counts[r.message_queue.queue_id] = counts.get(r.message_queue.queue_id, 0) + 1
            assert counts == {0: 3, 1: 3, 2: 3, 3: 3}

    arun(main())


# -- errors -----------------------------------------------------------------------------------


def test_send_rejects_bad_messages(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path, producer_kw={"max_message_size": 1000}) as e:
            p = e.producer
            cases = [
                (Message("bad topic", b"x"), r"topic 'bad topic' is not valid.*letters, digits"),
                (Message("x" * 200, b"x"), "is not valid"),
                (Message("", b"x"), "is not valid"),
                (Message("TBW102", b"x"), "reserved"),
                (Message("GoodT", b""), "body is empty"),
                (Message("GoodT", b"x" * 1001), "1001 bytes; max_message_size is 1000"),
            ]
            for msg, words in cases:
                with pytest.raises(ClientError, match=words):
                    await p.send(msg)
                with pytest.raises(ClientError, match=words):
                    p.send_async(msg)
                with pytest.raises(ClientError, match=words):
                    await p.send_oneway(msg)
            # at the limit it goes
            assert (await p.send(Message("GoodT", b"x" * 1000))).ok
            with pytest.raises(TypeError):
                await p.send("not a message")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="reserved"):
                Message("GoodT", b"x", properties={"UNIQ_KEY": "mine"})

    arun(main())


def test_send_oneway_in_a_tight_loop_is_held_to_the_brokers_pace(arun, tmp_path):
    """send_oneway never waits for an answer, but a caller that never yields
    must not buffer without bound: past the transport's high-water mark the
    send waits until the broker has read. (Before, 20 MB of frames piled up
    in the client and went out in one write when the loop finally turned,
    stalling it for seconds.) Every message is stored."""
    n, size = 20_000, 1024

    async def main() -> None:
        async with env(tmp_path) as e:
            a = e.cluster.broker_addr
            await create_topic(e.api, a, "OnewayTightT", 4)
            p = e.producer
            await p.send(Message("OnewayTightT", b"warm"))  # route and connection
            conn = p.client.remoting.open_connection(a)
            assert conn is not None and conn.transport is not None
            body = b"x" * size
            unsent_max = 0
            for _ in range(n):
                await p.send_oneway(Message("OnewayTightT", body))
                unsent_max = max(unsent_max, conn.unsent_bytes)
            assert unsent_max < 4 << 20, f"{unsent_max} bytes unsent at once"
            mqs = [MessageQueue("OnewayTightT", "broker-a", q) for q in range(4)]

            async def stored() -> int:
                return sum([await e.api.get_max_offset(a, mq) for mq in mqs])

            async def all_stored() -> bool:
                return await stored() == n + 1

            await wait_until(all_stored, "every oneway stored", progress=stored)
            bodies = [m.body for mq in mqs for m in await pull_all(e.api, a, mq)]
            assert sorted(bodies) == sorted([b"warm"] + [body] * n)

    arun(main(), timeout=120)


def test_send_before_start_and_after_shutdown(arun, tmp_path):
    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store")) as c:
            p = Producer("PG-life", c.namesrv_addr)
            msg = Message("LifeT", b"x")
            with pytest.raises(ClientError, match="start"):
                await p.send(msg)
            with pytest.raises(ClientError, match="start"):
                p.send_async(msg)
            with pytest.raises(ClientError, match="start"):
                await p.send_oneway(msg)
            with pytest.raises(ClientError, match="start"):
                await p.send_batch([msg])
            with pytest.raises(ClientError, match="start"):
                await p.fetch_publish_message_queues("LifeT")
            await p.start()
            assert (await p.send(msg)).ok
            await p.shutdown()
            with pytest.raises(ClientError, match="shutdown"):
                await p.send(Message("LifeT", b"y"))
            with pytest.raises(ClientError, match="create a new one"):
                await p.start()

    arun(main())


def test_topic_not_exist_without_auto_create(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path, auto_create_topic_enable=False) as e:
            with pytest.raises(ClientError, match="NoSuchT") as ei:
                await e.producer.send(Message("NoSuchT", b"x"))
            assert "autoCreateTopicEnable" in str(ei.value)
            with pytest.raises(ClientError, match="NoSuchT"):
                await e.producer.send_batch([Message("NoSuchT", b"x")])

    arun(main())


# -- delay, routes ------------------------------------------------------------------------------


def test_delay_level_delivered_after_the_delay(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path, message_delay_level="1s 2s 3s") as e:
            p, a = e.producer, e.cluster.broker_addr
            await create_topic(e.api, a, "DelayT", 1)
            mq = MessageQueue("DelayT", "broker-a", 0)
            msg = Message("DelayT", b"later", tags="D", delay_level=2)
            t0 = time.monotonic()
            r = await p.send(msg, mq=mq)
            assert r.ok and r.msg_id == msg.unique_key
            assert await pull_all(e.api, a, mq) == []  # not yet

            async def delivered() -> bool:
                return bool(await pull_all(e.api, a, mq))

            await wait_until(delivered, "the delayed message delivered", stall_after=15, step=0.1)
            elapsed = time.monotonic() - t0
            (m,) = await pull_all(e.api, a, mq)
            assert elapsed >= 1.5  # level 2 is 2 s (lower bound only, with slack)
            assert m.body == b"later" and m.tags == "D" and m.msg_id == msg.unique_key
            assert m.topic == "DelayT" and m.queue_id == 0
            assert "DELAY" not in m.properties and "REAL_TOPIC" not in m.properties
            assert m.store_timestamp - m.born_timestamp >= 1900

    arun(main())


@pytest.mark.parametrize("setting", ["poll_name_server_interval", "heartbeat_broker_interval"])
@pytest.mark.parametrize("seconds", [0, -1.0, float("nan")])
def test_intervals_that_would_spin_the_loop_are_refused_with_what_to_fix(setting, seconds):
    from pyrmq import PullConsumer, PushConsumer

    for make in (Producer, PushConsumer, PullConsumer):
        with pytest.raises(ValueError, match=f"{setting} must be > 0 seconds"):
            make("G_iv", "127.0.0.1:9876", **{setting: seconds})


def test_route_refresh_finds_topic_created_later(arun, tmp_path):
    async def main() -> None:
        async with env(
            tmp_path,
            producer_kw={"poll_name_server_interval": 0.2},
            auto_create_topic_enable=False,
        ) as e:
            p, a = e.producer, e.cluster.broker_addr
            with pytest.raises(ClientError, match="LateT"):
                await p.send(Message("LateT", b"too early"))
            await create_topic(e.api, a, "LateT", 2)
            r = await p.send(Message("LateT", b"now"))
            assert r.ok and r.message_queue.topic == "LateT"
            # a topic the producer uses grows: the periodic refresh sees it
            await create_topic(e.api, a, "LateT", 5)

            async def grown() -> bool:
                return len(await p.fetch_publish_message_queues("LateT")) == 5

            await wait_until(grown, "the route's five queues", stall_after=10)
            got = {(await p.send(Message("LateT", b"q"))).message_queue.queue_id for _ in range(5)}
            assert got == set(range(5))

    arun(main())


# -- several brokers, failures, deadlines ---------------------------------------------------------


def test_send_moves_to_the_live_broker_when_one_is_stopped(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            p = e.producer
            b = await second_broker(e.cluster, str(tmp_path / "store-b"), broker_name="broker-b")
            try:
                for c in (e.cluster, b):
                    await create_topic(e.api, c.broker_addr, "TwoT", 1)
                route = await e.api.get_topic_route("TwoT")
                assert route is not None and len(route.broker_datas) == 2
                used = {
                    (await p.send(Message("TwoT", b"x"))).message_queue.broker_name
                    for _ in range(4)
                }
                assert used == {"broker-a", "broker-b"}
                await b.stop_broker()
                for i in range(6):
                    r = await p.send(Message("TwoT", f"after-{i}".encode()))
                    assert r.ok and r.message_queue.broker_name == "broker-a"
            finally:
                await b.stop_broker()

    arun(main())


def test_restarted_broker_gets_its_turn_again(arun, tmp_path):
    """Round robin over two brokers keeps alternating when the connection
    to one was closed (the broker restarted): the producer reconnects on the
    send, it does not skip the broker until the next heartbeat."""

    async def main() -> None:
        async with env(tmp_path) as e:
            p = e.producer
            b = await second_broker(e.cluster, str(tmp_path / "store-b"), broker_name="broker-b")
            try:
                for c in (e.cluster, b):
                    await create_topic(e.api, c.broker_addr, "RestartT", 1)
                before = [(await p.send(Message("RestartT", b"x"))).message_queue for _ in range(4)]
                assert {q.broker_name for q in before} == {"broker-a", "broker-b"}
                await b.stop_broker()
                await b.start_broker()  # same store, same port
                # the producer's connection to broker-b is closed by now
                assert b.broker is not None

                async def closed() -> bool:
                    return p.client.remoting.open_connection(b.broker_addr) is None

                await wait_until(closed, "the old connection closed", stall_after=5)
                names = [
                    (await p.send(Message("RestartT", f"r{i}".encode()))).message_queue.broker_name
                    for i in range(6)
                ]
                assert names.count("broker-b") == 3, names
            finally:
                await b.stop_broker()

    arun(main())


@needs_proxy_ip
def test_send_retries_on_another_broker_when_one_is_down(arun, tmp_path, caplog):
    """broker-b dies while the name server still lists it (no unregister: its
    host is gone): every send that picks it first is retried on broker-a."""

    async def main() -> None:
        async with env(tmp_path, producer_kw={"poll_name_server_interval": 3600}) as e:
            p = e.producer
            async with broker_b_behind_proxy(e, tmp_path, "DownT") as proxy:
                proxy.refuse = True
                proxy.reset_all()
                caplog.set_level(logging.INFO, logger="pyrmq.producer")
                results = []
                for i in range(6):
                    results.append(await p.send(Message("DownT", f"after-{i}".encode())))
                assert all(r.ok and r.message_queue.broker_name == "broker-a" for r in results)
                retried = [
                    rec
                    for rec in caplog.records
                    if rec.name == "pyrmq.producer"
                    and "failed (attempt 1 of 3)" in rec.getMessage()
                ]
                assert retried, "no send was retried: broker-b was never picked"
                assert all("broker-b" in rec.getMessage() for rec in retried)
                # the messages are all stored once, on broker-a
                stored = await pull_all(
                    e.api, e.cluster.broker_addr, MessageQueue("DownT", "broker-a", 0)
                )
                bodies = [m.body for m in stored]
                for i in range(6):
                    assert bodies.count(f"after-{i}".encode()) == 1

    arun(main())


@needs_proxy_ip
def test_send_fails_on_a_silent_broker_within_its_timeout(arun, tmp_path):
    """The only broker is behind a black hole (connections accepted, nothing
    answered): a send gives up with RemotingError once its timeout is spent,
    route lookup, heartbeat and retries included."""

    async def main() -> None:
        store = str(tmp_path / "store")
        async with LocalCluster(store, auto_create_topic_enable=False, broker_ip1=PROXY_IP) as c:
            assert c.broker is not None
            port = c.broker.port
            async with FaultProxy(
                "127.0.0.1", port, listen_host=PROXY_IP, listen_port=port
            ) as proxy:
                remoting = RemotingClient(name="test-reader")
                try:
                    await create_topic(
                        MQClientAPI(remoting, [c.namesrv_addr]), listen_addr(c), "SilentT", 1
                    )
                finally:
                    await remoting.shutdown()
                proxy.drop = True
                p = Producer("PG-silent", c.namesrv_addr, retry_times_when_send_failed=2)
                await p.start()
                try:
                    for timeout in (0.5, 1.0):
                        t0 = time.monotonic()
                        with pytest.raises(RemotingError):
                            async with asyncio.timeout(timeout + 2.0):
                                await p.send(Message("SilentT", b"x"), timeout=timeout)
                        assert time.monotonic() - t0 >= timeout * 0.9
                finally:
                    proxy.refuse = True
                    proxy.reset_all()
                    await p.shutdown()

    arun(main())
