"""What the send processors answer with, shared by the Python path
(send.py) and the C path's driver (send_fast.py): the client's BORNHOST,
and the SUCCESS answer turned into what its flush and replication waits
decided."""

from __future__ import annotations

import asyncio

from pyrmq.remoting import RemotingCommand, ResponseCode
from pyrmq.remoting.connection import Connection
from pyrmq.storage.message_store import encode_host

#: the remark of SLAVE_NOT_AVAILABLE: a SYNC_MASTER stored a send with no
#: slave near enough to wait for
SLAVE_NOT_AVAILABLE_REMARK = "no slave is connected or it is too far behind"


def born_host_of(conn: Connection) -> bytes:
    """The client's address as stored in BORNHOST (cached per connection)."""
    bh = conn.attrs.get("born_host")
    if bh is None:
        host, _, port = conn.peer.rpartition(":")
        try:
            bh = encode_host(host, int(port))
        except ValueError:
            bh = encode_host("0.0.0.0", 0)
        conn.attrs["born_host"] = bh
    return bh


def settled_ok(f: asyncio.Future[bool]) -> bool:
    return f.done() and not f.cancelled() and f.exception() is None and f.result()


def durable_answer(
    answer: RemotingCommand,
    flush: asyncio.Future[bool] | None,
    replica: asyncio.Future[bool] | None,
) -> RemotingCommand:
    """The send answer (made as SUCCESS) once the group commit and the
    replication wait have decided: SUCCESS when durable (and, on a
    SYNC_MASTER, held by a slave); FLUSH_DISK_TIMEOUT or FLUSH_SLAVE_TIMEOUT
    when syncFlushTimeout passed first (the message is stored and will be
    flushed and copied); SYSTEM_ERROR if the flush failed. Both timing out
    answers the disk's."""
    for f in (flush, replica):
        if f is None:
            continue
        if f.cancelled():
            answer.code, answer.remark = ResponseCode.SYSTEM_ERROR, "the broker is shutting down"
            answer.ext_fields = {}
            return answer
        if (exc := f.exception()) is not None:
            answer.code, answer.remark = ResponseCode.SYSTEM_ERROR, f"flush to disk failed: {exc}"
            answer.ext_fields = {}
            return answer
    if flush is not None and not flush.result():
        answer.code, answer.remark = ResponseCode.FLUSH_DISK_TIMEOUT, "the flush to disk timed out"
    elif replica is not None and not replica.result():
        answer.code = ResponseCode.FLUSH_SLAVE_TIMEOUT
        answer.remark = "the slave did not confirm the message within syncFlushTimeout"
    return answer
