"""Transactional messages end to end: pyrmq's TransactionProducer against an
in-process NameServer + Broker (LocalCluster) on 127.0.0.1; what the broker
stored is read back with plain pulls. The check-back runs every 200 ms and
asks about a transaction 300 ms after it was born (transactionCheckInterval,
transactionTimeOut), so a test sees several rounds in a second or two."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pyrmq.admin import AdminClient
from pyrmq.client.api import MQClientAPI
from pyrmq.common.errors import BrokerError
from pyrmq.common.message import Message, MessageExt, MessageQueue, decode_offset_msg_id
from pyrmq.common.results import LocalTransactionState, SendStatus
from pyrmq.common.topics import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC
from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer
from pyrmq.producer import Producer, TransactionProducer
from pyrmq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from pyrmq.testing import LocalCluster
from tests._cli import pyrmq_cli
from tests._reading import read_queue
from tests._waiting import wait_until

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
FAST_CHECKS = {"transaction_check_interval": 200, "transaction_time_out": 300}
TOPIC = "TxT"


@dataclass
class Listener:
    """Answers what it is told; records what it was asked."""

    execute: LocalTransactionState = COMMIT
    check: LocalTransactionState = COMMIT
    executed: list[Message] = field(default_factory=list)
    checked: list[MessageExt] = field(default_factory=list)
    during_execute: Any = None  # an async callable run inside execute

    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        self.executed.append(msg)
        if self.during_execute is not None:
            await self.during_execute()
        return self.execute

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checked.append(msg)
        return self.check


@dataclass
class Env:
    cluster: LocalCluster
    api: MQClientAPI

    @property
    def addr(self) -> str:
        return self.cluster.broker_addr

    async def queue(self, topic: str, queue_id: int = 0) -> list[MessageExt]:
        return await read_queue(self.api, self.addr, MessageQueue(topic, "broker-a", queue_id))

    async def topic(self, topic: str = TOPIC, queues: int = 4) -> list[MessageExt]:
        out = []
        for q in range(queues):
            out += await self.queue(topic, q)
        return out

    def producer(self, listener: Listener, group: str = "PG-tx", **kw: Any) -> TransactionProducer:
        return TransactionProducer(
            group, self.cluster.namesrv_addr, transaction_listener=listener, **kw
        )

    def status(self) -> dict[str, Any]:
        b = self.cluster.broker
        assert b is not None
        return b.transaction_check.status()

    async def end(self, group: str, table_offset: int, clog: int, decision: int) -> RemotingCommand:
        """END_TRANSACTION as a request (clients send it oneway: no answer)."""
        cmd = RemotingCommand(
            RequestCode.END_TRANSACTION,
            {
                "producerGroup": group,
                "tranStateTableOffset": str(table_offset),
                "commitLogOffset": str(clog),
                "commitOrRollback": str(decision),
                "fromTransactionCheck": "false",
                "msgId": "X",
                "transactionId": "X",
            },
        )
        return await self.api.remoting.invoke(self.addr, cmd, 5.0)


@contextlib.asynccontextmanager
async def env(tmp_path: Any, **settings: Any) -> AsyncIterator[Env]:
    c = LocalCluster(str(tmp_path / "store"), **{**FAST_CHECKS, **settings})
    await c.start()
    remoting = RemotingClient(name="test-reader")
    try:
        api = MQClientAPI(remoting, [c.namesrv_addr])
        async with Producer("PG-setup", c.namesrv_addr) as p:
            await p.send(Message(TOPIC, b"topic exists"))  # the topic and its route
        yield Env(c, api)
    finally:
        await remoting.shutdown()
        await c.shutdown()


def bodies(msgs: list[MessageExt]) -> list[bytes]:
    return [m.body for m in msgs if m.body != b"topic exists"]


def test_commit_makes_the_message_visible_and_not_before(tmp_path, arun):
    async def main() -> None:
        async with env(tmp_path) as e:
            seen_inside: list[list[bytes]] = []

            async def look() -> None:
                seen_inside.append(bodies(await e.topic()))

            listener = Listener(execute=COMMIT, during_execute=look)
            async with e.producer(listener) as p:
                r = await p.send_message_in_transaction(Message(TOPIC, b"order-1"), "arg")
            assert r.send_status is SendStatus.SEND_OK
            assert r.local_transaction_state is COMMIT
            assert r.transaction_id == r.msg_id
            assert seen_inside == [[]], "the half message was visible before the commit"
            await wait_until(lambda: _has(e, [b"order-1"]), "the committed message", stall_after=10)
            (m,) = [m for m in await e.topic() if m.body == b"order-1"]
            assert m.queue_id == r.message_queue.queue_id
            assert m.unique_key == r.msg_id
            for k in ("TRAN_MSG", "REAL_TOPIC", "REAL_QID"):
                assert k not in m.properties
            assert m.properties["PGROUP"] == "PG-tx"
            assert e.status()["transactionPending"] == 0
            assert listener.checked == []

    arun(main(), timeout=60)


async def _has(e: Env, want: list[bytes]) -> bool:
    return sorted(bodies(await e.topic())) == sorted(want)


def test_rollback_stores_nothing_visible(tmp_path, arun):
    async def main() -> None:
        async with env(tmp_path) as e:
            listener = Listener(execute=ROLLBACK, check=COMMIT)
            async with e.producer(listener) as p:
                r = await p.send_message_in_transaction(Message(TOPIC, b"cancelled"))
                assert r.local_transaction_state is ROLLBACK
                await wait_until(
                    lambda: e.status()["transactionRolledBack"] == 1, "the rollback", stall_after=10
                )
                await asyncio.sleep(1.0)  # five check rounds: nobody is asked
            assert bodies(await e.topic()) == []
            assert listener.checked == []
            assert e.status()["transactionPending"] == 0

    arun(main(), timeout=60)


def test_unknown_then_the_check_commits(tmp_path, arun):
    async def main() -> None:
        async with env(tmp_path) as e:
            listener = Listener(execute=UNKNOW, check=COMMIT)
            async with e.producer(listener) as p:
                r = await p.send_message_in_transaction(Message(TOPIC, b"later", keys="k-1"))
                assert r.local_transaction_state is UNKNOW
                assert bodies(await e.topic()) == []
                await wait_until(lambda: _has(e, [b"later"]), "the commit a check brought")
            (asked,) = listener.checked
            # the check shows the message under its real topic and queue
            assert asked.topic == TOPIC and asked.queue_id == r.message_queue.queue_id
            assert asked.body == b"later" and asked.keys == ["k-1"]
            assert asked.unique_key == r.msg_id
            await asyncio.sleep(0.6)
            assert len(listener.checked) == 1, "asked again after the answer"
            assert bodies(await e.topic()) == [b"later"]

    arun(main(), timeout=60)


def test_a_second_producer_of_the_group_answers_when_the_first_is_gone(tmp_path, arun):
    async def main() -> None:
        async with env(tmp_path) as e:
            first = Listener(execute=UNKNOW, check=ROLLBACK)
            async with e.producer(first) as p:
                await p.send_message_in_transaction(Message(TOPIC, b"handed over"))
            second = Listener(check=COMMIT)
            async with e.producer(second, instance_name="second") as p2:
                await p2.client.send_heartbeat_to_all_brokers()
                await wait_until(lambda: _has(e, [b"handed over"]), "the second producer's commit")
            assert first.checked == [] and len(second.checked) == 1

    arun(main(), timeout=60)


def test_given_up_after_transaction_check_max(tmp_path, arun):
    async def main() -> None:
        async with env(tmp_path, transaction_check_max=2) as e:
            listener = Listener(execute=UNKNOW, check=UNKNOW)
            async with e.producer(listener) as p:
                r = await p.send_message_in_transaction(Message(TOPIC, b"undecided"))
                await wait_until(
                    lambda: e.status()["transactionDiscarded"] == 1,
                    "giving up",
                    progress=lambda: len(listener.checked),
                    stall_after=10,
                )
            assert len(listener.checked) == 2
            assert bodies(await e.topic()) == []
            (kept,) = await e.queue(TRANS_CHECK_MAX_TIME_TOPIC)
            assert kept.body == b"undecided" and kept.properties["REAL_TOPIC"] == TOPIC
            # a late answer changes nothing
            _, clog = decode_offset_msg_id(r.offset_msg_id)
            resp = await e.end("PG-tx", r.queue_offset, clog, COMMIT.value)
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert "already committed, rolled back or given up on" in (resp.remark or "")
            assert bodies(await e.topic()) == []

    arun(main(), timeout=60)


def test_pending_transactions_survive_a_broker_restart(tmp_path, arun):
    async def main() -> None:
        # checks are slow here until the restart: the transactions stay open
        async with env(tmp_path, transaction_check_interval=60_000) as e:
            listener = Listener(execute=UNKNOW, check=COMMIT)
            async with e.producer(listener) as p:
                for i in range(3):
                    await p.send_message_in_transaction(Message(TOPIC, f"open-{i}".encode()))
                committed = await p.send_message_in_transaction(Message(TOPIC, b"resolved before"))
                _, clog = decode_offset_msg_id(committed.offset_msg_id)
                resp = await e.end("PG-tx", committed.queue_offset, clog, COMMIT.value)
                assert resp.code == ResponseCode.SUCCESS
                await e.cluster.stop_broker()
                e.cluster._bkw["transaction_check_interval"] = 200
                await e.cluster.start_broker()
                assert e.status()["transactionPending"] == 3
                await p.client.send_heartbeat_to_all_brokers()
                want = [b"open-0", b"open-1", b"open-2", b"resolved before"]
                await wait_until(lambda: _has(e, want), "the commits after the restart")
            await asyncio.sleep(0.6)
            assert sorted(bodies(await e.topic())) == want  # each once
            assert len(listener.checked) == 3

    arun(main(), timeout=90)


def test_bad_end_transactions_change_nothing(tmp_path, arun):
    async def main() -> None:
        async with env(tmp_path, transaction_check_max=100) as e:
            listener = Listener(execute=UNKNOW, check=UNKNOW)
            async with e.producer(listener) as p:
                r = await p.send_message_in_transaction(Message(TOPIC, b"open"))
            _, clog = decode_offset_msg_id(r.offset_msg_id)
            before = e.cluster.broker.store.commit_log_max_offset  # type: ignore[union-attr]
            cases = [
                (("PG-other", r.queue_offset, clog, COMMIT.value), "The producer group wrong"),
                (("PG-tx", r.queue_offset + 1, clog, COMMIT.value), "state table offset wrong"),
                (("PG-tx", r.queue_offset, clog + 1, COMMIT.value), "prepared transaction message"),
                (("PG-tx", r.queue_offset, 1 << 40, COMMIT.value), "prepared transaction message"),
                (("PG-tx", r.queue_offset, clog, 5), "commitOrRollback 5"),
            ]
            for args, words in cases:
                resp = await e.end(*args)
                assert resp.code != ResponseCode.SUCCESS, args
                assert words in (resp.remark or ""), (args, resp.remark)
            # the message at offset 0 of the store is not a half message
            setup = (await e.topic())[0]
            resp = await e.end("PG-tx", setup.queue_offset, setup.commit_log_offset, COMMIT.value)
            assert "is not a half message" in (resp.remark or "")
            assert e.cluster.broker.store.commit_log_max_offset == before  # type: ignore[union-attr]
            # the right answer still works, once
            assert (await e.end("PG-tx", r.queue_offset, clog, ROLLBACK.value)).code == 0
            again = await e.end("PG-tx", r.queue_offset, clog, COMMIT.value)
            assert "already committed" in (again.remark or "")
            assert bodies(await e.topic()) == []

    arun(main(), timeout=60)


def test_transactional_messages_to_system_topics_are_refused(tmp_path, arun):
    async def main() -> None:
        async with env(tmp_path) as e, e.producer(Listener()) as p:
            for topic in ("%RETRY%PG-tx", TRANS_HALF_TOPIC, "SCHEDULE_TOPIC_XXXX"):
                before = e.cluster.broker.store.commit_log_max_offset  # type: ignore[union-attr]
                try:
                    await p.send_message_in_transaction(Message(topic, b"forged"))
                except BrokerError as err:
                    assert err.code == ResponseCode.NO_PERMISSION, (topic, err)
                else:
                    raise AssertionError(f"a half message to {topic} was taken")
                after = e.cluster.broker.store.commit_log_max_offset  # type: ignore[union-attr]
                assert after == before, topic

    arun(main(), timeout=60)


def test_admin_shows_pending_transactions(tmp_path, arun):
    async def main() -> None:
        async with env(tmp_path, transaction_check_max=100) as e:
            listener = Listener(execute=UNKNOW, check=UNKNOW)
            async with e.producer(listener) as p:
                sent = [
                    await p.send_message_in_transaction(Message(TOPIC, f"p{i}".encode()))
                    for i in range(3)
                ]
            ns = e.cluster.namesrv_addr
            async with AdminClient(ns) as admin:
                (found,) = await admin.pending_transactions()
            assert found.broker_addr == e.addr and found.total == 3
            assert [t.transaction_id for t in found.transactions] == [r.msg_id for r in sent]
            assert all(t.producer_group == "PG-tx" and t.topic == TOPIC for t in found.transactions)
            rc, out, err = await pyrmq_cli("admin", "pendingTransactions", "-n", ns, "--json")
            assert rc == 0, err
            (data,) = json.loads(out)
            assert data["total"] == 3 and len(data["transactions"]) == 3
            rc, out, err = await pyrmq_cli(
                "admin", "pending-transactions", "-n", ns, "-b", e.addr, "--limit", "2"
            )
            assert rc == 0, err
            assert sent[0].msg_id in out and "Pending: 3 (the oldest 2 shown)" in out
            rc, out, err = await pyrmq_cli("admin", "pendingTransactions", "-n", ns, "--limit", "0")
            assert rc != 0 and "positive whole number" in err and "Traceback" not in err

    arun(main(), timeout=120)


def test_a_consumer_sees_committed_messages_only_in_commit_order(tmp_path, arun):
    """A push consumer running throughout receives the committed messages,
    each once, in their commit order within every queue; never a half
    message, a rolled-back one, or one still open."""

    async def main() -> None:
        async with env(tmp_path, transaction_check_max=100) as e:
            got: list[MessageExt] = []

            async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
                got.extend(msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            consumer = PushConsumer(
                "CG-tx",
                e.cluster.namesrv_addr,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            )
            consumer.subscribe(TOPIC, "*")
            consumer.register_message_listener(listener)
            decisions = {i: (COMMIT if i % 3 else ROLLBACK) for i in range(30)}
            decisions[29] = UNKNOW  # stays open: the check answers UNKNOW
            async with consumer:
                app = Listener(check=UNKNOW)
                async with e.producer(app) as p:
                    for i, state in decisions.items():
                        app.execute = state
                        await p.send_message_in_transaction(Message(TOPIC, f"{i:02d}".encode()))
                want = sorted(f"{i:02d}".encode() for i, s in decisions.items() if s is COMMIT)
                await wait_until(
                    lambda: sorted(bodies(got)) == want, "the committed messages", stall_after=20
                )
                await asyncio.sleep(0.6)  # check rounds: nothing more arrives
            assert sorted(bodies(got)) == want
            for q in range(4):
                in_queue = [m.body for m in got if m.queue_id == q and m.body in want]
                assert in_queue == sorted(in_queue), (q, in_queue)
            assert all(m.topic == TOPIC and "TRAN_MSG" not in m.properties for m in got)

    arun(main(), timeout=120)
