"""Transactions on the wire, frame by frame, as the Java 4.9 client speaks
them (DefaultMQProducerImpl.sendMessageInTransaction / endTransaction,
ClientRemotingProcessor.checkTransactionState; facts in
shared/docs/rocketmq-remoting-protocol.md): a half message by
SEND_MESSAGE_V2 with sysFlag TRANSACTION_PREPARED and TRAN_MSG/PGROUP,
END_TRANSACTION oneway, and the answer to the broker's
CHECK_TRANSACTION_STATE on the connection it came by. A raw RemotingClient
plays the producer against a real broker on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time

import rmqcore
from pyrmq.remoting import RemotingClient, RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.remoting.connection import Connection

from .helpers import cluster, max_offset, msg_id_offset, pull_all, simple

GROUP = "PG-java"
TOPIC = "JavaTxT"


def java_heartbeat(client_id: str) -> bytes:
    """HeartbeatData as fastjson writes it for a started producer."""
    return json.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [],
            "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}, {"groupName": GROUP}],
        },
        separators=(",", ":"),
    ).encode()


def half_frame(body: bytes, queue_id: int, uniq: str) -> RemotingCommand:
    """SEND_MESSAGE_V2 of a half message, shaped like Java 4.9's."""
    props = rmqcore.encode_properties(
        {"TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": uniq, "WAIT": "true", "KEYS": "order-1"}
    ).decode()
    fields = {
        "a": GROUP,
        "b": TOPIC,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "4",  # MessageSysFlag.TRANSACTION_PREPARED_TYPE
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": props,
        "j": "0",
        "k": "false",
        "m": "false",
    }
    return RemotingCommand(RC.SEND_MESSAGE_V2, fields, body, language="JAVA", version=395)


def end_frame(
    table_offset: str, commit_log_offset: str, decision: int, uniq: str, *, from_check: bool
) -> RemotingCommand:
    """EndTransactionRequestHeader (sent oneway by the Java client)."""
    return RemotingCommand(
        RC.END_TRANSACTION,
        {
            "producerGroup": GROUP,
            "tranStateTableOffset": table_offset,
            "commitLogOffset": commit_log_offset,
            "commitOrRollback": str(decision),
            "fromTransactionCheck": "true" if from_check else "false",
            "msgId": uniq,
            "transactionId": uniq,
        },
        language="JAVA",
        version=395,
    )


def test_half_message_then_end_transaction_commit(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            r = await simple(cl, c.broker_addr, RC.UPDATE_AND_CREATE_TOPIC, topic=TOPIC,
                             readQueueNums="4", writeQueueNums="4", perm="6")  # fmt: skip
            assert r.code == R.SUCCESS
            uniq = "7F00000100002A9F0000000000000001"
            r = await cl.invoke(c.broker_addr, half_frame(b"order", 3, uniq), 5.0)
            assert r.code == R.SUCCESS, r
            # the answer: the queue the client named, the half queue offset,
            # the half message's offset id (the client takes commitLogOffset from it)
            assert r.ext_fields["queueId"] == "3" and r.ext_fields["queueOffset"] == "0"
            clog = msg_id_offset(r.ext_fields["msgId"])
            assert await max_offset(cl, c.broker_addr, TOPIC, 3) == 0
            await cl.invoke_oneway(
                c.broker_addr, end_frame("0", str(clog), 8, uniq, from_check=False)
            )
            for _ in range(200):  # oneway: poll, 10 s at most
                if await max_offset(cl, c.broker_addr, TOPIC, 3) == 1:
                    break
                await asyncio.sleep(0.05)
            (m,) = await pull_all(cl, c.broker_addr, TOPIC, 3)
            assert m["body"] == b"order"
            assert m["sys_flag"] & 0xC == rmqcore.SYSFLAG_TRANSACTION_COMMIT
            props = rmqcore.decode_properties(m["properties"])
            assert props["UNIQ_KEY"] == uniq and props["KEYS"] == "order-1"
            assert "TRAN_MSG" not in props and "REAL_TOPIC" not in props
            op = await pull_all(cl, c.broker_addr, "RMQ_SYS_TRANS_OP_HALF_TOPIC", 0)
            assert [
                (o["body"], rmqcore.decode_properties(o["properties"])["TAGS"]) for o in op
            ] == [(b"0", "d")]

    arun(main())


def test_check_transaction_state_and_its_answer(arun, tmp_path):
    """No END_TRANSACTION: the broker asks the producer's connection
    (CHECK_TRANSACTION_STATE, oneway, the record under its real topic); the
    answer, END_TRANSACTION with fromTransactionCheck, commits."""

    async def main() -> None:
        checks: asyncio.Queue[tuple[Connection, RemotingCommand]] = asyncio.Queue()

        def on_request(conn: Connection, cmd: RemotingCommand) -> None:
            checks.put_nowait((conn, cmd))
            return None

        settings = {"transaction_check_interval": 200, "transaction_time_out": 300}
        async with cluster(tmp_path, **settings) as (c, cl):
            producer = RemotingClient(on_request, name="java-producer")
            try:
                hb = await simple(
                    producer, c.broker_addr, RC.HEART_BEAT, body=java_heartbeat("127.0.0.1@9")
                )
                assert hb.code == R.SUCCESS
                uniq = "7F00000100002A9F0000000000000002"
                r = await producer.invoke(c.broker_addr, half_frame(b"checked", 1, uniq), 5.0)
                assert r.code == R.SUCCESS, r
                conn, check = await asyncio.wait_for(checks.get(), 30)
                assert check.code == RC.CHECK_TRANSACTION_STATE and check.is_oneway
                f = check.ext_fields
                assert f["msgId"] == uniq and f["transactionId"] == uniq
                assert int(f["tranStateTableOffset"]) == 1  # the copy put back
                (rec,) = rmqcore.decode_records(check.body)
                assert rec["topic"] == TOPIC and rec["queue_id"] == 1 and rec["body"] == b"checked"
                assert rec["commit_log_offset"] == int(f["commitLogOffset"])
                assert f["offsetMsgId"] == rmqcore.offset_msg_id(
                    rec["store_host"], rec["commit_log_offset"]
                )
                props = rmqcore.decode_properties(rec["properties"])
                assert props["PGROUP"] == GROUP and props["TRANSACTION_CHECK_TIMES"] == "1"
                conn.invoke_oneway(
                    end_frame(
                        f["tranStateTableOffset"], f["commitLogOffset"], 8, uniq, from_check=True
                    )
                )
                for _ in range(200):
                    if await max_offset(cl, c.broker_addr, TOPIC, 1) == 1:
                        break
                    await asyncio.sleep(0.05)
                (m,) = await pull_all(cl, c.broker_addr, TOPIC, 1)
                assert m["body"] == b"checked"
                # answered: no further check comes
                await asyncio.sleep(0.8)
                assert checks.empty()
            finally:
                await producer.shutdown()

    arun(main())


def test_a_half_message_sent_again_is_stored_once(arun, tmp_path):
    """A producer that did not get the answer sends the same half message
    again (same group and UNIQ_KEY): it gets the first one's answer, and the
    transaction has one half message."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            uniq = "7F00000100002A9F0000000000000003"
            first = await cl.invoke(c.broker_addr, half_frame(b"once", 0, uniq), 5.0)
            again = await cl.invoke(c.broker_addr, half_frame(b"once", 0, uniq), 5.0)
            assert first.code == again.code == R.SUCCESS
            for k in ("msgId", "queueId", "queueOffset"):
                assert first.ext_fields[k] == again.ext_fields[k], k
            assert await max_offset(cl, c.broker_addr, "RMQ_SYS_TRANS_HALF_TOPIC", 0) == 1
            other = await cl.invoke(c.broker_addr, half_frame(b"other", 0, uniq[:-1] + "4"), 5.0)
            assert other.ext_fields["queueOffset"] == "1"

    arun(main())
