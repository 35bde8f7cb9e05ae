"""Producer auto-batching (pyrmq.producer.batching) against a real broker
(LocalCluster on 127.0.0.1): concurrent single sends leave as fewer
SEND_BATCH_MESSAGE requests, every caller's SendResult names its own
stored message, order per queue holds, a refused batch fails every caller
and nothing hangs, unbatchable sends take the single path, shutdown sends
what is still open. No timing is asserted: batching is proven by the
producer's counters and by what the broker stored."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from pyrmq.common.errors import BrokerError, ClientError
from pyrmq.common.message import SYSFLAG_COMPRESSED, Message, MessageExt, MessageQueue
from pyrmq.common.results import SendResult, SendStatus
from pyrmq.producer import Producer, SelectMessageQueueByHash
from pyrmq.producer.batching import MAX_COUNT
from pyrmq.testing import LocalCluster
from tests._waiting import wait_until
from tests.client._producer_env import (
    Env,
    broker_b_behind_proxy,
    create_topic,
    env,
    needs_proxy_ip,
    pull_all,
    stored_at,
)

QUEUES = 4


async def _topic(e: Env, topic: str, queues: int = QUEUES) -> None:
    """The topic on the broker, routed, and the producer warmed (route,
    heartbeat, connection) by one awaited send."""
    await create_topic(e.api, e.cluster.broker_addr, topic, queues)
    r = await e.producer.send(Message(topic, b"warm-up"))
    assert r.ok


async def _stored(e: Env, topic: str, queues: int = QUEUES) -> dict[tuple[int, int], MessageExt]:
    """Every message of topic by (queue id, queue offset)."""
    out = {}
    for q in range(queues):
        mq = MessageQueue(topic, "broker-a", q)
        for m in await pull_all(e.api, e.cluster.broker_addr, mq):
            out[(q, m.queue_offset)] = m
    return out


def _check_results_stored(
    results: list[SendResult], bodies: list[bytes], stored: dict[tuple[int, int], MessageExt]
) -> None:
    """Each result names the stored message with its caller's body: queue
    and offset, UNIQ_KEY (msg_id) and the broker's offset id."""
    seen = set()
    for r, body in zip(results, bodies, strict=True):
        assert r.send_status is SendStatus.SEND_OK
        where = (r.message_queue.queue_id, r.queue_offset)
        assert where not in seen, f"two results name {where}"
        seen.add(where)
        m = stored[where]
        assert m.body == body
        assert m.msg_id == r.msg_id
        assert m.properties["UNIQ_KEY"] == r.msg_id
        assert stored_at(r)[1] == m.commit_log_offset


def test_concurrent_sends_leave_as_few_batches_each_with_its_own_result(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            p = e.producer
            assert p.auto_batch
            await _topic(e, "AbT")
            before = p.auto_batch_stats
            bodies = [f"body-{i}".encode() for i in range(300)]
            results = await asyncio.gather(*(p.send(Message("AbT", b)) for b in bodies))
            after = p.auto_batch_stats
            batches = after["batches"] - before["batches"]
            requests = batches + after["singles"] - before["singles"]
            assert after["batched"] - before["batched"] + requests - batches == 300
            assert batches >= 1 and requests < 300, after
            _check_results_stored(list(results), bodies, await _stored(e, "AbT"))
            # send_async too, with callbacks: each called once with its own result
            got: list[tuple[SendResult | None, BaseException | None]] = []
            futs = [
                p.send_async(Message("AbT", b), lambda r, x: got.append((r, x))) for b in bodies
            ]
            results = await asyncio.gather(*futs)
            assert len(got) == 300 and all(x is None for _, x in got)
            assert sorted(r.msg_id for r, _ in got if r) == sorted(r.msg_id for r in results)
            _check_results_stored(list(results), bodies, await _stored(e, "AbT"))
            assert p.auto_batch_stats["batches"] > after["batches"]

    arun(main())


def test_order_per_queue_is_kept(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path, producer_kw={"batch_max_bytes": 2000}) as e:
            p = e.producer
            await _topic(e, "AbOrderT")
            mq = MessageQueue("AbOrderT", "broker-a", 2)
            sel = SelectMessageQueueByHash()
            # a named queue, and a selector that picks queue of "k" for every message
            futs = [p.send_async(Message("AbOrderT", f"q{i}".encode()), mq=mq) for i in range(200)]
            results = await asyncio.gather(*futs)
            offsets = [r.queue_offset for r in results]
            assert offsets == list(range(offsets[0], offsets[0] + 200))
            assert {r.message_queue for r in results} == {mq}
            keyed = await asyncio.gather(
                *(
                    p.send(Message("AbOrderT", f"k{i}".encode()), selector=sel, arg="k")
                    for i in range(100)
                )
            )
            assert len({r.message_queue for r in keyed}) == 1
            stored = await pull_all(e.api, e.cluster.broker_addr, keyed[0].message_queue)
            ks = [m.body for m in stored if m.body.startswith(b"k")]
            assert ks == [f"k{i}".encode() for i in range(100)]
            qs = [m.body for m in await pull_all(e.api, e.cluster.broker_addr, mq)]
            assert [b for b in qs if b.startswith(b"q")] == [f"q{i}".encode() for i in range(200)]
            assert p.auto_batch_stats["batches"] >= 2

    arun(main())


def test_a_refused_batch_fails_every_caller_and_nothing_hangs(arun, tmp_path):
    async def main() -> None:
        # the broker takes requests of at most 4 KiB; the producer's batches
        # may reach 16 KiB: the broker refuses them (MESSAGE_ILLEGAL, not
        # retried), while a lone message of the same size goes through
        async with env(
            tmp_path, max_message_size=4096, producer_kw={"batch_max_bytes": 16384}
        ) as e:
            p = e.producer
            await _topic(e, "AbRefusedT")
            before = p.auto_batch_stats["batches"]
            futs = [p.send_async(Message("AbRefusedT", b"x" * 200)) for _ in range(60)]
            done = await asyncio.gather(*futs, return_exceptions=True)
            assert p.auto_batch_stats["batches"] > before
            errors = [d for d in done if isinstance(d, BaseException)]
            assert errors and all(isinstance(x, BrokerError) for x in errors), done
            assert all(isinstance(d, (BrokerError, SendResult)) for d in done)
            assert p._inflight == 0
            # what was refused is not stored; what was answered is
            stored = await _stored(e, "AbRefusedT")
            assert len(stored) == 1 + sum(isinstance(d, SendResult) for d in done)
            # awaited sends too: each caller raises, none waits forever
            outcome = await asyncio.gather(
                *(p.send(Message("AbRefusedT", b"y" * 200)) for _ in range(60)),
                return_exceptions=True,
            )
            assert any(isinstance(x, BrokerError) for x in outcome)
            # alone, the same message is fine
            assert (await p.send(Message("AbRefusedT", b"z" * 200))).ok

    arun(main())


def test_unbatchable_sends_take_the_single_path_beside_batched_ones(arun, tmp_path):
    async def main() -> None:
        async with env(tmp_path) as e:
            p = e.producer
            await _topic(e, "AbMixT")
            await _topic(e, "AbMixOtherT")
            mq = MessageQueue("AbMixT", "broker-a", 1)
            plain = [Message("AbMixT", f"p{i}".encode()) for i in range(50)]
            delayed = Message("AbMixT", b"later", delay_level=1)
            big = Message("AbMixT", b"B" * 5000)  # compressed alone
            other = [Message("AbMixOtherT", f"o{i}".encode()) for i in range(20)]
            no_wait = Message("AbMixT", b"no-wait", wait_store_msg_ok=False)
            before = p.auto_batch_stats
            futs = [p.send_async(m) for m in plain[:25]]
            futs.append(p.send_async(delayed))
            futs.append(p.send_async(big))
            futs += [p.send_async(m) for m in other]
            futs.append(p.send_async(no_wait))
            futs.append(p.send_async(Message("AbMixT", b"to-q1"), mq=mq))
            futs.append(p.send_async([Message("AbMixT", b"b1"), Message("AbMixT", b"b2")]))
            await p.send_oneway(Message("AbMixT", b"oneway"))
            futs += [p.send_async(m) for m in plain[25:]]
            results = await asyncio.gather(*futs)
            assert all(r.ok for r in results)
            after = p.auto_batch_stats
            # the plain messages of each topic went batched (and only they did)
            assert after["batches"] - before["batches"] >= 2
            assert after["batched"] - before["batched"] <= 50 + 20 + 1
            stored = await _stored(e, "AbMixT")
            bodies = sorted(m.body for m in stored.values())
            want = [m.body for m in plain] + [b"B" * 5000, b"no-wait", b"to-q1", b"b1", b"b2"]
            want += [b"warm-up"]
            # the delayed message waits in SCHEDULE_TOPIC_XXXX; oneway arrives when it does
            await wait_until(
                lambda: _has(e, "AbMixT", b"oneway"), "the oneway message stored", stall_after=20
            )
            assert [b for b in bodies if b != b"oneway"] == sorted(want)
            by_body = {m.body: m for m in stored.values()}
            assert by_body[b"B" * 5000].sys_flag & SYSFLAG_COMPRESSED
            assert b"later" not in by_body
            assert results[25].message_queue.topic == "AbMixT"  # the delayed one's answer
            for r, m in zip(results[:25], plain[:25], strict=True):
                assert by_body[m.body].msg_id == r.msg_id
            o = await _stored(e, "AbMixOtherT")
            assert sorted(m.body for m in o.values()) == sorted(
                [b"warm-up", *(m.body for m in other)]
            )

    arun(main())


async def _has(e: Env, topic: str, body: bytes) -> bool:
    return any(m.body == body for m in (await _stored(e, topic)).values())


def test_shutdown_sends_the_open_batches(arun, tmp_path):
    async def main() -> None:
        # small batches and a long delay: messages that arrive while a batch
        # is in flight wait in an open batch, and shutdown must send them
        kw = {"batch_max_bytes": 600, "batch_max_delay_ms": 60_000}
        async with env(tmp_path, producer_kw=kw) as e:
            p = e.producer
            await _topic(e, "AbShutT")
            mq = MessageQueue("AbShutT", "broker-a", 0)
            futs = [
                p.send_async(Message("AbShutT", f"s{i}".encode() * 20), mq=mq) for i in range(7)
            ]
            assert p.accumulator is not None and p.accumulator.pending > 0
            await p.shutdown()
            assert p.accumulator.pending == 0
            results = [f.result() for f in futs]  # every future resolved
            assert all(r.ok for r in results)
            got = await pull_all(e.api, e.cluster.broker_addr, mq)
            assert [m.body for m in got if m.body != b"warm-up"] == [
                f"s{i}".encode() * 20 for i in range(7)
            ]

    arun(main())


def test_randomized_mixes_store_what_each_result_names(arun, tmp_path):
    """A property over seeded random workloads: any mix of sizes, queues
    (round robin, named, selected), awaited and async sends, concurrency
    and batch limits gives each caller the result of its own message."""

    async def main() -> None:
        for seed in range(4):
            rnd = random.Random(seed)
            kw = {
                "batch_max_bytes": rnd.choice([300, 2000, 32768]),
                "batch_max_delay_ms": rnd.choice([0, 1, 10]),
            }
            async with env(tmp_path / f"s{seed}", producer_kw=kw) as e:
                p = e.producer
                topic = f"AbRandT{seed}"
                await _topic(e, topic)
                sel = SelectMessageQueueByHash()
                coros = []
                bodies = []
                for i in range(rnd.randrange(1, 400)):
                    body = f"{seed}-{i}-".encode() + b"x" * rnd.choice([1, 50, 250, 5000])
                    bodies.append(body)
                    m = Message(topic, body, keys=[f"k{i}"] if rnd.random() < 0.3 else None)
                    how = rnd.random()
                    if how < 0.2:
                        coros.append(p.send(m, mq=MessageQueue(topic, "broker-a", i % QUEUES)))
                    elif how < 0.4:
                        coros.append(p.send(m, selector=sel, arg=i % 7))
                    elif how < 0.7:
                        coros.append(p.send(m))
                    else:
                        coros.append(p.send_async(m))
                results = await asyncio.gather(*coros)
                _check_results_stored(list(results), bodies, await _stored(e, topic))

    arun(main(), timeout=240)


def test_bad_batch_settings_are_refused_with_what_to_fix():
    with pytest.raises(ValueError, match="batch_max_bytes must be > 0"):
        Producer("PG", "127.0.0.1:9876", auto_batch=True, batch_max_bytes=0)
    with pytest.raises(ValueError, match="batch_max_delay_ms must be >= 0"):
        Producer("PG", "127.0.0.1:9876", batch_max_delay_ms=-1)
    with pytest.raises(ValueError, match="must not exceed max_message_size"):
        Producer("PG", "127.0.0.1:9876", max_message_size=1000, batch_max_bytes=2000)
    # off: no accumulator, zero counters; the settings are not looked at
    p = Producer("PG", "127.0.0.1:9876", auto_batch=False, batch_max_bytes=0)
    assert not p.auto_batch and p.auto_batch_stats == {"batches": 0, "batched": 0, "singles": 0}
    assert MAX_COUNT >= 64


def test_each_batched_send_is_traced_with_its_own_result(arun, tmp_path):
    """Message trace sees every auto-batched send as one Pub record with its
    own msg id, as it sees sends without auto_batch (explicit batches stay
    untraced, as before)."""
    from pyrmq.admin import AdminClient

    async def main() -> None:
        async with (
            LocalCluster(str(tmp_path / "store"), trace_topic_enable=True) as c,
            Producer("PG-abtrace", c.namesrv_addr, enable_msg_trace=True) as p,
        ):
            assert (await p.send(Message("AbTraceT", b"warm-up"))).ok
            before = p.auto_batch_stats["batches"]
            results = await asyncio.gather(
                *(p.send(Message("AbTraceT", f"t{i}".encode())) for i in range(60))
            )
            assert p.auto_batch_stats["batches"] > before
            assert p.tracer is not None
            async with AdminClient(c.namesrv_addr) as admin:
                for r in (results[0], results[30], results[59]):

                    async def traced(msg_id: str = r.msg_id) -> bool:
                        return bool(await admin.query_msg_trace(msg_id))

                    await wait_until(traced, f"the trace of {r.msg_id}", stall_after=20)
                    (pub,) = await admin.query_msg_trace(r.msg_id)
                    assert pub.type == "Pub" and pub.msg_id == r.msg_id
                    assert pub.offset_msg_id == r.offset_msg_id

    arun(main(), timeout=90)


@needs_proxy_ip
def test_a_batch_whose_broker_is_down_is_retried_on_another(arun, tmp_path, caplog):
    """broker-b's host goes away while the name server still lists it:
    batches that pick it are sent again, whole, to broker-a (the send's
    usual retry), each message stored once and each caller told where."""

    async def main() -> None:
        kw = {"poll_name_server_interval": 3600, "batch_max_bytes": 2000}
        async with env(tmp_path, producer_kw=kw) as e:
            p = e.producer
            async with broker_b_behind_proxy(e, tmp_path, "AbDownT") as proxy:
                proxy.refuse = True
                proxy.reset_all()
                caplog.set_level(logging.INFO, logger="pyrmq.producer")
                before = p.auto_batch_stats["batches"]
                bodies = [f"down-{i}".encode() for i in range(200)]
                results = await asyncio.gather(
                    *(p.send_async(Message("AbDownT", body)) for body in bodies)
                )
                assert p.auto_batch_stats["batches"] - before >= 4
                retried = [
                    rec.getMessage()
                    for rec in caplog.records
                    if rec.name == "pyrmq.producer"
                    and "failed (attempt 1 of 3)" in rec.getMessage()
                ]
                assert retried and all("broker-b" in m for m in retried), retried
                assert all(r.ok and r.message_queue.broker_name == "broker-a" for r in results)
                stored = await pull_all(
                    e.api, e.cluster.broker_addr, MessageQueue("AbDownT", "broker-a", 0)
                )
                by_offset = {m.queue_offset: m for m in stored}
                got = [m.body for m in stored]
                for r, body in zip(results, bodies, strict=True):
                    assert got.count(body) == 1
                    assert by_offset[r.queue_offset].body == body
                    assert by_offset[r.queue_offset].msg_id == r.msg_id

    arun(main())


def test_a_message_the_encoder_refuses_fails_only_its_own_send(arun, tmp_path):
    """A property holding a separator byte (0x01, 0x02) cannot be encoded:
    the batch it joined is sent message by message, and only its caller
    hears why, as a ClientError; an awaited send of it alone raises the
    same at once."""

    async def main() -> None:
        async with env(tmp_path) as e:
            p = e.producer
            await _topic(e, "AbBadPropT")
            bad = Message("AbBadPropT", b"bad", properties={"k\x01": "v"})
            good = [Message("AbBadPropT", f"g{i}".encode()) for i in range(20)]
            # the first send leaves alone; the rest wait for its answer in one batch
            futs = [p.send_async(m) for m in good[:10]]
            futs.append(p.send_async(bad))
            futs += [p.send_async(m) for m in good[10:]]
            done = await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), 60)
            assert isinstance(done[10], ClientError), done[10]
            assert "separator" in str(done[10])
            results = done[:10] + done[11:]
            assert all(isinstance(r, SendResult) and r.ok for r in results), results
            stored = await _stored(e, "AbBadPropT")
            assert sorted(m.body for m in stored.values()) == sorted(
                [b"warm-up", *(m.body for m in good)]
            )
            assert p._inflight == 0
            with pytest.raises(ClientError, match="separator"):
                await p.send(Message("AbBadPropT", b"bad", properties={"k": "v\x02"}))

    arun(main())
