"""NATS JetStream with file storage, driven by nats-py (asyncio).

- awaited: ``await js.publish(subject, body)`` (waits for the PubAck);
- pipelined: ``js.publish_async`` with the budget's window of unacknowledged
  publishes (JetStream 2.9 has no batch publish, so there is no batched case);
- consume: a durable pull consumer, ``fetch(consume_batch)`` in a loop, the
  last message of each fetch acknowledged (AckPolicy.ALL acknowledges
  everything up to it, like a committed offset);
- e2e: a push subscription (``js.subscribe`` with a callback, acked after
  the callback), messages published with publish_async at a fixed rate.

Durability: JetStream's file store hands every message to the OS at once and
fsyncs on an interval (2 min by default in 2.9; ``sync_interval`` and
``always`` arrived in 2.10), so it compares with pyrmq's ASYNC_FLUSH.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench._e2e import Budget, ConsumeClock, Flow, LatencyProbe


class NatsAdapter:
    """bench._e2e.Adapter for nats-py's JetStream context."""

    def __init__(self, nc: Any, js: Any, client: str) -> None:
        self.nc = nc
        self.js = js
        self.client = client
        self._n = 0

    @classmethod
    async def connect(cls, host: str, port: int) -> NatsAdapter:
        import nats

        nc = await nats.connect(f"nats://{host}:{port}", max_reconnect_attempts=0)
        return cls(nc, nc.jetstream(), f"nats-py {_version('nats-py')} (asyncio)")

    async def close(self) -> None:
        await self.nc.close()

    async def new_stream(self, tag: str) -> str:
        from nats.js.api import StorageType

        self._n += 1
        name = f"B{tag}n{self._n}"
        await self.js.add_stream(name=name, subjects=[f"{name}.m"], storage=StorageType.FILE)
        return name

    async def drop_stream(self, stream: str) -> None:
        await self.js.delete_stream(stream)

    def awaited_send(self, stream: str, body: bytes) -> Callable[[], Awaitable[Any]]:
        subject, publish = f"{stream}.m", self.js.publish

        async def send() -> None:
            await publish(subject, body)

        return send

    def pipelined_submit(
        self, stream: str, body: bytes, batch: int
    ) -> tuple[Callable[[Flow], Awaitable[None]], int]:
        subject, publish_async = f"{stream}.m", self.js.publish_async

        async def submit(flow: Flow) -> None:
            flow.track(await publish_async(subject, body))

        return submit, 1

    def batched_submit(
        self, stream: str, body: bytes, batch: int
    ) -> Callable[[Flow], Awaitable[None]] | None:
        return None

    def consumers(self) -> dict[str, Callable[[str, int, Budget], Awaitable[ConsumeClock]]]:
        return {"consume": self.consume}

    async def consume(self, stream: str, n: int, budget: Budget) -> ConsumeClock:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig

        cfg = ConsumerConfig(ack_policy=AckPolicy.ALL, max_ack_pending=-1)
        sub = await self.js.pull_subscribe(
            f"{stream}.m", durable="bench", stream=stream, config=cfg
        )
        clock = ConsumeClock()
        end = time.perf_counter() + budget.consume_seconds
        try:
            while clock.n < n and time.perf_counter() < end:
                try:
                    msgs = await sub.fetch(min(budget.consume_batch, n - clock.n), timeout=1.0)
                except NatsTimeout:
                    continue
                await msgs[-1].ack()
                clock.saw(len(msgs))
        finally:
            await sub.unsubscribe()
        return clock

    async def listen(self, stream: str, probe: LatencyProbe) -> Callable[[], Awaitable[None]]:
        from nats.js.api import DeliverPolicy

        async def on_msg(msg: Any) -> None:
            probe.saw(msg.data)

        sub = await self.js.subscribe(
            f"{stream}.m", stream=stream, cb=on_msg, deliver_policy=DeliverPolicy.NEW
        )

        async def stop() -> None:
            await sub.unsubscribe()

        return stop

    def fire(self, stream: str, flow: Flow) -> Callable[[bytes], Awaitable[None]]:
        subject, publish_async = f"{stream}.m", self.js.publish_async

        async def send(body: bytes) -> None:
            flow.track(await publish_async(subject, body))

        return send


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


async def open_adapter(host: str, port: int) -> NatsAdapter:
    """Connect, retrying while the server finishes starting JetStream."""
    deadline = time.monotonic() + 20
    while True:
        a = await NatsAdapter.connect(host, port)
        try:
            await a.js.account_info()
            return a
        except Exception:
            await a.close()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
