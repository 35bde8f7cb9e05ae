"""TransactionalMessageCheckService: asks producers about transactions they
left open (RocketMQ's check-back); their answers come back as
END_TRANSACTION (end_transaction.py).

Every ``transactionCheckInterval`` ms, each pending transaction older than
``transactionTimeOut`` ms (or its ``CHECK_IMMUNITY_TIME_IN_SECONDS``) since
it was born is put back at the end of the half queue (one more check
counted) and CHECK_TRANSACTION_STATE (39) goes, oneway, to one live
connection of a producer of its group, chosen at random; its answer comes
back as END_TRANSACTION with fromTransactionCheck. A check with no producer
connected counts too. After ``transactionCheckMax`` checks a transaction is
given up on (kept in TRANS_CHECK_MAX_TIME_TOPIC, logged).

CHECK_TRANSACTION_STATE, as RocketMQ's Broker2Client sends it: header
``tranStateTableOffset`` (the copy's half queue offset), ``commitLogOffset``,
``msgId`` and ``transactionId`` (the UNIQ_KEY), ``offsetMsgId``; body the
stored record of the copy with its real topic and queue id
(``rmqcore.record_with_topic``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import rmqcore
from pyrmq.broker.client_manager import ProducerManager
from pyrmq.broker.transaction.service import (
    TRANSACTION_COMMIT_TYPE,
    HalfMessage,
    TransactionalMessageService,
)
from pyrmq.common.errors import (
    StoreError,
)
from pyrmq.remoting import RemotingCommand, RequestCode
from pyrmq.remoting.connection import Connection

log = logging.getLogger("pyrmq.broker.transaction")


class TransactionalMessageCheckService:
    def __init__(
        self,
        service: TransactionalMessageService,
        producers: ProducerManager,
        *,
        timeout_ms: int,
        check_max: int,
        check_interval_ms: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.service = service
        self.producers = producers
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        self.check_interval = check_interval_ms / 1000
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        #: CHECK_TRANSACTION_STATE requests sent, and checks with nobody to ask
        self.checks_sent = 0
        self.checks_unanswerable = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="pyrmq:transaction:check"
            )

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "transactions: check round failed; next in %.0f s", self.check_interval
                )

    async def check(self) -> None:
        """One round: ask about (or give up on) every transaction due."""
        s = self.service
        await s.read_ops()
        now = self._clock() * 1000
        due = [
            h
            for h in sorted(s.pending.values(), key=lambda h: h.queue_offset)
            if not h.resolving and now - h.born_ms >= (h.immunity_ms or self.timeout_ms)
        ]
        for h in due:
            if s.pending.get(h.origin) is not h or h.resolving:
                continue  # resolved meanwhile
            try:
                if h.check_times >= self.check_max:
                    s.discard(h)
                elif h.recovered and await self._found_committed(h):
                    continue
                else:
                    self._ask(h)
            except StoreError as e:
                log.warning("transactions: cannot check %s now: %s", h.transaction_id, e)
                break
        s.advance()

    async def _found_committed(self, h: HalfMessage) -> bool:
        """A transaction pending since start-up whose commit is stored (the
        broker stopped between the commit's message and its op record) is
        resolved without asking."""
        h.resolving = True
        try:
            stored = await self.service.commit_stored(h)
        except BaseException:
            h.resolving = False
            raise
        if stored:
            self.service.finish(h, TRANSACTION_COMMIT_TYPE, commit_stored=True, why="found stored")
            return True
        h.resolving = False
        h.recovered = False  # any later commit goes through finish
        return False

    def _ask(self, h: HalfMessage) -> None:
        r = self.service.put_back(h)
        conn = self._producer_channel(h.group)
        if conn is None:
            self.checks_unanswerable += 1
            log.info(
                "transactions: no producer of group %s connected to ask about %s (check %d of %d)",
                h.group,
                h.transaction_id,
                h.check_times,
                self.check_max,
            )
            return
        record = self.service.store.read([(r.phys_offset, r.wrote_bytes)])
        header = {
            "tranStateTableOffset": str(h.queue_offset),
            "commitLogOffset": str(h.commit_log_offset),
            "msgId": h.transaction_id,
            "transactionId": h.transaction_id,
            "offsetMsgId": r.msg_id,
        }
        body = rmqcore.record_with_topic(record, h.real_topic, h.real_queue_id)
        conn.invoke_oneway(
            RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, header, body, language="JAVA")
        )
        self.checks_sent += 1

    def _producer_channel(self, group: str) -> Connection | None:
        chans = [
            c
            for c in self.producers.groups.get(group, {})
            if isinstance(c, Connection) and c.is_open
        ]
        return random.choice(chans) if chans else None

    def status(self) -> dict[str, Any]:
        s = self.service
        return {
            "transactionPending": len(s.pending),
            "transactionCommitted": s.committed,
            "transactionRolledBack": s.rolled_back,
            "transactionDiscarded": s.discarded,
            "transactionChecksSent": self.checks_sent,
        }
