"""Transactions across a controller-mode failover: half messages, their
check-back copies and op records are CommitLog data the slave copies, and
the checker's progress (group CID_RMQ_SYS_TRANS's offsets) is synced
metadata, so the broker elected after the master's SIGKILL rebuilds what is
pending and resolves it with the producer's answers.

Real processes on 127.0.0.1: three controllers, a name server, b0 and b1
(SYNC_MASTER, SYNC_FLUSH, every SyncStateSet member acknowledging). The
listener keeps its answers open (UNKNOW) until the master is gone."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from pyrmq.common.message import Message, MessageExt, MessageQueue
from pyrmq.common.results import LocalTransactionState, SendStatus
from pyrmq.producer import TransactionProducer
from tests._waiting import wait_until
from tests.chaos._crash_helpers import Admin
from tests.ha.conftest import (
    GROUP,
    controller_mode_cluster,
    start_controller_mode,
    stop_controller_mode,
)
from tests.ha.test_failover import _wait_new_master, wait_settled

TOPIC = "TxFailoverT"
QUEUES = 4
COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
OPEN = 20  # left open across the failover: even ones commit, odd ones roll back
DONE = 10  # committed before it


class Application:
    def __init__(self) -> None:
        self.db: dict[int, LocalTransactionState] = {}
        self.hold = True
        self.checks = 0

    def execute_local_transaction(self, msg: Message, i: int) -> LocalTransactionState:
        if i >= OPEN:
            self.db[i] = COMMIT
            return COMMIT
        self.db[i] = COMMIT if i % 2 == 0 else ROLLBACK
        return UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checks += 1
        return UNKNOW if self.hold else self.db[int(msg.body)]


async def _stored(admin: Admin, addr: str) -> list[int]:
    out: list[int] = []
    for q in range(QUEUES):
        out += [int(m.body) for m in await admin.read_queue(addr, MessageQueue(TOPIC, GROUP, q))]
    return out


def test_open_transactions_are_resolved_by_the_new_master(tmp_path, arun, report):
    ctl, c = controller_mode_cluster(tmp_path)
    c.broker_conf.update(
        {"transactionCheckInterval": 300, "transactionTimeOut": 500, "transactionCheckMax": 1000}
    )

    async def main() -> dict[str, Any]:
        app = Application()
        async with Admin(c.namesrv_addr) as admin:
            old = await wait_settled(admin, c)
            await admin.create_topic(c.broker_addr(old), TOPIC, QUEUES)
            p = TransactionProducer("pg-tx-failover", c.namesrv_addr, transaction_listener=app)
            await p.start()
            try:
                for i in range(OPEN + DONE):
                    r = await p.send_message_in_transaction(Message(TOPIC, str(i).encode()), i)
                    assert r.send_status is SendStatus.SEND_OK, r
                # the open ones have been asked about (copies put back)
                await wait_until(
                    lambda: app.checks >= OPEN, "checks before the failover", stall_after=20
                )
                await asyncio.to_thread(c.kill_broker, old)
                new = await _wait_new_master(admin, c, old)
                assert new is not None
                app.hold = False
                want = sorted(i for i, s in app.db.items() if s is COMMIT)

                async def resolved() -> bool:
                    # what the producer's 30-s route refresh and heartbeat
                    # do: the new master learns of its connection
                    await p.client.update_topic_route(TOPIC)
                    await p.client.send_heartbeat_to_all_brokers()
                    return sorted(await _stored(admin, c.broker_addr(new))) == want

                checks_before = app.checks
                await wait_until(
                    resolved,
                    "the new master's commits",
                    progress=lambda: app.checks,
                    stall_after=30,
                )
                await asyncio.sleep(1.0)  # more check rounds change nothing
                stored = await _stored(admin, c.broker_addr(new))
            finally:
                await p.shutdown()
        dups = [i for i, n in Counter(stored).items() if n > 1]
        assert not dups, dups
        assert sorted(stored) == want
        return {
            "old_master": old,
            "new_master": new,
            "transactions": OPEN + DONE,
            "committed": len(want),
            "checks_before_failover": checks_before,
            "checks_after": app.checks - checks_before,
        }

    try:
        start_controller_mode(ctl, c, None)
        figures = arun(main(), timeout=180)
    finally:
        stop_controller_mode(ctl, c)
    report(**figures)
