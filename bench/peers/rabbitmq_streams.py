"""RabbitMQ streams (the stream plugin's binary protocol), driven by rstream.

- awaited: ``await producer.send_wait(stream, body)`` (waits for the
  publish confirm);
- pipelined: ``send_batch(stream, [body])`` per message with a confirm
  callback, the budget's window of unconfirmed messages. (rstream's
  ``send`` buffers messages and publishes them from a timer every 0.5 s, so
  a window of waiting sends would mostly wait for that timer);
- batched: ``send_batch(stream, [body] * batch)`` with a confirm callback;
- consume: a named ``Consumer.subscribe`` from the first offset; the offset
  is stored on the server (``store_offset``) every consume_batch messages;
- e2e: a subscription from the next offset, ``send_batch([body])`` at a
  fixed rate.

Durability: a stream confirms a publish once its (single-node) log has it;
osiris does not fsync per message, so it compares with pyrmq's ASYNC_FLUSH.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench._e2e import Budget, ConsumeClock, Flow, LatencyProbe

USER = PASSWORD = "guest"


class RabbitAdapter:
    """bench._e2e.Adapter for rstream's Producer and Consumer."""

    def __init__(self, host: str, port: int, producer: Any, client: str) -> None:
        self.host = host
        self.port = port
        self.producer = producer
        self.client = client
        self._n = 0
        self._flow: Flow | None = None

    @classmethod
    async def connect(cls, host: str, port: int, timeout: float = 30.0) -> RabbitAdapter:
        from rstream import Producer

        deadline = time.monotonic() + timeout
        while True:
            p = Producer(host, port, username=USER, password=PASSWORD)
            try:
                await p.start()
                break
            except Exception:
                # the stream port opens a moment before the broker accepts sessions
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)
        return cls(host, port, p, f"rstream {_version('rstream')} (asyncio)")

    async def close(self) -> None:
        await self.producer.close()

    async def new_stream(self, tag: str) -> str:
        self._n += 1
        name = f"b-{tag}-{self._n}"
        await self.producer.create_stream(name, exists_ok=True)
        return name

    async def drop_stream(self, stream: str) -> None:
        await self.producer.delete_stream(stream, missing_ok=True)

    def _confirm(self, status: Any) -> None:
        if self._flow is not None:
            self._flow.ack(1, bool(status.is_confirmed))

    def awaited_send(self, stream: str, body: bytes) -> Callable[[], Awaitable[Any]]:
        send_wait = self.producer.send_wait

        async def send() -> None:
            await send_wait(stream, body)

        return send

    def pipelined_submit(
        self, stream: str, body: bytes, batch: int
    ) -> tuple[Callable[[Flow], Awaitable[None]], int]:
        return self._batches(stream, [body]), 1

    def batched_submit(
        self, stream: str, body: bytes, batch: int
    ) -> Callable[[Flow], Awaitable[None]] | None:
        return self._batches(stream, [body] * batch)

    def _batches(self, stream: str, msgs: list[bytes]) -> Callable[[Flow], Awaitable[None]]:
        send_batch, confirm = self.producer.send_batch, self._confirm

        async def submit(flow: Flow) -> None:
            self._flow = flow  # one confirm callback object for every batch
            await send_batch(stream, msgs, on_publish_confirm=confirm)

        return submit

    def consumers(self) -> dict[str, Callable[[str, int, Budget], Awaitable[ConsumeClock]]]:
        return {"consume": self.consume}

    async def consume(self, stream: str, n: int, budget: Budget) -> ConsumeClock:
        from rstream import (
            Consumer,
            ConsumerOffsetSpecification,
            OffsetType,
        )

        clock = ConsumeClock()
        done = asyncio.Event()
        every = budget.consume_batch
        c = Consumer(self.host, self.port, username=USER, password=PASSWORD)

        async def on_msg(msg: Any, ctx: Any) -> None:
            got = clock.n + 1
            if got % every == 0 or got >= n:
                await c.store_offset(stream, "bench", ctx.offset)
            clock.saw()
            if got >= n:
                done.set()

        await c.start()
        try:
            await c.subscribe(
                stream,
                on_msg,
                subscriber_name="bench",
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), budget.consume_seconds)
        finally:
            await c.close()
        return clock

    async def listen(self, stream: str, probe: LatencyProbe) -> Callable[[], Awaitable[None]]:
        from rstream import (
            Consumer,
            ConsumerOffsetSpecification,
            OffsetType,
        )

        c = Consumer(self.host, self.port, username=USER, password=PASSWORD)

        async def on_msg(msg: Any, ctx: Any) -> None:
            probe.saw(bytes(msg))

        await c.start()
        await c.subscribe(
            stream, on_msg, offset_specification=ConsumerOffsetSpecification(OffsetType.NEXT, None)
        )

        async def stop() -> None:
            await c.close()

        return stop

    def fire(self, stream: str, flow: Flow) -> Callable[[bytes], Awaitable[None]]:
        send_batch, confirm = self.producer.send_batch, self._confirm

        async def send(body: bytes) -> None:
            self._flow = flow
            await send_batch(stream, [body], on_publish_confirm=confirm)

        return send


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"
