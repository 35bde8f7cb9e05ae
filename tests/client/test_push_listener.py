"""How a PushConsumer runs its listener, against a real NameServer +
Broker (LocalCluster, TCP on 127.0.0.1): a coroutine function on the event
loop, a plain function in the consume pool; each call its own task,
started in the pull's read callback (an eager task, on 3.11 too) unless
the loop has a task factory of its own.

Every wait is a bounded poll (`wait_until`); nothing is timed."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from typing import Any

from pyrmq import ConsumeConcurrentlyStatus, Message, MessageExt, MessageQueue, Producer

from ._push import FIRST, cluster, owned, push, running, send_bodies, started_on, wait_until


def test_coroutine_listener_runs_on_the_loop_and_function_listener_in_a_pool(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            coro_threads: list[str] = []
            func_threads: list[str] = []
            coro_got: list[str] = []
            func_got: list[str] = []
            lock = threading.Lock()

            async def coro_listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
                coro_threads.append(threading.current_thread().name)
                coro_got.extend(m.body.decode() for m in msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            def func_listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
                with lock:
                    func_threads.append(threading.current_thread().name)
                    func_got.extend(m.body.decode() for m in msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            c1 = push(c.namesrv_addr, "G_coro", "KindT", coro_listener, consume_from_where=FIRST)
            c2 = push(c.namesrv_addr, "G_func", "KindT", func_listener, consume_from_where=FIRST)
            bodies = [f"m{i}" for i in range(20)]
            async with running(producer):
                await send_bodies(producer, "KindT", bodies)
                async with running(c1, c2):
                    await wait_until(
                        lambda: len(coro_got) >= 20 and len(func_got) >= 20, "both groups"
                    )
            assert sorted(coro_got) == sorted(bodies)
            assert sorted(func_got) == sorted(bodies)
            here = threading.current_thread().name
            assert set(coro_threads) == {here}
            assert here not in func_threads
            assert all(n.startswith("pyrmq-consume-G_func") for n in func_threads), func_threads

    arun(main(), timeout=30)


def _called_from(name: str) -> bool:
    """Whether a function called `name` is on the calling thread's stack."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == name:
            return True
        f = f.f_back
    return False


def test_coroutine_listener_runs_as_its_own_task_whether_it_waits_or_not(arun, tmp_path):
    """The listener of a pull's messages starts inside the read callback
    that decoded them (an eager task, on every Python); it runs as a task of
    its own (asyncio.timeout works,
    current_task is named), a listener that waits and one that does not
    both get every message once, and the offsets of both are committed."""

    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            got: list[str] = []
            tasks: set[str] = set()
            in_read_callback: list[bool] = []

            async def listener(msgs: list[MessageExt], ctx: Any) -> None:
                in_read_callback.append(_called_from("_pulled"))
                task = asyncio.current_task()
                assert task is not None
                tasks.add(task.get_name())
                async with asyncio.timeout(5):
                    for m in msgs:
                        if int(m.body) % 2:
                            await asyncio.sleep(0.001)  # suspends: the rest runs later
                        got.append(m.body.decode())

            bodies = [str(i) for i in range(40)]
            consumer = push(c.namesrv_addr, "G_eager", "EagerT", listener, consume_from_where=FIRST)
            async with running(producer):
                await send_bodies(producer, "EagerT", bodies[:1])
                async with running(consumer):
                    await wait_until(started_on(consumer, "EagerT", 4), "the pulls to start")
                    for b in bodies[1:]:  # one at a time: each woken pull brings one
                        await producer.send(Message("EagerT", b.encode()))
                    await wait_until(lambda: len(got) >= len(bodies), "every message")
                    await asyncio.sleep(0.2)  # nothing comes twice
                    ends = {
                        mq: await producer.client.api.get_max_offset(c.broker_addr, mq)
                        for mq in owned(consumer, "EagerT")
                    }
                    table = consumer.offset_store.clone_offset_table("EagerT")
            assert sorted(got, key=int) == bodies
            assert tasks == {"pyrmq:consumer:consume"}
            assert table == ends
            # every pull answer is handed over in _pulled, the read callback
            assert in_read_callback and all(in_read_callback), in_read_callback

    arun(main(), timeout=60)


def test_the_next_pull_leaves_from_the_answers_read_callback_unless_held_back(arun, tmp_path):
    """After a pull's answer, the next pull of its queue is sent from the
    read callback that handed the messages over (PushConsumer._pull_ahead),
    not a loop turn later by the pull loop: the loop sends only each
    queue's first pull. While the consumer is suspended an answer sends
    none; the loop pulls again once it is resumed."""

    async def main() -> None:
        async with cluster(tmp_path) as c:
            producer = Producer("pg", c.namesrv_addr)
            got: list[str] = []

            async def listener(msgs: list[MessageExt], ctx: Any) -> None:
                got.extend(m.body.decode() for m in msgs)

            consumer = push(c.namesrv_addr, "G_ahead", "AheadT", listener, consume_from_where=FIRST)
            #: (queue, sent from a pull answer's read callback) of every pull
            sent: list[tuple[MessageQueue, bool]] = []
            send_pull = consumer._send_pull

            def watched(conn: Any, addr: str, puller: Any, offset: int) -> Any:
                sent.append((puller.mq, _called_from("_pulled")))
                return send_pull(conn, addr, puller, offset)

            consumer._send_pull = watched  # type: ignore[method-assign]
            async with running(producer):
                await send_bodies(producer, "AheadT", ["m0"])
                async with running(consumer):
                    await wait_until(started_on(consumer, "AheadT", 4), "the pulls to start")
                    for i in range(1, 21):  # one at a time: each woken pull brings one
                        await producer.send(Message("AheadT", f"m{i}".encode()))
                    await wait_until(lambda: len(got) >= 21, "every message")
                    queues = owned(consumer, "AheadT")
                    mine = [(mq, ahead) for mq, ahead in sent if mq.topic == "AheadT"]
                    assert Counter(mq for mq, ahead in mine if not ahead) == Counter(queues)
                    assert sum(ahead for _, ahead in mine) >= 20, mine

                    consumer.suspend()
                    before = len(sent)
                    await producer.send(Message("AheadT", b"while-suspended"))
                    await wait_until(lambda: "while-suspended" in got, "the held pull's answer")
                    await asyncio.sleep(0.3)  # the loop's turn: it waits, sends nothing
                    assert len(sent) == before, sent[before:]
                    consumer.resume()
                    await wait_until(lambda: len(sent) > before, "a pull after resume()")
                    assert not sent[before][1], "the loop sends the first pull after resume()"
                    await producer.send(Message("AheadT", b"after-resume"))
                    await wait_until(lambda: "after-resume" in got, "a message after resume()")
            assert sorted(got) == sorted(
                [f"m{i}" for i in range(21)] + ["while-suspended", "after-resume"]
            )

    arun(main(), timeout=60)


def test_a_loop_task_factory_makes_the_consume_tasks(arun, tmp_path):
    """A loop with a task factory of its own (context propagation,
    monitoring) gets the consume tasks made by it on every Python, so they
    start a loop turn later, not eagerly."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        made: list[str] = []

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
            made.append(getattr(coro, "__qualname__", ""))
            return asyncio.Task(coro, loop=loop, **kw)

        loop.set_task_factory(factory)
        try:
            async with cluster(tmp_path) as c:
                producer = Producer("pg", c.namesrv_addr)
                got: list[str] = []
                in_read_callback: list[bool] = []

                async def listener(msgs: list[MessageExt], ctx: Any) -> None:
                    in_read_callback.append(_called_from("_pulled"))
                    got.extend(m.body.decode() for m in msgs)

                bodies = [f"m{i}" for i in range(10)]
                consumer = push(c.namesrv_addr, "G_fac", "FacT", listener, consume_from_where=FIRST)
                async with running(producer):
                    await send_bodies(producer, "FacT", bodies)
                    async with running(consumer):
                        await wait_until(lambda: len(got) >= len(bodies), "every message")
            assert sorted(got) == bodies
            assert in_read_callback and not any(in_read_callback), in_read_callback
            assert any(q.endswith("ConsumeMessageConcurrentlyService._consume") for q in made), made
        finally:
            loop.set_task_factory(None)

    arun(main(), timeout=60)
