"""Message trace: producers and push consumers with enable_msg_trace write
RocketMQ-format trace records (Pub, SubBefore, SubAfter) to the trace
topic, and `pyrmq admin queryMsgTraceById` shows a message's path. Real
NameServer + Broker (LocalCluster, traceTopicEnable) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from pyrmq.admin import AdminClient
from pyrmq.client.api import MQClientAPI
from pyrmq.common.message import SYSFLAG_COMPRESSED, Message, MessageExt, MessageQueue
from pyrmq.common.results import LocalTransactionState, SendResult, SendStatus
from pyrmq.common.trace import CONTENT_SPLITOR, FIELD_SPLITOR, TRACE_TOPIC, TraceRecord, decode
from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from pyrmq.producer import Producer, TransactionProducer
from pyrmq.producer.trace import BATCH_SIZE
from pyrmq.remoting import RemotingClient
from pyrmq.testing import LocalCluster
from rmqcore import TraceBuffer
from tests._cli import pyrmq_cli
from tests._reading import read_queue
from tests._waiting import wait_until

TOPIC = "TraceT"
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def test_record_format_is_rocketmqs():
    """The fields and separators of TraceDataEncoder, both ways; 'null' for
    what Java leaves unset; older, shorter Pub records still read."""
    pub = TraceRecord("Pub", "ID1", 1700000000000, "DefaultRegion", "PG", "T", "TagA", "",
                      "1.2.3.4:10911", 5, 3, 0, "OFFSETID", True)  # fmt: skip
    text = pub.encode()
    assert text == CONTENT_SPLITOR.join(
        ["Pub", "1700000000000", "DefaultRegion", "PG", "T", "ID1", "TagA", "null",
         "1.2.3.4:10911", "5", "3", "0", "OFFSETID", "true"]
    ) + FIELD_SPLITOR  # fmt: skip
    after = TraceRecord("SubAfter", "ID1", 1700000000009, request_id="R1", cost_ms=4,
                        success=False, keys="k1", context_code=4)  # fmt: skip
    assert after.encode() == CONTENT_SPLITOR.join(
        ["SubAfter", "R1", "ID1", "4", "false", "k1", "4", "1700000000009"]
    ) + FIELD_SPLITOR  # fmt: skip
    (p, a) = decode(text + after.encode())
    assert (p.type, p.msg_id, p.group, p.store_host, p.success, p.keys) == (
        "Pub",
        "ID1",
        "PG",
        "1.2.3.4:10911",
        True,
        "",
    )
    assert (a.request_id, a.cost_ms, a.success, a.context_code) == ("R1", 4, False, 4)
    old_pub = CONTENT_SPLITOR.join(
        ["Pub", "1", "R", "G", "T", "ID2", "t", "k", "h", "1", "2", "0", "true"]
    )
    (o,) = decode(old_pub + FIELD_SPLITOR + "Bogus" + CONTENT_SPLITOR + "x" + FIELD_SPLITOR)
    assert o.msg_id == "ID2" and o.success and o.offset_msg_id == ""


def _pub(i: int, **props: Any) -> tuple[Message, SendResult, str, int, int]:
    msg = Message(TOPIC, b"x" * i, **props)
    mq = MessageQueue(TOPIC, "broker-a", i % 4)
    status = SendStatus.SEND_OK if i % 5 else SendStatus.FLUSH_DISK_TIMEOUT
    r = SendResult(status, f"ID{i}", f"OFF{i}", mq, i, region_id=None if i % 2 else "Reg")
    return (msg, r, "1.2.3.4:10911", 1700000000000 + i, i % 7)


def test_pub_records_of_sends_are_batched_by_size():
    """What a traced producer flushes (rmqcore.TraceBuffer): every send's Pub
    record, in bodies of at most max_body bytes, each with the message ids
    and KEYS of its records, each once; read back as they were sent."""
    recs = [_pub(i, tags="TagA" if i % 3 else None, keys=f"order-{i // 2}") for i in range(1, 200)]
    recs[7] = _pub(8, tags="Tä", delay_level=3)  # non-ASCII, delayed
    recs[9] = _pub(10, keys=["k1", "k2"])
    recs[9][0].properties["TRAN_MSG"] = "true"  # as the transaction producer sets it
    buf = TraceBuffer("PG", SendStatus.SEND_OK, "DefaultRegion", 1000)
    for rec in recs:
        buf.append(*rec)
    assert len(buf) == len(recs)
    out = buf.take(2000)
    assert len(buf) == 0 and buf.take(2000) == []
    assert len(out) > 5
    decoded = []
    for body, keys in out:
        assert len(body) <= 2000
        records = decode(body.decode())
        decoded += records
        want_keys = []
        for rec in records:
            want_keys += [rec.msg_id] + ([rec.keys] if rec.keys else [])
        assert keys == " ".join(dict.fromkeys(want_keys))
    assert len(decoded) == len(recs)
    for (msg, r, host, began, cost), d in zip(recs, decoded, strict=True):
        one = TraceRecord("Pub", r.msg_id, began, r.region_id or "DefaultRegion", "PG", TOPIC,
                          msg.properties.get("TAGS", ""), msg.properties.get("KEYS", ""), host,
                          len(msg.body), cost, d.msg_type, r.offset_msg_id,
                          r.send_status is SendStatus.SEND_OK)  # fmt: skip
        assert d == one
    assert [d.msg_type for d in decoded[6:10]] == [0, 3, 0, 1]
    assert decoded[7].tags == "Tä" and not decoded[4].success
    # a record longer than max_body goes alone; nothing at all: no body
    # a record longer than max_body goes alone, and the buffer is reused
    for i in (1, 2, 1):
        buf.append(*_pub(i, keys="x" * 300))
    (big, big_keys), (two, _), (again, again_keys) = buf.take(50)
    assert again_keys == big_keys
    assert len(big) > 300 and big_keys == "ID1 " + "x" * 300 and big == again
    assert decode(two.decode())[0].msg_id == "ID2"
    # a record that cannot be written is dropped, counted, and leaves
    # nothing half-written behind; so is one beyond max_records
    buf.append(*_pub(3))
    buf.append(recs[0][0], object(), "h", 1, 1)
    assert buf.dropped == 1 and isinstance(buf.last_error, AttributeError)
    small = TraceBuffer("PG", SendStatus.SEND_OK, "R", 1)
    small.append(*_pub(4))
    small.append(*_pub(5))
    assert small.dropped == 1 and small.last_error is None and len(small) == 1
    ((only, _),) = buf.take(10_000)
    assert [d.msg_id for d in decode(only.decode())] == ["ID3"]


def test_every_batch_of_pub_records_asks_for_a_flush():
    """Every batch_records-th record calls on_batch (the dispatcher's
    flush, so trace messages leave a batch at a time); take() cuts at
    max_records too; an on_batch that raises is counted, never raised."""
    calls: list[int] = []
    buf = TraceBuffer("PG", SendStatus.SEND_OK, "R", 1000, 3, lambda: calls.append(len(buf)))
    for i in range(1, 8):
        buf.append(*_pub(i))
    assert calls == [3, 6]
    pieces = buf.take(100_000, 3)
    assert [[d.msg_id for d in decode(b.decode())] for b, _ in pieces] == [
        ["ID1", "ID2", "ID3"],
        ["ID4", "ID5", "ID6"],
        ["ID7"],
    ]
    assert [k for _, k in pieces] == ["ID1 ID2 ID3", "ID4 ID5 ID6", "ID7"]

    def boom() -> None:
        raise RuntimeError("no loop")

    failing = TraceBuffer("PG", SendStatus.SEND_OK, "R", 1000, 1, boom)
    failing.append(*_pub(1))
    assert len(failing) == 1 and failing.dropped == 1
    assert isinstance(failing.last_error, RuntimeError)


def test_a_batch_flush_takes_only_whole_trace_messages():
    """take(whole=True), the dispatcher's take when a batch asks for a
    flush: the records after the last full body stay, in order, with their
    keys, for the next take. A flush that ran after more records arrived
    (answers come in bursts) once sent the rest as a short trace message,
    a third more trace messages than full batches need."""
    buf = TraceBuffer("PG", SendStatus.SEND_OK, "R", 1000)
    for i in range(1, 9):
        buf.append(*_pub(i, keys=f"k{i}"))
    pieces = buf.take(100_000, 3, 0, True)
    assert [[d.msg_id for d in decode(b.decode())] for b, _ in pieces] == [
        ["ID1", "ID2", "ID3"],
        ["ID4", "ID5", "ID6"],
    ]
    assert len(buf) == 2
    assert buf.take(100_000, 3, 0, True) == []  # still not a whole body
    buf.append(*_pub(9, keys="k9"))
    buf.append(*_pub(10, keys="k10"))
    ((body, keys), (rest, rest_keys)) = buf.take(100_000, 3)  # take it all
    assert [d.msg_id for d in decode(body.decode())] == ["ID7", "ID8", "ID9"]
    assert keys == "ID7 k7 ID8 k8 ID9 k9"
    assert [d.msg_id for d in decode(rest.decode())] == ["ID10"] and rest_keys == "ID10 k10"
    assert len(buf) == 0
    # a body the size limit closed is whole: it goes, the rest stays
    for i in range(1, 6):
        buf.append(*_pub(i))
    one = len(buf.take(100_000)[0][0]) // 5
    for i in range(1, 6):
        buf.append(*_pub(i))
    pieces = buf.take(2 * one + 1, 100, 0, True)
    assert [len(decode(b.decode())) for b, _ in pieces] == [2, 2] and len(buf) == 1


def test_a_trace_messages_keys_stay_within_a_records_properties():
    """Pieces are cut at max_keys bytes of keys too (the trace message's
    KEYS property; a CommitLog record holds 32767 bytes of properties); a
    record whose keys alone pass it goes in a piece of its own."""
    buf = TraceBuffer("PG", SendStatus.SEND_OK, "R", 1000)
    for i in range(1, 11):
        buf.append(*_pub(i, keys=f"{i}-" + "k" * 97))  # 100 bytes, + "IDn" and spaces
    buf.append(*_pub(11, keys="x" * 500))
    buf.append(*_pub(12))
    pieces = buf.take(100_000, 100, 350)
    ids = [[d.msg_id for d in decode(b.decode())] for b, _ in pieces]
    assert ids == [["ID1", "ID2", "ID3"], ["ID4", "ID5", "ID6"], ["ID7", "ID8", "ID9"],
                   ["ID10"], ["ID11"], ["ID12"]]  # fmt: skip
    assert all(len(k) <= 350 for _, k in pieces if "x" * 500 not in k)


def test_encoded_records_share_the_pub_records_bodies():
    """SubBefore/SubAfter records (append_encoded) go in the same bodies as
    the Pub records, cut by the same rules, their keys with them; what
    cannot be written is dropped and counted, never raised."""
    buf = TraceBuffer("PG", SendStatus.SEND_OK, "R", 1000)
    buf.append(*_pub(1))
    after = TraceRecord("SubAfter", "ID1", 1700000000009, request_id="R1", cost_ms=4,
                        success=True, keys="order-1", context_code=0)  # fmt: skip
    for _ in range(3):
        buf.append_encoded(after.encode(), after.trace_keys())
    buf.append_encoded(after.encode(), [])  # no keys at all
    buf.append(*_pub(2))
    assert len(buf) == 6
    pieces = buf.take(100_000, 4)
    assert [[(d.type, d.msg_id) for d in decode(b.decode())] for b, _ in pieces] == [
        [("Pub", "ID1"), ("SubAfter", "ID1"), ("SubAfter", "ID1"), ("SubAfter", "ID1")],
        [("SubAfter", "ID1"), ("Pub", "ID2")],
    ]
    assert [k for _, k in pieces] == ["ID1 order-1", "ID2"]
    buf.append_encoded(b"not text", ["k"])
    buf.append_encoded("text", None)
    assert buf.dropped == 2 and isinstance(buf.last_error, TypeError) and len(buf) == 0
    assert buf.take(100_000) == []
    buf.append_encoded(after.encode(), [])  # a body whose records carry no keys
    ((body, keys),) = buf.take(100_000)
    assert decode(body.decode())[0].request_id == "R1" and keys == ""
    full = TraceBuffer("PG", SendStatus.SEND_OK, "R", 1)
    full.append_encoded(after.encode(), after.trace_keys())
    full.append_encoded(after.encode(), after.trace_keys())
    assert len(full) == 1 and full.dropped == 1


def test_a_trace_messages_keys_are_each_there_once_in_order():
    """A trace message's KEYS: every key of its records (a key of several
    words is several keys), each once, in the order first seen, as
    RocketMQ's dispatcher collects them in a set; across non-ASCII, long
    and repeated keys and bodies cut at a record count."""
    rnd = random.Random(16)
    pool = [f"k{i}" for i in range(60)] + ["ключ", "键-7", "a" * 300, "two words"]
    buf = TraceBuffer("PG", SendStatus.SEND_OK, "R", 10_000)
    records = [[rnd.choice(pool) for _ in range(rnd.randint(0, 4))] for _ in range(900)]
    for keys in records:
        buf.append_encoded("record", keys)
    pieces = buf.take(10**7, 300)
    assert len(pieces) == 3
    for n, (_, got) in enumerate(pieces):
        words = [w for keys in records[n * 300 : (n + 1) * 300] for k in keys for w in k.split()]
        assert got == " ".join(dict.fromkeys(words))


async def _trace_queue(c: LocalCluster) -> list[MessageExt]:
    """Every message in the trace topic's queue (a broker with
    traceTopicEnable creates it with one), read as a consumer would."""
    remoting = RemotingClient(name="trace-reader")
    try:
        api = MQClientAPI(remoting, [c.namesrv_addr])
        return await read_queue(api, c.broker_addr, MessageQueue(TRACE_TOPIC, "broker-a", 0))
    finally:
        await remoting.shutdown()


def test_messages_with_long_keys_are_traced(tmp_path, arun):
    """100 sends with 400-byte keys: their trace records need more keys
    than one trace message holds, and every record is stored."""

    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store"), trace_topic_enable=True) as c:
            async with Producer("PG-keys", c.namesrv_addr, enable_msg_trace=True) as p:
                tracer = p.tracer
                assert tracer is not None
                ids = []
                for i in range(100):
                    r = await p.send(Message(TOPIC, b"x", keys=f"{i:03d}" + "k" * 400))
                    ids.append(r.msg_id)
            assert tracer.failed == 0 and tracer.dropped == 0 and tracer.sent >= 2
            async with AdminClient(c.namesrv_addr) as admin:
                for msg_id in (ids[0], ids[50], ids[99]):

                    async def indexed(msg_id: str = msg_id) -> bool:
                        return bool(await admin.query_msg_trace(msg_id))

                    await wait_until(indexed, f"the trace of {msg_id}", stall_after=20)
                    (pub,) = await admin.query_msg_trace(msg_id)
                    assert pub.type == "Pub" and pub.keys.endswith("k" * 400)

    arun(main(), timeout=90)


def test_trace_sends_ride_the_traced_clients_connection(tmp_path, arun):
    """The trace producer joins the traced producer's client (one
    connection to the broker, both groups in its heartbeat), and leaves it
    at shutdown without closing what it does not own."""

    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store"), trace_topic_enable=True) as c:
            server = c.broker.server  # type: ignore[union-attr]
            before = len(server.connections)
            async with Producer("PG-one", c.namesrv_addr, enable_msg_trace=True) as p:
                tracer = p.tracer
                assert tracer is not None and tracer.producer.client is p.client
                # only full batches flush (and shutdown): the interval's
                # tick, due before this sleep ends, finds nothing to send
                tracer.flush_interval = 3600
                await asyncio.sleep(0.25)
                for i in range(2 * BATCH_SIZE + 50):
                    assert (await p.send(Message(TOPIC, f"m{i}".encode()))).ok
                # the first batch, compressed meanwhile, left at the second's flush
                await wait_until(lambda: tracer.sent >= 1, "the trace messages", stall_after=20)
                assert len(server.connections) == before + 1
                async with AdminClient(c.namesrv_addr) as admin:
                    conn = await admin.examine_producer_connection(
                        "_INNER_TRACE_PRODUCER-PG-one", TRACE_TOPIC
                    )
                ids = {x["clientId"] for x in conn["connectionSet"]}
                assert ids == {p.client.client_id}
                assert [d["groupName"] for d in p.client.producer_data] == [
                    "PG-one",
                    "_INNER_TRACE_PRODUCER-PG-one",
                ]
            # 2.5 batches of records: two full trace messages and the rest,
            # sent at shutdown
            assert tracer.sent == 3 and tracer.failed == 0 and tracer.dropped == 0
            assert p.client.producer_data == [{"groupName": "PG-one"}]
            # a batch over 4 KB is stored zlib-compressed, as RocketMQ
            # clients store it, and is read back (inflated) as its records
            stored = await _trace_queue(c)
            assert [len(decode(m.body.decode())) for m in stored] == [BATCH_SIZE] * 2 + [50]
            full = stored[:2]
            assert all(m.sys_flag & SYSFLAG_COMPRESSED for m in full)
            assert all(m.store_size < len(m.body) // 2 for m in full)

    arun(main(), timeout=90)


def test_a_busy_producers_trace_goes_in_whole_batches(tmp_path, arun):
    """Ten batches of pipelined sends, whose answers arrive in bursts: their
    trace is ten trace messages of BATCH_SIZE records, compressed off the event
    loop. A flush a burst had delayed used to send the records past the
    last full batch as a short trace message of their own (a third more
    trace messages than the records needed)."""

    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store"), trace_topic_enable=True) as c:
            async with Producer("PG-burst", c.namesrv_addr, enable_msg_trace=True) as p:
                tracer = p.tracer
                assert tracer is not None
                # only full batches flush now: the interval's tick, the one
                # due before this sleep ends, finds nothing to send
                tracer.flush_interval = 3600
                await asyncio.sleep(0.25)
                futs = [
                    p.send_async(Message(TOPIC, f"m{i}".encode())) for i in range(10 * BATCH_SIZE)
                ]
                assert all(r.ok for r in await asyncio.gather(*futs))
            assert tracer.sent == 10 and tracer.failed == 0 and tracer.dropped == 0
            stored = await _trace_queue(c)
            assert [len(decode(m.body.decode())) for m in stored] == [BATCH_SIZE] * 10
            assert all(m.sys_flag & SYSFLAG_COMPRESSED for m in stored)

    arun(main(), timeout=90)


class _StarvedWorker:
    """A DeflateWorker whose thread never gets a CPU: it takes bodies and
    compresses none (what a saturated machine can do to it)."""

    def __init__(self) -> None:
        self.jobs: list[tuple[None, bytes, Any]] = []

    def submit(self, body: bytes, token: Any = None) -> bool:
        self.jobs.append((None, body, token))
        return True

    def done(self) -> list[tuple[None, bytes, Any]]:
        return []

    @property
    def pending(self) -> int:
        return len(self.jobs)

    def close(self) -> list[tuple[None, bytes, Any]]:
        jobs, self.jobs = self.jobs, []
        return jobs


def test_trace_messages_the_worker_never_compressed_go_at_shutdown(tmp_path, arun):
    """Shutdown waits half its time for the compression thread, then takes
    back what it has not compressed and sends it compressed on the loop:
    no trace record is lost to a starved thread."""

    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store"), trace_topic_enable=True) as c:
            async with Producer("PG-starved", c.namesrv_addr, enable_msg_trace=True) as p:
                tracer = p.tracer
                assert tracer is not None
                tracer._deflater.close()
                tracer._deflater = _StarvedWorker()  # type: ignore[assignment]
                tracer.shutdown_timeout = 2.0
                futs = [
                    p.send_async(Message(TOPIC, f"m{i}".encode())) for i in range(BATCH_SIZE * 2)
                ]
                assert all(r.ok for r in await asyncio.gather(*futs))
            assert tracer.failed == 0 and tracer.dropped == 0 and tracer._deflater.pending == 0
            stored = await _trace_queue(c)
            assert sum(len(decode(m.body.decode())) for m in stored) == BATCH_SIZE * 2
            assert all(m.sys_flag & SYSFLAG_COMPRESSED for m in stored if len(m.body) >= 4096)

    arun(main(), timeout=90)


def _consumer(
    ns: str, group: str, got: list[tuple[str, MessageExt]], fail_first: bool
) -> PushConsumer:
    failed: set[str] = set()

    async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            if fail_first and m.msg_id not in failed:
                failed.add(m.msg_id)
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
            got.append((group, m))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(group, ns, consume_from_where=FIRST, enable_msg_trace=True)
    c.subscribe(TOPIC, "*")
    c.register_message_listener(listener)
    return c


def test_a_message_trace_shows_its_send_and_every_group(tmp_path, arun):
    async def main() -> None:
        c = LocalCluster(str(tmp_path / "store"), trace_topic_enable=True)
        await c.start()
        try:
            ns = c.namesrv_addr
            got: list[tuple[str, MessageExt]] = []
            ca = _consumer(ns, "CG-a", got, fail_first=False)
            cb = _consumer(ns, "CG-b", got, fail_first=True)  # retried once
            async with Producer("PG-trace", ns, enable_msg_trace=True) as p:
                r = await p.send(Message(TOPIC, b"order", tags="TagA", keys="order-42"))
                untraced = await p.send(Message(TOPIC, b"x"))
                async with ca, cb:
                    await wait_until(
                        lambda: len(got) >= 4, "both groups' deliveries", stall_after=30
                    )
            async with AdminClient(ns) as admin:

                async def traced() -> bool:
                    recs = await admin.query_msg_trace(r.msg_id)
                    return len([x for x in recs if x.type == "SubAfter"]) >= 3

                await wait_until(traced, "the trace records", stall_after=20)
                recs = await admin.query_msg_trace(r.msg_id)
            (pub,) = [x for x in recs if x.type == "Pub"]
            assert (pub.group, pub.topic, pub.tags, pub.keys) == (
                "PG-trace",
                TOPIC,
                "TagA",
                "order-42",
            )
            assert pub.store_host == c.broker_addr and pub.success and pub.body_length == 5
            assert pub.offset_msg_id == r.offset_msg_id and pub.client_host
            before = {(x.group, x.retry_times) for x in recs if x.type == "SubBefore"}
            assert before == {("CG-a", 0), ("CG-b", 0), ("CG-b", 1)}
            after = sorted((x.group, x.success) for x in recs if x.type == "SubAfter")
            assert after == [("CG-a", True), ("CG-b", False), ("CG-b", True)]
            assert all(x.msg_id == r.msg_id for x in recs)
            # every record is in the trace topic, keyed by the message id
            raw = await _trace_queue(c)
            assert any(r.msg_id in m.keys for m in raw)
            assert any(untraced.msg_id in m.keys for m in raw)
            # the CLI, as a user runs it
            rc, out, err = await pyrmq_cli("admin", "queryMsgTraceById", "-n", ns, "-i", r.msg_id)
            assert rc == 0, err
            assert "Pub" in out and "PG-trace" in out and "CG-a" in out and "CG-b" in out
            assert "failed" in out and "success" in out
            rc, out, err = await pyrmq_cli(
                "admin", "queryMsgTraceById", "-n", ns, "-i", r.msg_id, "--json"
            )
            assert rc == 0 and {x["type"] for x in json.loads(out)} == {
                "Pub",
                "SubBefore",
                "SubAfter",
            }
            rc, out, err = await pyrmq_cli("admin", "queryMsgTraceById", "-n", ns, "-i", "NOPE")
            assert rc == 1 and "no trace of message NOPE" in err and "Traceback" not in err
        finally:
            await c.shutdown()

    arun(main(), timeout=120)


def test_tracing_never_fails_a_send(tmp_path, arun):
    """No trace topic and no auto-creation: the trace writes fail, counted
    and logged; the user's sends all succeed."""

    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store")) as c:
            async with Producer("PG-x", c.namesrv_addr) as setup:
                await setup.send(Message(TOPIC, b"route"))

                async def routed() -> bool:
                    # the auto-created topic registered with the name server
                    # (a busy machine may take a while): the traced producer
                    # below finds TOPIC's route, not TBW102's, which goes next
                    route = await setup.client.update_topic_route(TOPIC)
                    return route is not None and bool(route.publish_queues(TOPIC))

                await wait_until(routed, f"{TOPIC}'s route at the name server", stall_after=20)
            c.broker.topics.table.pop("TBW102")  # type: ignore[union-attr]
            async with Producer("PG-t", c.namesrv_addr, enable_msg_trace=True) as p:
                for i in range(20):
                    assert (await p.send(Message(TOPIC, f"m{i}".encode()))).ok
                tracer = p.tracer
                assert tracer is not None
                await wait_until(lambda: tracer.failed > 0, "a failed trace write", stall_after=20)
            assert tracer.sent == 0

    arun(main(), timeout=90)


def test_trace_is_off_by_default(tmp_path, arun):
    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store"), trace_topic_enable=True) as c:
            async with Producer("PG-off", c.namesrv_addr) as p:
                await p.send(Message(TOPIC, b"quiet"))
                assert p.tracer is None
            await asyncio.sleep(0.3)
            assert c.broker.store.max_offset_in_queue(TRACE_TOPIC, 0) == 0  # type: ignore[union-attr]

    arun(main(), timeout=60)


def test_a_transactional_message_trace_shows_its_end(tmp_path, arun):
    """A traced TransactionProducer: the half message's Pub (type 1) and an
    EndTransaction record for the producer's UNKNOW and for the check's
    COMMIT_MESSAGE."""

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT_MESSAGE

    async def main() -> None:
        settings = {"trace_topic_enable": True, "transaction_check_interval": 200,
                    "transaction_time_out": 300}  # fmt: skip
        async with LocalCluster(str(tmp_path / "store"), **settings) as c:
            ns = c.namesrv_addr
            async with Producer("PG-setup", ns) as setup:
                await setup.send(Message(TOPIC, b"route"))
            async with TransactionProducer(
                "PG-tx-trace", ns, transaction_listener=Listener(), enable_msg_trace=True
            ) as p:
                r = await p.send_message_in_transaction(Message(TOPIC, b"tx", keys="o-7"))
                async with AdminClient(ns) as admin:

                    async def ended() -> bool:
                        recs = await admin.query_msg_trace(r.msg_id)
                        return len([x for x in recs if x.type == "EndTransaction"]) == 2

                    await wait_until(ended, "both EndTransaction records", stall_after=20)
                    recs = await admin.query_msg_trace(r.msg_id)
            (pub,) = [x for x in recs if x.type == "Pub"]
            assert pub.msg_type == 1 and pub.keys == "o-7"
            ends = sorted(
                (x.transaction_state, x.from_check) for x in recs if x.type == "EndTransaction"
            )
            assert ends == [("COMMIT_MESSAGE", True), ("UNKNOW", False)]

    arun(main(), timeout=90)
