"""Transactions through broker crashes.

One broker process (ProcessCluster, checks every 300 ms, 500 ms after a
transaction was born) takes transactional sends from two loops of pyrmq's
TransactionProducer while it is SIGKILLed at random moments and started
again on its store and port: 4 cycles, 15 with --long. The listener plays
an application with a local database: execute_local_transaction records the
outcome of transaction i in it (commit when i % 3 == 0, rollback when
i % 3 == 1, and for i % 3 == 2 it answers UNKNOW and records commit for
even i, rollback for odd), check_local_transaction answers from it
(UNKNOW while i's send is still running, rollback for a transaction the
database never saw). So kills land between a half message and its
END_TRANSACTION, between a commit and its op record, during checks.

Asserted once the broker has asked about everything left open: the topic
holds exactly the transactions the database committed, each once; nothing
rolled back or never executed appears; no half message stays pending. The
seed of the random moments is in the CHAOS line; PYRMQ_CHAOS_SEED replays
it."""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections import Counter
from typing import Any

from pyrmq.common.errors import RMQError
from pyrmq.common.message import Message, MessageExt, MessageQueue
from pyrmq.common.results import LocalTransactionState
from pyrmq.producer import TransactionProducer
from pyrmq.remoting import RequestCode
from pyrmq.testing.cluster import ProcessCluster
from tests._waiting import wait_until
from tests.chaos._crash_helpers import Admin
from tests.chaos.conftest import scale

BROKER = "broker-a"
TOPIC = "TxCrashT"
QUEUES = 4
COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
LOAD_BEFORE_KILL = (0.3, 1.5)


class Application:
    """The local database and the listener over it."""

    def __init__(self) -> None:
        self.db: dict[int, LocalTransactionState] = {}
        self.in_progress: set[int] = set()
        self.checks = 0

    def execute_local_transaction(self, msg: Message, i: int) -> LocalTransactionState:
        if i % 3 == 0:
            self.db[i] = COMMIT
            return COMMIT
        if i % 3 == 1:
            self.db[i] = ROLLBACK
            return ROLLBACK
        self.db[i] = COMMIT if i % 2 == 0 else ROLLBACK
        return UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checks += 1
        i = int(msg.body)
        if i in self.in_progress:
            return UNKNOW
        return self.db.get(i, ROLLBACK)

    def committed(self) -> set[int]:
        return {i for i, s in self.db.items() if s is COMMIT}


async def _send_loop(p: TransactionProducer, app: Application, next_i: list[int],
                     stop: asyncio.Event, tally: Counter[str]) -> None:  # fmt: skip
    while not stop.is_set():
        i = next_i[0]
        next_i[0] += 1
        app.in_progress.add(i)
        try:
            await p.send_message_in_transaction(Message(TOPIC, str(i).encode()), i)
            tally["acked"] += 1
        except RMQError:
            tally["failed"] += 1
            await asyncio.sleep(0.05)
        finally:
            app.in_progress.discard(i)


async def _stored(admin: Admin, addr: str) -> list[int]:
    out: list[int] = []
    for q in range(QUEUES):
        out += [int(m.body) for m in await admin.read_queue(addr, MessageQueue(TOPIC, BROKER, q))]
    return out


def test_transactions_survive_broker_kills(tmp_path, arun, long_mode, report):
    seed = int(os.environ.get("PYRMQ_CHAOS_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    cycles = scale(long_mode, 4, 15)
    cluster = ProcessCluster(
        tmp_path / "cluster",
        [BROKER],
        broker_conf={
            "transactionCheckInterval": 300,
            "transactionTimeOut": 500,
            "registerNameServerPeriod": 1000,
        },
    )
    cluster.start()

    async def main() -> dict[str, Any]:
        app = Application()
        tally: Counter[str] = Counter()
        async with Admin(cluster.namesrv_addr) as admin:
            addr = cluster.broker_addr(BROKER)
            await admin.create_topic(addr, TOPIC, QUEUES)
            p = TransactionProducer("pg-tx-crash", cluster.namesrv_addr, transaction_listener=app)
            await p.start()
            stop = asyncio.Event()
            next_i = [0]
            loops = [asyncio.create_task(_send_loop(p, app, next_i, stop, tally)) for _ in range(2)]
            try:
                for _ in range(cycles):
                    await asyncio.sleep(rng.uniform(*LOAD_BEFORE_KILL))
                    await asyncio.to_thread(cluster.kill_broker, BROKER)
                    await asyncio.sleep(rng.uniform(0.0, 0.5))
                    await cluster.start_broker_async(BROKER)
                    await p.client.send_heartbeat_to_all_brokers()
                await asyncio.sleep(rng.uniform(*LOAD_BEFORE_KILL))
            finally:
                stop.set()
                await asyncio.gather(*loops)
            want = app.committed()

            async def settled() -> bool:
                await p.client.send_heartbeat_to_all_brokers()
                return set(await _stored(admin, addr)) == want

            await wait_until(
                settled,
                "every open transaction resolved by a check",
                progress=lambda: app.checks,
                stall_after=20,
            )
            await asyncio.sleep(1.5)  # more check rounds: nothing changes
            stored = await _stored(admin, addr)
            resp = await admin.api.broker_request(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
            info = json.loads(resp.body)["table"]
            await p.shutdown()
        dups = [i for i, n in Counter(stored).items() if n > 1]
        assert not dups, f"committed twice: {dups[:20]} (seed {seed})"
        assert set(stored) == want, (
            f"seed {seed}: missing {sorted(want - set(stored))[:20]}, "
            f"not committed {sorted(set(stored) - want)[:20]}"
        )
        assert int(info.get("transactionPending", -1)) == 0, info
        return {
            "seed": seed,
            "cycles": cycles,
            "transactions": next_i[0],
            "acked": tally["acked"],
            "failed_sends": tally["failed"],
            "committed": len(want),
            "checks_answered": app.checks,
            "duplicates": len(dups),
        }

    try:
        figures = arun(main(), timeout=120 + 20 * cycles)
    finally:
        statuses = cluster.shutdown()
        print(cluster.log_tails(30))
    report(**figures)
    assert all(rc == 0 for rc in statuses.values()), statuses
