"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320):
success shapes, batches, auto-create and every refusal."""

from __future__ import annotations

import asyncio
import json
import re
import zlib

import rmqcore
from pyrmq.remoting import RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.storage.config import FlushDiskType

from .helpers import (
    cluster,
    max_offset,
    msg_id_offset,
    props,
    pull_all,
    route,
    send,
    send_ok,
    simple,
    wait_for,
)

HEX32 = re.compile(r"^[0-9A-F]{32}$")


def _check_send_ext(r, c, queue_id: int, queue_offset: int) -> None:
    ext = r.ext_fields
    assert all(isinstance(v, str) for v in ext.values()), ext
    assert ext["queueId"] == str(queue_id)
    assert ext["queueOffset"] == str(queue_offset)
    assert HEX32.match(ext["msgId"]), ext
    # offsetMsgId = IPv4 + port + CommitLog offset of this broker
    host, port = c.broker_addr.split(":")
    ip_hex = "".join(f"{int(p):02X}" for p in host.split("."))
    assert ext["msgId"][:16] == ip_hex + f"{int(port):08X}"


def test_send_v1_response_and_stored_fields(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            p = props(
                TAGS="TagA",
                KEYS="k1",
                UNIQ_KEY="0A000001000014A300004200AE710100",
                WAIT="true",
                my="v",
            )
            r1 = await send_ok(
                cl, c.broker_addr, "SendT", b"hello", 1, p, born_ts=1700000000123, flag=7
            )
            _check_send_ext(r1, c, 1, 0)
            r2 = await send_ok(cl, c.broker_addr, "SendT", b"world", 1, p)
            _check_send_ext(r2, c, 1, 1)
            assert msg_id_offset(r2.ext_fields["msgId"]) > msg_id_offset(r1.ext_fields["msgId"])
            # the msgId's offset is the stored record
            v = await simple(
                cl,
                c.broker_addr,
                RC.VIEW_MESSAGE_BY_ID,
                offset=msg_id_offset(r1.ext_fields["msgId"]),
            )
            assert v.code == R.SUCCESS, v
            (m,) = rmqcore.decode_records(v.body, True)
            assert m["topic"] == "SendT" and m["queue_id"] == 1 and m["queue_offset"] == 0
            assert m["body"] == b"hello" and m["flag"] == 7 and m["born_timestamp"] == 1700000000123
            got = rmqcore.decode_properties(m["properties"])
            assert got["TAGS"] == "TagA" and got["KEYS"] == "k1" and got["my"] == "v"
            assert (
                rmqcore.offset_msg_id(m["store_host"], m["commit_log_offset"])
                == r1.ext_fields["msgId"]
            )

    arun(main())


def test_send_v2_short_names(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            p = props(TAGS="T2", KEYS="kk")
            for i in range(3):
                r = await send(
                    cl, c.broker_addr, "SendV2", b"m%d" % i, 2, p, code=RC.SEND_MESSAGE_V2, flag=3
                )
                assert r.code == R.SUCCESS, r
                _check_send_ext(r, c, 2, i)
            msgs = await pull_all(cl, c.broker_addr, "SendV2", 2)
            assert [m["body"] for m in msgs] == [b"m0", b"m1", b"m2"]
            assert all(m["flag"] == 3 for m in msgs)
            assert all(rmqcore.decode_properties(m["properties"])["TAGS"] == "T2" for m in msgs)

    arun(main())


def _batch(n: int, size: int = 10) -> tuple[bytes, list[tuple[bytes, dict[str, str]]]]:
    msgs = [
        (
            bytes([65 + i % 26]) * size + b"-%d" % i,
            {"TAGS": f"t{i % 3}", "KEYS": f"bk{i}", "UNIQ_KEY": f"{i:032X}"},
        )
        for i in range(n)
    ]
    return rmqcore.encode_batch([(b, p, 0) for b, p in msgs]), msgs


def _check_batch_stored(stored, msgs, first_offset: int) -> None:
    assert len(stored) == len(msgs)
    for i, (m, (body, p)) in enumerate(zip(stored, msgs, strict=False)):
        assert m["queue_offset"] == first_offset + i
        assert m["body"] == body
        got = rmqcore.decode_properties(m["properties"])
        for k, v in p.items():
            assert got[k] == v, (k, got)
        assert not m["sys_flag"] & rmqcore.SYSFLAG_COMPRESSED


def test_send_batch_code_320(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            body, msgs = _batch(3)
            r = await send(
                cl, c.broker_addr, "BatchT", body, 0, props(WAIT="true"), code=RC.SEND_BATCH_MESSAGE
            )
            assert r.code == R.SUCCESS, r
            assert r.ext_fields["queueOffset"] == "0" and r.ext_fields["queueId"] == "0"
            ids = r.ext_fields["msgId"].split(",")
            assert len(ids) == 3 and all(HEX32.match(i) for i in ids)
            stored = await pull_all(cl, c.broker_addr, "BatchT", 0)
            _check_batch_stored(stored, msgs, 0)
            assert [
                rmqcore.offset_msg_id(m["store_host"], m["commit_log_offset"]) for m in stored
            ] == ids

    arun(main())


def test_send_code_10_batch_flag_consecutive_offsets(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            await send_ok(cl, c.broker_addr, "BatchT", b"single", 1)
            body, msgs = _batch(5)
            r = await send_ok(cl, c.broker_addr, "BatchT", body, 1, props(WAIT="true"), batch=True)
            assert r.ext_fields["queueOffset"] == "1"
            body2, msgs2 = _batch(4)
            r = await send_ok(cl, c.broker_addr, "BatchT", body2, 1, batch=True)
            assert r.ext_fields["queueOffset"] == "6"
            assert await max_offset(cl, c.broker_addr, "BatchT", 1) == 10
            stored = await pull_all(cl, c.broker_addr, "BatchT", 1)
            assert stored[0]["body"] == b"single"
            _check_batch_stored(stored[1:6], msgs, 1)
            _check_batch_stored(stored[6:], msgs2, 6)
            # batch "true" (Java spelling) works too
            r = await send_ok(cl, c.broker_addr, "BatchT", body2, 1, batch="true")
            assert r.ext_fields["queueOffset"] == "10"
            assert await max_offset(cl, c.broker_addr, "BatchT", 1) == 14

    arun(main())


def test_send_compressed_batch_is_inflated_and_split(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            body, msgs = _batch(4, size=3000)
            z = zlib.compress(body, 5)
            assert z[:2] == b"\x78\x5e"
            r = await send_ok(
                cl, c.broker_addr, "ZBatch", z, 0, props(WAIT="true"), batch=True, sysflag=1
            )
            assert r.ext_fields["queueOffset"] == "0"
            assert len(r.ext_fields["msgId"].split(",")) == 4
            stored = await pull_all(cl, c.broker_addr, "ZBatch", 0)
            _check_batch_stored(stored, msgs, 0)
            # corrupt compressed batch: MESSAGE_ILLEGAL and nothing stored
            r = await send(
                cl, c.broker_addr, "ZBatch", b"\x78\x5e garbage", 0, batch=True, sysflag=1
            )
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            assert await max_offset(cl, c.broker_addr, "ZBatch", 0) == 4
            # a single compressed message is stored as sent, flag kept
            one = zlib.compress(b"x" * 5000, 5)
            await send_ok(cl, c.broker_addr, "ZBatch", one, 0, sysflag=1)
            (m,) = await pull_all(cl, c.broker_addr, "ZBatch", 0, start=4)
            assert m["body"] == one and m["sys_flag"] & 1

    arun(main())


def test_large_compressed_batch_inflates_off_the_loop_and_is_stored_in_order(arun, tmp_path):
    """A compressed batch above INFLATE_INLINE_MAX (incompressible bodies) is
    inflated on the inflate thread; it is stored whole, split, and a bad one
    of that size still gets MESSAGE_ILLEGAL with nothing stored."""
    import os as _os

    from pyrmq.broker.processor.send import INFLATE_INLINE_MAX

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            msgs = [
                (_os.urandom(4000), {"KEYS": f"zk{i}", "UNIQ_KEY": f"{i:032X}"}) for i in range(30)
            ]
            z = zlib.compress(rmqcore.encode_batch([(b, p, 0) for b, p in msgs]), 5)
            assert len(z) > INFLATE_INLINE_MAX
            r = await send_ok(
                cl, c.broker_addr, "ZBig", z, 0, props(WAIT="true"), batch=True, sysflag=1
            )
            assert r.ext_fields["queueOffset"] == "0"
            assert len(r.ext_fields["msgId"].split(",")) == 30
            stored = await pull_all(cl, c.broker_addr, "ZBig", 0)
            _check_batch_stored(stored, msgs, 0)
            bad = z[:2] + bytes(len(z) - 2)
            r = await send(cl, c.broker_addr, "ZBig", bad, 0, batch=True, sysflag=1)
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            assert await max_offset(cl, c.broker_addr, "ZBig", 0) == 30

    arun(main())


def test_auto_create_from_tbw102(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            assert (await route(cl, c.namesrv_addr, "AutoT")).code == R.TOPIC_NOT_EXIST
            r = await send_ok(cl, c.broker_addr, "AutoT", b"x", 3)
            assert r.ext_fields["queueId"] == "3"
            cfg = json.loads((await simple(cl, c.broker_addr, RC.GET_ALL_TOPIC_CONFIG)).body)
            tc = cfg["topicConfigTable"]["AutoT"]
            assert tc["readQueueNums"] == 4 and tc["writeQueueNums"] == 4 and tc["perm"] == 6

            async def routed() -> bool:
                return (await route(cl, c.namesrv_addr, "AutoT")).code == R.SUCCESS

            assert await wait_for(routed, 5.0)
            data = json.loads((await route(cl, c.namesrv_addr, "AutoT")).body)
            assert data["queueDatas"][0]["writeQueueNums"] == 4
            assert data["queueDatas"][0]["perm"] == 6
            # queue 4 of a 4-queue topic is out of range
            r = await send(cl, c.broker_addr, "AutoT", b"x", 4)
            assert r.code == R.SYSTEM_ERROR and r.remark and "queueId" in r.remark, r

    arun(main())


def test_auto_create_off(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, auto_create_topic_enable=False) as (c, cl):
            r = await send(cl, c.broker_addr, "NoAuto", b"x", 0)
            assert r.code == R.TOPIC_NOT_EXIST and r.remark, r
            assert (await route(cl, c.namesrv_addr, "TBW102")).code == R.TOPIC_NOT_EXIST
            cfg = json.loads((await simple(cl, c.broker_addr, RC.GET_ALL_TOPIC_CONFIG)).body)
            assert (
                "NoAuto" not in cfg["topicConfigTable"] and "TBW102" not in cfg["topicConfigTable"]
            )

    arun(main())


def test_bad_topic_names_are_illegal(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            for bad in ("bad topic", "a/b", "x" * 128, "T\u00e9"):
                r = await send(cl, c.broker_addr, bad, b"x", 0)
                assert r.code == R.MESSAGE_ILLEGAL, (bad, r)
                assert r.remark, (bad, r)
            r = await cl.invoke(
                c.broker_addr, RemotingCommand(RC.SEND_MESSAGE, {"queueId": "0"}, b"x")
            )
            assert r.code == R.MESSAGE_ILLEGAL and r.remark and "topic" in r.remark, r
            # 127 characters is fine
            await send_ok(cl, c.broker_addr, "y" * 127, b"x", 0)

    arun(main())


def test_oversized_body_is_illegal(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, max_message_size=4096) as (c, cl):
            await send_ok(cl, c.broker_addr, "BigT", b"a" * 1000, 0)
            r = await send(cl, c.broker_addr, "BigT", b"a" * 5000, 0)
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            assert "5000" in r.remark or "size" in r.remark.lower(), r.remark
            body, _ = _batch(3, size=3000)
            r = await send(cl, c.broker_addr, "BigT", body, 0, batch=True)
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            assert await max_offset(cl, c.broker_addr, "BigT", 0) == 1

    arun(main())


def test_forbidden_topics_no_permission(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            for t in (
                "SCHEDULE_TOPIC_XXXX",
                "SELF_TEST_TOPIC",
                "RMQ_SYS_TRANS_HALF_TOPIC",
                "OFFSET_MOVED_EVENT",
            ):
                r = await send(cl, c.broker_addr, t, b"x", 0)
                assert r.code == R.NO_PERMISSION and r.remark, (t, r)
            # a read-only topic
            r = await simple(
                cl,
                c.broker_addr,
                RC.UPDATE_AND_CREATE_TOPIC,
                topic="ROnly",
                readQueueNums=1,
                writeQueueNums=1,
                perm=4,
            )
            assert r.code == R.SUCCESS, r
            r = await send(cl, c.broker_addr, "ROnly", b"x", 0)
            assert r.code == R.NO_PERMISSION, r

    arun(main())


def test_half_messages_go_to_the_half_topic_unseen(arun, tmp_path):
    """A transaction's half message (sysFlag TRANSACTION_PREPARED or the
    TRAN_MSG property) is stored in RMQ_SYS_TRANS_HALF_TOPIC, not in the
    queue it names; the answer names that queue and the half queue offset.
    TRAN_MSG=false is an ordinary message."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            await send_ok(cl, c.broker_addr, "TxT", b"plain", 0)
            for i, (sysflag, p) in enumerate(
                (
                    (4, props(PGROUP="PG")),
                    (0, props(TRAN_MSG="true", PGROUP="PG")),
                    (4, props(TRAN_MSG="TRUE", PGROUP="PG")),
                )
            ):
                r = await send(cl, c.broker_addr, "TxT", b"half", 2, p, sysflag=sysflag)
                assert r.code == R.SUCCESS, (sysflag, p, r)
                assert r.ext_fields["queueId"] == "2" and r.ext_fields["queueOffset"] == str(i)
            r = await send(cl, c.broker_addr, "TxT", b"x", 0, props(TRAN_MSG="false"))
            assert r.code == R.SUCCESS, r
            assert await max_offset(cl, c.broker_addr, "TxT", 0) == 2
            assert await max_offset(cl, c.broker_addr, "TxT", 2) == 0
            half = await pull_all(cl, c.broker_addr, "RMQ_SYS_TRANS_HALF_TOPIC", 0)
            assert [m["body"] for m in half] == [b"half"] * 3
            stored = rmqcore.decode_properties(half[0]["properties"])
            assert stored["REAL_TOPIC"] == "TxT" and stored["REAL_QID"] == "2"
            assert half[0]["sys_flag"] & 0xC == 0  # the half queue indexes it

    arun(main())


def test_half_messages_are_refused_with_reject_transaction_message(arun, tmp_path):
    """rejectTransactionMessage=true: NO_PERMISSION, nothing stored."""

    async def main() -> None:
        async with cluster(tmp_path, reject_transaction_message=True) as (c, cl):
            await send_ok(cl, c.broker_addr, "TxT", b"plain", 0)
            r = await send(cl, c.broker_addr, "TxT", b"half", 0, props(TRAN_MSG="true"))
            assert r.code == R.NO_PERMISSION and "transaction" in r.remark, r
            assert await max_offset(cl, c.broker_addr, "TxT", 0) == 1
            assert await max_offset(cl, c.broker_addr, "RMQ_SYS_TRANS_HALF_TOPIC", 0) == 0

    arun(main())


def test_retry_topic_send_over_max_goes_to_dlq(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, max_reconsume_times=3) as (c, cl):
            await send_ok(cl, c.broker_addr, "%RETRY%GX", b"r1", 0, reconsume_times=1)
            await send_ok(cl, c.broker_addr, "%RETRY%GX", b"r2", 0, reconsume_times=3)
            assert await max_offset(cl, c.broker_addr, "%RETRY%GX", 0) == 1
            dlq = await pull_all(cl, c.broker_addr, "%DLQ%GX", 0)
            assert [m["body"] for m in dlq] == [b"r2"]

    arun(main())


def test_sync_flush_answers_after_durability(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH) as (c, cl):
            store = c.broker.store

            async def one(i: int) -> None:
                r = await send_ok(cl, c.broker_addr, "SyncT", b"s" * (100 + i), i % 4)
                flushed = store.flushed_offset  # read as the answer arrives
                off = msg_id_offset(r.ext_fields["msgId"])
                end = off + store.look_message_by_offset(off)["store_size"]
                assert flushed >= end, (flushed, end)

            for i in range(10):
                await one(i)
            await asyncio.gather(*(one(i) for i in range(40)))
            body, _ = _batch(5)
            r = await send_ok(cl, c.broker_addr, "SyncT", body, 0, batch=True)
            last = msg_id_offset(r.ext_fields["msgId"].split(",")[-1])
            assert store.flushed_offset >= last + store.look_message_by_offset(last)["store_size"]

    arun(main())


def test_send_header_variants_and_refusals(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            # queueId < 0: the broker picks a queue
            r = await send_ok(cl, a, "VarT", b"x", -1)
            assert 0 <= int(r.ext_fields["queueId"]) < 4
            # sysFlag not an integer
            r = await send(cl, a, "VarT", b"x", 0, **{"sysFlag": "abc"})
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            # properties longer than 32767 bytes
            r = await send(cl, a, "VarT", b"x", 0, props(big="p" * 33000))
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            # batches may not target %RETRY% or carry DELAY
            body, _ = _batch(2)
            r = await send(cl, a, "%RETRY%GB", body, 0, batch=True)
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            r = await send(cl, a, "VarT", body, 0, props(DELAY="1"), batch=True)
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            # a malformed batch body
            r = await send(cl, a, "VarT", b"\x00\x00\x00\x30garbage", 0, batch=True)
            assert r.code == R.MESSAGE_ILLEGAL and r.remark, r
            total = sum([await max_offset(cl, a, "VarT", q) for q in range(4)])
            assert total == 1

    arun(main())


def test_pull_write_only_topic_no_permission(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            r = await simple(
                cl,
                c.broker_addr,
                RC.UPDATE_AND_CREATE_TOPIC,
                topic="WOnly",
                readQueueNums=1,
                writeQueueNums=1,
                perm=2,
            )
            assert r.code == R.SUCCESS
            await send_ok(cl, c.broker_addr, "WOnly", b"x", 0)
            from .helpers import pull

            r = await pull(cl, c.broker_addr, "WOnly", 0, 0)
            assert r.code == R.NO_PERMISSION and r.remark, r

    arun(main())
