"""The first attempt of a send on the producer's pipelined hot path.

When the route, the broker's address and its connection are at hand, a
send's first attempt is a request with a response callback: no coroutine,
task or timer. FirstAttempt is that callback. It is one object with slots,
not a closure: a closure over a dozen variables costs a cell object per
variable, each tracked by the garbage collector, for every message of a
pipelined window (issue 18 measured the collector at about a tenth of the
client's time). A failed attempt hands the send to Producer._send, which
retries with a coroutine as awaited sends do."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING

from pyrmq.common.errors import BrokerError, RemotingError
from pyrmq.common.message import MessageQueue
from pyrmq.common.results import SendResult, SendStatus
from pyrmq.producer.prepare import SendJob
from pyrmq.remoting import RemotingCommand, ResponseCode

if TYPE_CHECKING:
    from pyrmq.producer.producer import Producer, SendCallback

log = logging.getLogger("pyrmq.producer")


def route_suspect(e: BaseException) -> bool:
    """True when a failed send may come from a stale route (broker gone,
    topic moved): look the route up again. SYSTEM_BUSY says the broker is
    there and overloaded: asking the name server again for each refused
    send would only carry the overload over to it."""
    if isinstance(e, BrokerError):
        return e.code != ResponseCode.SYSTEM_BUSY
    return isinstance(e, RemotingError)


class FirstAttempt:
    """Settles `out` (and calls `callback`) from the answer to the first
    request of a send, or starts the retries."""

    __slots__ = (
        "addr",
        "born",
        "callback",
        "counted",
        "job",
        "out",
        "producer",
        "retries",
        "t0",
        "target",
        "timeout",
    )

    def __init__(
        self,
        producer: Producer,
        job: SendJob,
        out: asyncio.Future[SendResult],
        callback: SendCallback | None,
        counted: bool,
        retries: int,
        timeout: float,
        target: MessageQueue,
        addr: str,
        born: int,
    ) -> None:
        self.producer = producer
        self.job = job
        self.out = out
        self.callback = callback
        self.counted = counted
        self.retries = retries
        self.timeout = timeout
        self.target = target
        self.addr = addr
        self.born = born
        self.t0 = time.monotonic()  # what the event loop's time() reads

    def __call__(self, resp: RemotingCommand | None, exc: BaseException | None) -> None:
        p = self.producer
        target = self.target
        elapsed = time.monotonic() - self.t0
        error: BaseException | None = exc
        if error is None:
            try:
                result = p.client.api.send_result(resp, target, self.job.uniq, self.addr)  # type: ignore[arg-type]
            except (RemotingError, BrokerError) as e:
                error = e
            except BaseException as e:  # a bug: surface it to the caller
                p._settle(self.out, self.callback, self.counted, None, e)
                return
        retries = self.retries
        if error is not None:
            p.fault_strategy.update_fault_item(target.broker_name, int(elapsed * 1000), True)
            if (isinstance(error, BrokerError) and not error.retriable) or retries <= 0:
                p._settle(self.out, self.callback, self.counted, None, error)
                return
            log.info("send to %s failed (attempt 1 of %d): %s", target, retries + 1, error)
            if route_suspect(error):
                p._check_route_soon(self.job.topic)
        else:
            p.fault_strategy.update_fault_item(target.broker_name, int(elapsed * 1000), False)
            if p.tracer is not None and not self.job.batch:
                p.tracer.append_pub(self.job.msg, result, self.addr, self.born, int(elapsed * 1000))
            if (
                result.send_status is SendStatus.SEND_OK
                or not p.retry_another_broker_when_not_store_ok
                or retries <= 0
            ):
                p._settle(self.out, self.callback, self.counted, result, None)
                return
        left = self.timeout - elapsed
        if left <= 0:
            err = error or RemotingError(f"sending to {self.job.topic} timed out")
            p._settle(self.out, self.callback, self.counted, None, err)
            return
        nxt = asyncio.ensure_future(
            p._send(self.job, left, retries - 1, target.broker_name, self.born, error)
        )
        nxt.add_done_callback(
            functools.partial(p._settle_from, self.out, self.callback, self.counted)
        )
