"""What the consumer tests share: a LocalCluster (a real NameServer
and Broker on 127.0.0.1), starting clients in order, bounded waits, sends,
and a consumer built around a listener."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from pyrmq import ConsumeFromWhere, Message, MessageExt, MessageQueue, Producer, PushConsumer
from pyrmq.client.api import MQClientAPI
from pyrmq.testing import LocalCluster

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
TIMESTAMP = ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
#: every delay level 1 s, so a retry comes back quickly
SHORT_DELAY_LEVELS = " ".join(["1s"] * 18)
#: The heartbeat that creates %RETRY%<group> is answered before the broker
#: has re-registered with the name server, so a new group's first rebalance
#: can miss the retry queue; a short rebalance interval bounds that wait in
#: the retry tests (the default is 20 s).
RETRY_REBALANCE_INTERVAL = 1.0


# -- helpers ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def cluster(tmp_path: Any, **settings: Any) -> AsyncIterator[LocalCluster]:
    c = LocalCluster(str(tmp_path / "store"), **settings)
    await c.start()
    try:
        yield c
    finally:
        await c.shutdown()


@contextlib.asynccontextmanager
async def running(*clients: Any) -> AsyncIterator[None]:
    """Start producers/consumers in order; shut them down in reverse."""
    async with contextlib.AsyncExitStack() as stack:
        for cl in clients:
            await cl.start()
            stack.push_async_callback(cl.shutdown)
        yield


async def wait_until(pred: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def send_bodies(
    producer: Producer,
    topic: str,
    bodies: Iterable[str],
    mq: MessageQueue | None = None,
    *,
    tags: str | None = None,
) -> None:
    """Send each body (to mq, or round robin), then wait for the topic's
    route."""
    for b in bodies:
        await producer.send(Message(topic, b.encode(), tags=tags), mq=mq)
    await wait_routed(producer.client.api, topic)


async def wait_routed(api: MQClientAPI, topic: str, timeout: float = 5.0) -> None:
    """Wait until the name server routes an auto-created topic: the broker
    registers it a moment after the first send, and a consumer that looks
    before then waits for its next route refresh."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await api.get_topic_route(topic) is None:
        if loop.time() > deadline:
            raise AssertionError(f"no route for {topic} after {timeout}s")
        await asyncio.sleep(0.01)


def queue0(topic: str) -> MessageQueue:
    """Tests that want a single busy queue send everything to queue 0 (an
    auto-created topic has 4 queues; the others stay empty)."""
    return MessageQueue(topic, "broker-a", 0)


def owned(consumer: PushConsumer, topic: str) -> set[MessageQueue]:
    return {mq for mq in consumer.rebalance.process_queue_table if mq.topic == topic}


def started_on(consumer: PushConsumer, topic: str, n: int) -> Callable[[], bool]:
    """True once n queues of topic have a start offset (their pulls run)."""
    return lambda: len(consumer.offset_store.clone_offset_table(topic)) >= n


class Collector:
    """Records every delivery; `listen` is the (coroutine) listener."""

    def __init__(self) -> None:
        self.msgs: list[MessageExt] = []

    async def listen(self, msgs: list[MessageExt], ctx: Any) -> None:
        self.msgs.extend(msgs)

    @property
    def bodies(self) -> list[str]:
        return [m.body.decode() for m in self.msgs]

    def count(self) -> int:
        return len(self.msgs)


def push(namesrv: str, group: str, topic: str, listener: Any, **kw: Any) -> PushConsumer:
    expr = kw.pop("sub_expression", "*")
    orderly = kw.pop("orderly", False)
    c = PushConsumer(group, namesrv, **kw)
    c.subscribe(topic, expr)
    if isinstance(listener, Collector):
        listener = listener.listen
    c.register_message_listener(listener, orderly=orderly)
    return c
