"""TransactionProducer: a message visible if and only if a local transaction
commits (RocketMQ's TransactionMQProducer).

``send_message_in_transaction(msg, arg)`` sends msg as a half message
(``TRAN_MSG`` true, ``PGROUP`` the group: stored, invisible to consumers),
then runs ``listener.execute_local_transaction(msg, arg)`` and tells the
broker its answer with END_TRANSACTION (37, oneway): COMMIT_MESSAGE makes
the message visible, ROLLBACK_MESSAGE drops it, UNKNOW (or an exception,
logged) leaves it to the broker's check-back: CHECK_TRANSACTION_STATE (39)
to a producer of the group, answered with
``listener.check_local_transaction(msg)`` on the connection it came by.

Listener methods may be plain functions or coroutine functions. Plain ones
run on the event loop: keep them short (the blocking facade,
``pyrmq.sync.TransactionProducer``, runs them in the caller's thread and in
worker threads instead)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

import rmqcore
from pyrmq.common.errors import ClientError, RMQError, StoreError
from pyrmq.common.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    Message,
    MessageExt,
    decode_offset_msg_id,
)
from pyrmq.common.results import (
    LocalTransactionState,
    SendResult,
    SendStatus,
    TransactionSendResult,
)
from pyrmq.common.trace import DEFAULT_REGION, TRANS_MSG_COMMIT, TraceRecord
from pyrmq.producer.producer import Producer
from pyrmq.remoting import Connection, RemotingCommand, RequestCode

log = logging.getLogger("pyrmq.client")

StateOrAwaitable = LocalTransactionState | Awaitable[LocalTransactionState]


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> StateOrAwaitable: ...

    def check_local_transaction(self, msg: MessageExt) -> StateOrAwaitable: ...


async def listener_state(call: Any, *args: Any, what: str) -> tuple[LocalTransactionState, str]:
    """What a listener method answered (awaited if awaitable), with the
    remark END_TRANSACTION carries: UNKNOW when it raised (logged) or
    answered something that is not a LocalTransactionState."""
    try:
        state = call(*args)
        if inspect.isawaitable(state):
            state = await state
    except Exception as e:
        return _raised(what, e)
    return _checked(state, what)


def listener_state_blocking(call: Any, *args: Any, what: str) -> tuple[LocalTransactionState, str]:
    """listener_state for a plain function, in the calling thread."""
    try:
        state = call(*args)
    except Exception as e:
        return _raised(what, e)
    return _checked(state, what)


def _raised(what: str, e: Exception) -> tuple[LocalTransactionState, str]:
    log.warning("%s raised; the broker will ask again later", what, exc_info=True)
    return LocalTransactionState.UNKNOW, f"{what} exception: {e!r}"


def _checked(state: Any, what: str) -> tuple[LocalTransactionState, str]:
    if not isinstance(state, LocalTransactionState):
        log.warning("%s returned %r, not a LocalTransactionState; taken as UNKNOW", what, state)
        return LocalTransactionState.UNKNOW, f"{what} returned {state!r}"
    return state, ""


def transaction_result(result: SendResult, state: LocalTransactionState) -> TransactionSendResult:
    return TransactionSendResult(
        result.send_status,
        result.msg_id,
        result.offset_msg_id,
        result.message_queue,
        result.queue_offset,
        result.transaction_id,
        result.region_id,
        state,
    )


class TransactionProducer(Producer):
    """A Producer that also sends transactional messages.

    TransactionProducer("order-pg", namesrv_addr="127.0.0.1:9876",
    transaction_listener=listener); the other arguments are Producer's."""

    def __init__(
        self,
        producer_group: str,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        transaction_listener: TransactionListener,
        **kwargs: Any,
    ) -> None:
        for name in ("execute_local_transaction", "check_local_transaction"):
            if not callable(getattr(transaction_listener, name, None)):
                raise TypeError(f"transaction_listener has no {name}(...) method")
        super().__init__(producer_group, namesrv_addr, **kwargs)
        self.transaction_listener = transaction_listener
        self._checks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await super().start()
        self.client.conn_request_handlers[RequestCode.CHECK_TRANSACTION_STATE] = self._on_check

    async def shutdown(self) -> None:
        for t in list(self._checks):
            t.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)
        await super().shutdown()

    async def send_message_in_transaction(
        self, msg: Message, arg: Any = None
    ) -> TransactionSendResult:
        """Send msg as a half message, run the local transaction, and tell
        the broker its outcome. Raises as send() does when the half message
        is not stored (the local transaction is then not run)."""
        result = await self.send_half_message(msg)
        remark = ""
        if result.send_status is SendStatus.SEND_OK:
            state, remark = await listener_state(
                self.transaction_listener.execute_local_transaction,
                msg,
                arg,
                what="execute_local_transaction",
            )
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        await self.end_transaction_or_log(result, state, remark, msg)
        return transaction_result(result, state)

    async def send_half_message(self, msg: Message) -> SendResult:
        """The first step: msg stored as a half message (TRAN_MSG, PGROUP;
        no delay level), invisible until end_transaction commits it."""
        self._check_running()
        if not isinstance(msg, Message):
            raise TypeError(f"expected a pyrmq.Message, got {type(msg).__name__}")
        msg.properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        msg.properties[PROPERTY_TRANSACTION_PREPARED] = "true"
        msg.properties[PROPERTY_PRODUCER_GROUP] = self.producer_group
        result = await self.send(msg)
        if result.transaction_id is None:
            uniq = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            result = dataclasses.replace(result, transaction_id=uniq)
        return result

    async def end_transaction_or_log(
        self,
        result: SendResult,
        state: LocalTransactionState,
        remark: str = "",
        msg: Message | None = None,
    ) -> None:
        """end_transaction; when it cannot be sent (the broker went away),
        logged, not raised, as Java's client does: the outcome is the local
        transaction's, and the broker's check-back asks for it again."""
        try:
            await self.end_transaction(result, state, remark, msg)
        except (RMQError, OSError) as e:
            log.warning(
                "transaction %s is %s, but END_TRANSACTION was not sent (%s); the broker will "
                "ask check_local_transaction",
                result.transaction_id,
                state.name,
                e,
            )

    async def end_transaction(
        self,
        result: SendResult,
        state: LocalTransactionState,
        remark: str = "",
        msg: Message | None = None,
    ) -> None:
        """END_TRANSACTION (oneway) for a half message sent by this producer
        (msg: it, for the EndTransaction trace record)."""
        addr = await self.client.find_broker_addr_or_refresh(
            result.message_queue.broker_name, result.message_queue.topic
        )
        if addr is None:
            raise ClientError(f"the broker {result.message_queue.broker_name} is not known")
        _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id)
        cmd = self._end_command(
            result.queue_offset,
            commit_log_offset,
            state,
            msg_id=result.msg_id,
            transaction_id=result.transaction_id or result.msg_id,
            from_check=False,
            remark=remark,
        )
        await self.client.remoting.invoke_oneway(addr, cmd)
        if msg is not None:
            self._trace_end(msg, result.msg_id, cmd, addr, state)

    def _trace_end(
        self,
        msg: Message,
        msg_id: str,
        cmd: RemotingCommand,
        addr: str,
        state: LocalTransactionState,
    ) -> None:
        """The EndTransaction trace record of an END_TRANSACTION sent."""
        if self.tracer is None:
            return
        props = msg.properties
        self.tracer.append(
            TraceRecord(
                "EndTransaction",
                msg_id,
                int(time.time() * 1000),
                DEFAULT_REGION,
                self.producer_group,
                msg.topic,
                props.get(PROPERTY_TAGS, ""),
                props.get(PROPERTY_KEYS, ""),
                addr,
                msg_type=TRANS_MSG_COMMIT,
                transaction_id=cmd.ext_fields["transactionId"],
                transaction_state=state.name,
                from_check=cmd.ext_fields["fromTransactionCheck"] == "true",
            )
        )

    def _end_command(
        self,
        table_offset: int,
        commit_log_offset: int,
        state: LocalTransactionState,
        *,
        msg_id: str,
        transaction_id: str,
        from_check: bool,
        remark: str,
    ) -> RemotingCommand:
        """EndTransactionRequestHeader, as the Java client sends it."""
        return RemotingCommand(
            RequestCode.END_TRANSACTION,
            {
                "producerGroup": self.producer_group,
                "tranStateTableOffset": str(table_offset),
                "commitLogOffset": str(commit_log_offset),
                "commitOrRollback": str(state.value),
                "fromTransactionCheck": "true" if from_check else "false",
                "msgId": msg_id,
                "transactionId": transaction_id,
            },
            remark=remark or None,
        )

    # -- check-back ------------------------------------------------------------------

    def _on_check(self, conn: Connection, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE from a broker: answered from a task."""
        task = asyncio.get_running_loop().create_task(
            self._answer_check(conn, cmd), name="pyrmq:producer:check"
        )
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)
        return None

    async def _answer_check(self, conn: Connection, cmd: RemotingCommand) -> None:
        f = cmd.ext_fields
        try:
            (rec,) = rmqcore.decode_records(cmd.body)
            table_offset = int(f["tranStateTableOffset"])
            commit_log_offset = int(f["commitLogOffset"])
        except (ValueError, KeyError, StoreError) as e:
            log.warning("a CHECK_TRANSACTION_STATE from %s is malformed: %s", conn.peer, e)
            return
        msg = MessageExt(rec)
        group = msg.properties.get(PROPERTY_PRODUCER_GROUP)
        if group != self.producer_group:
            log.warning(
                "a CHECK_TRANSACTION_STATE from %s is for group %s, not %s; not answered",
                conn.peer,
                group,
                self.producer_group,
            )
            return
        transaction_id = f.get("transactionId") or msg.unique_key or ""
        state, remark = await listener_state(
            self.transaction_listener.check_local_transaction, msg, what="check_local_transaction"
        )
        if conn.is_open:
            msg_id = msg.unique_key or f.get("msgId", "")
            end = self._end_command(
                table_offset,
                commit_log_offset,
                state,
                msg_id=msg_id,
                transaction_id=transaction_id,
                from_check=True,
                remark=remark,
            )
            conn.invoke_oneway(end)
            self._trace_end(msg, msg_id, end, conn.peer, state)
