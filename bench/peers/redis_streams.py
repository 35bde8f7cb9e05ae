"""Redis Streams with the AOF on, driven by redis-py (``redis.asyncio``).

- awaited: ``await r.xadd(key, {"b": body})``;
- pipelined: non-transactional pipelines of `batch` XADDs, as many in flight
  (each on its own pooled connection) as the budget's window allows: XADD
  takes one entry, so a pipeline is Redis's batch and there is no separate
  batched case;
- consume: a consumer group from the stream's start, ``XREADGROUP COUNT
  consume_batch`` in a loop, each read's ids acknowledged with one XACK;
- e2e: ``XREADGROUP BLOCK`` (COUNT 32) + XACK in a loop on its own
  connection, XADDs started at a fixed rate.

Durability: ``appendfsync everysec`` (fsync of the AOF once a second;
compares with pyrmq's ASYNC_FLUSH) or ``always`` (an fsync before the
replies of each event-loop pass; compares with SYNC_FLUSH).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench._e2e import Budget, ConsumeClock, Flow, LatencyProbe


class RedisAdapter:
    """bench._e2e.Adapter for redis-py's asyncio client."""

    def __init__(self, r: Any, client: str) -> None:
        self.r = r
        self.client = client
        self._n = 0

    @classmethod
    async def connect(cls, host: str, port: int) -> RedisAdapter:
        import redis
        import redis.asyncio as aredis

        r = aredis.Redis(host=host, port=port)
        await r.ping()
        return cls(r, f"redis-py {redis.__version__} (asyncio)")

    async def close(self) -> None:
        await self.r.aclose()

    async def new_stream(self, tag: str) -> str:
        self._n += 1
        return f"b:{tag}:{self._n}"

    async def drop_stream(self, stream: str) -> None:
        await self.r.delete(stream)

    def awaited_send(self, stream: str, body: bytes) -> Callable[[], Awaitable[Any]]:
        xadd, fields = self.r.xadd, {"b": body}

        async def send() -> None:
            await xadd(stream, fields)

        return send

    def pipelined_submit(
        self, stream: str, body: bytes, batch: int
    ) -> tuple[Callable[[Flow], Awaitable[None]], int]:
        return self._pipeline(stream, body, batch), batch

    def batched_submit(
        self, stream: str, body: bytes, batch: int
    ) -> Callable[[Flow], Awaitable[None]] | None:
        return None

    def _pipeline(self, stream: str, body: bytes, per: int) -> Callable[[Flow], Awaitable[None]]:
        """Each submit starts one pipeline of `per` XADDs."""
        r, fields = self.r, {"b": body}

        async def submit(flow: Flow) -> None:
            p = r.pipeline(transaction=False)
            for _ in range(per):
                p.xadd(stream, fields)
            flow.track(asyncio.ensure_future(p.execute()), per)

        return submit

    def consumers(self) -> dict[str, Callable[[str, int, Budget], Awaitable[ConsumeClock]]]:
        return {"consume": self.consume}

    async def consume(self, stream: str, n: int, budget: Budget) -> ConsumeClock:
        r = self.r
        await r.xgroup_create(stream, "bench", id="0")
        clock = ConsumeClock()
        end = time.perf_counter() + budget.consume_seconds
        while clock.n < n and time.perf_counter() < end:
            res = await r.xreadgroup("bench", "c1", {stream: ">"}, count=budget.consume_batch)
            if not res:
                continue
            ids = [mid for mid, _ in res[0][1]]
            await r.xack(stream, "bench", *ids)
            clock.saw(len(ids))
        return clock

    async def listen(self, stream: str, probe: LatencyProbe) -> Callable[[], Awaitable[None]]:
        r = self.r
        await r.xgroup_create(stream, "lat", id="$", mkstream=True)
        stopping = False

        async def loop() -> None:
            while not stopping:
                res = await r.xreadgroup("lat", "c1", {stream: ">"}, count=32, block=100)
                if not res:
                    continue
                entries = res[0][1]
                for _, fields in entries:
                    probe.saw(fields[b"b"])
                await r.xack(stream, "lat", *[mid for mid, _ in entries])

        task = asyncio.ensure_future(loop())

        async def stop() -> None:
            nonlocal stopping
            stopping = True
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), 2.0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        return stop

    def fire(self, stream: str, flow: Flow) -> Callable[[bytes], Awaitable[None]]:
        xadd = self.r.xadd

        async def send(body: bytes) -> None:
            flow.track(asyncio.ensure_future(xadd(stream, {"b": body})))

        return send
