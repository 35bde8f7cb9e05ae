"""EndTransactionProcessor: END_TRANSACTION (37), a producer's decision on
its transaction or its answer to a check (check.py), and pyrmq's
GET_PENDING_TRANSACTIONS (60001)."""

from __future__ import annotations

import json
import logging
from typing import Literal

from pyrmq.broker.processor.headers import header_int
from pyrmq.broker.transaction.service import (
    TRANSACTION_NOT_TYPE,
    HalfMessage,
    TransactionalMessageService,
)
from pyrmq.common.errors import (
    BrokerSystemError,
    MessageIllegalError,
    RMQError,
    ServiceNotAvailableError,
    StoreError,
)
from pyrmq.remoting import RemotingCommand, ResponseCode
from pyrmq.remoting.connection import Connection, HandlerResult

log = logging.getLogger("pyrmq.broker.transaction")


class EndTransactionProcessor:
    """END_TRANSACTION (37): EndTransactionRequestHeader {producerGroup,
    tranStateTableOffset, commitLogOffset, commitOrRollback (8 commit, 12
    rollback, 0 unknown: nothing changes), fromTransactionCheck, msgId,
    transactionId}. Clients send it oneway; a refusal is logged as well as
    answered (SYSTEM_ERROR with RocketMQ's remarks)."""

    def __init__(self, service: TransactionalMessageService, *, slave: bool = False) -> None:
        self.service = service
        self.slave = slave

    def process(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        try:
            return self._process(conn, cmd)
        except RMQError as e:
            self._log_refusal(conn, cmd, e)
            raise

    def _process(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        if self.slave or not self.service.started:
            raise ServiceNotAvailableError(
                "Message store is slave mode, so end transaction is forbidden; send it to the "
                "master (brokerId 0)"
                if self.slave
                else "transactions are not served yet (the broker is starting)"
            )
        f = cmd.ext_fields
        group = f.get("producerGroup", "")
        if not group:
            raise MessageIllegalError("END_TRANSACTION lacks producerGroup")
        decision = header_int(f, "commitOrRollback", error=MessageIllegalError)
        table_offset = header_int(f, "tranStateTableOffset", error=MessageIllegalError)
        clog_offset = header_int(f, "commitLogOffset", error=MessageIllegalError)
        if decision == TRANSACTION_NOT_TYPE:
            # UNKNOW: the producer does not know yet; a check asks again
            return cmd.response(ResponseCode.SUCCESS)
        self.service.check_decision(decision)
        h = self.service.find(group, table_offset, clog_offset)
        # "true"/"false" from Java, "1"/"0" from the C++ client
        from_check = f.get("fromTransactionCheck", "").lower() in ("true", "1")
        why = "check answer" if from_check else "producer"
        if self.service.needs_lookup(h, decision):
            h.resolving = True  # before the lookup's first await
            return self._end_after_lookup(cmd, h, decision, why)
        with _STORE_ERRORS:
            self.service.finish(h, decision, commit_stored=False, why=why)
        return cmd.response(ResponseCode.SUCCESS)

    async def _end_after_lookup(
        self, cmd: RemotingCommand, h: HalfMessage, decision: int, why: str
    ) -> RemotingCommand:
        with _STORE_ERRORS:
            await self.service.end(h, decision, why=why)
        return cmd.response(ResponseCode.SUCCESS)

    def pending(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """GET_PENDING_TRANSACTIONS (pyrmq's 60001): the transactions this
        broker waits on, oldest first, at most `max` (100)."""
        limit = header_int(cmd.ext_fields, "max", 100, error=MessageIllegalError)
        if not 0 < limit <= 100_000:
            raise MessageIllegalError(f"max {limit}: expected 1..100000")
        s = self.service
        rows = sorted(s.pending.values(), key=lambda h: h.queue_offset)[:limit]
        body = json.dumps(
            {"total": len(s.pending), "transactions": [h.describe() for h in rows]}
        ).encode()
        return cmd.response(ResponseCode.SUCCESS, body=body)

    @staticmethod
    def _log_refusal(conn: Connection, cmd: RemotingCommand, e: RMQError) -> None:
        f = cmd.ext_fields
        log.warning(
            "transactions: END_TRANSACTION from %s (group %s, offset %s, %s) refused: %s",
            conn.peer,
            f.get("producerGroup"),
            f.get("tranStateTableOffset"),
            f.get("commitOrRollback"),
            e,
        )


class _StoreErrors:
    """Store exceptions while storing an outcome as SYSTEM_ERROR."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, tp: type[BaseException] | None, e: BaseException | None, tb: object
    ) -> Literal[False]:
        if isinstance(e, StoreError):
            raise BrokerSystemError(f"storing the transaction's outcome failed: {e}") from None
        return False


_STORE_ERRORS = _StoreErrors()
