"""Running the user's listener (ConsumeMessageConcurrentlyService,
ConsumeMessageOrderlyService).

A listener is a plain function, run in a bounded thread pool (the only
threads of the consumer), or a coroutine function, awaited on the loop; at
most consume_thread_max run at once either way. It returns a status (None
counts as success) or raises (counted as RECONSUME_LATER /
SUSPEND_CURRENT_QUEUE_A_MOMENT).

Concurrently: batches of consume_message_batch_max_size run in parallel;
failed messages of a clustering group go back to the broker
(CONSUMER_SEND_MSG_BACK: %RETRY%<group> at a delay level, the dead-letter
queue after max_reconsume_times) and, when that fails, are redelivered
locally 5 s later. Orderly: one batch at a time per queue, only while this
consumer holds the queue's broker lock; a failed batch is retried locally
after a pause, and a message past max_reconsume_times goes to the
dead-letter queue."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyrmq.common.aio import start_eager
from pyrmq.common.message import (
    PROPERTY_CONSUME_START_TIMESTAMP,
    PROPERTY_RETRY_TOPIC,
    MessageExt,
    MessageQueue,
)
from pyrmq.common.trace import (
    CONSUME_EXCEPTION,
    CONSUME_FAILED,
    CONSUME_RETURN_NULL,
    CONSUME_SUCCESS,
    sub_after,
    sub_before,
)
from pyrmq.consumer.process_queue import ProcessQueue
from pyrmq.consumer.types import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageModel,
)

if TYPE_CHECKING:
    from pyrmq.consumer.push_consumer import PushConsumer

log = logging.getLogger("pyrmq.consumer")

#: local redelivery delay when a send-back failed (submitConsumeRequestLater)
LOCAL_RETRY_DELAY = 5.0
#: pause before trying a lost orderly lock again
LOCK_RETRY_DELAY = 0.1

Listener = Callable[[list[MessageExt], Any], Any]


#: listener answers that consumed the messages (None counts: CONSUME_SUCCESS)
_SUCCESS = (
    None,
    ConsumeConcurrentlyStatus.CONSUME_SUCCESS,
    ConsumeOrderlyStatus.SUCCESS,
)


class _ListenerRunner:
    def __init__(self, consumer: PushConsumer, listener: Listener) -> None:
        self.consumer = consumer
        self.listener = listener
        self.is_coroutine = inspect.iscoroutinefunction(listener)
        n = consumer.consume_thread_max
        self.semaphore = asyncio.Semaphore(n)
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None
        if not self.is_coroutine:
            self.executor = concurrent.futures.ThreadPoolExecutor(
                n, thread_name_prefix=f"pyrmq-consume-{consumer.consumer_group}"
            )
        self.tasks: set[asyncio.Task[Any]] = set()

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        """Messages from %RETRY%<group> show their original topic."""
        retry = self.consumer.retry_topic
        now = str(int(time.time() * 1000))
        for m in msgs:
            if m.topic == retry:
                real = m.properties.get(PROPERTY_RETRY_TOPIC)
                if real:
                    m.topic = real
            m.properties[PROPERTY_CONSUME_START_TIMESTAMP] = now

    async def call(self, msgs: list[MessageExt], ctx: Any) -> Any:
        tracer = self.consumer.tracer
        if tracer is None:
            return await self._call(msgs, ctx)
        before = sub_before(self.consumer.consumer_group, msgs)
        for r in before:
            tracer.append(r)
        ok, code = False, CONSUME_EXCEPTION
        try:
            result = await self._call(msgs, ctx)
            ok = result in _SUCCESS
            code = (
                CONSUME_RETURN_NULL if result is None else CONSUME_SUCCESS if ok else CONSUME_FAILED
            )
            return result
        finally:
            for r in sub_after(before, ok, code):
                tracer.append(r)

    async def _call(self, msgs: list[MessageExt], ctx: Any) -> Any:
        async with self.semaphore:
            if self.is_coroutine:
                return await self.listener(msgs, ctx)
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self.executor, self.listener, msgs, ctx)
            if inspect.isawaitable(result):
                result = await result
            return result

    async def consume_directly(self, msg: MessageExt, broker_name: str) -> dict[str, Any]:
        """Consume one message outside the queues (CONSUME_MESSAGE_DIRECTLY,
        ConsumeMessage*Service.consumeMessageDirectly): the listener's
        verdict as ConsumeMessageDirectlyResult; nothing is retried or
        committed whatever it says."""
        orderly = isinstance(self, ConsumeMessageOrderlyService)
        mq = MessageQueue(msg.topic, broker_name, msg.queue_id)
        ctx: Any = ConsumeOrderlyContext(mq) if orderly else ConsumeConcurrentlyContext(mq)
        self.reset_retry_topic([msg])
        started = time.monotonic()
        remark = None
        try:
            status = await self._call([msg], ctx)
            if status is None:
                result = "CR_RETURN_NULL"
            elif status in _SUCCESS:
                result = "CR_SUCCESS"
            else:
                result = "CR_LATER"
        except Exception as e:
            result, remark = "CR_THROW_EXCEPTION", f"{type(e).__name__}: {e}"
        out: dict[str, Any] = {
            "autoCommit": bool(getattr(ctx, "auto_commit", True)),
            "consumeResult": result,
            "order": orderly,
            "spentTimeMills": int((time.monotonic() - started) * 1000),
        }
        if remark is not None:
            out["remark"] = remark
        return out

    def spawn(self, coro: Any, name: str) -> None:
        """The listener's messages go to it at once: the task runs up to its
        first wait here, in the pull's read callback, not a loop turn later
        (~40-100 µs of produce-to-consume at 1,000 msgs/s: bench/README.md,
        "Produce to consume")."""
        task = start_eager(coro, name)
        if task.done():  # ran to its end eagerly
            self._done(task)
            return
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    async def drain(self, timeout: float) -> bool:
        """Wait for running consumptions; True when all finished in time."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.tasks:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            await asyncio.wait(set(self.tasks), timeout=left)
        return True

    async def shutdown(self, timeout: float) -> bool:
        drained = await self.drain(timeout)
        for t in list(self.tasks):
            t.cancel()
        for t in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
        return drained


class ConsumeMessageConcurrentlyService(_ListenerRunner):
    def submit_consume_request(
        self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue
    ) -> None:
        size = self.consumer.consume_message_batch_max_size
        for i in range(0, len(msgs), size):
            self.spawn(self._consume(msgs[i : i + size], pq, mq), "pyrmq:consumer:consume")

    async def _consume(
        self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, delay: float = 0.0
    ) -> None:
        if delay:
            await asyncio.sleep(delay)
        if pq.dropped:
            return
        self.reset_retry_topic(msgs)
        ctx = ConsumeConcurrentlyContext(mq)
        try:
            status = await self.call(msgs, ctx)
        except Exception:
            log.exception(
                "%s: listener raised for %d message(s) of %s; they will be retried",
                self.consumer.consumer_group,
                len(msgs),
                mq,
            )
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if status is None:
            status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        elif not isinstance(status, ConsumeConcurrentlyStatus):
            log.warning(
                "%s: the listener returned %r, not a ConsumeConcurrentlyStatus; retrying",
                self.consumer.consumer_group,
                status,
            )
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if pq.dropped:
            # the queue moved to another consumer: it re-reads from the
            # committed offset, so nothing is lost
            return
        await self._process_consume_result(status, ctx, msgs, pq, mq)

    async def _process_consume_result(
        self,
        status: ConsumeConcurrentlyStatus,
        ctx: ConsumeConcurrentlyContext,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        consumer = self.consumer
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack_index = min(ctx.ack_index, len(msgs) - 1)
        else:
            ack_index = -1
        failed = msgs[ack_index + 1 :]
        retry_local: list[MessageExt] = []
        if failed and consumer.message_model is MessageModel.BROADCASTING:
            for m in failed:
                log.warning(
                    "%s: broadcasting message %s not consumed; dropped",
                    consumer.consumer_group,
                    m.msg_id,
                )
        elif failed:
            results = await asyncio.gather(
                *(consumer.send_message_back(m, ctx.delay_level_when_next_consume) for m in failed)
            )
            for m, ok in zip(failed, results, strict=True):
                if not ok:
                    m.reconsume_times += 1
                    retry_local.append(m)
        if retry_local:
            keep = {id(m) for m in retry_local}
            done = [m for m in msgs if id(m) not in keep]
            self.spawn(
                self._consume(retry_local, pq, mq, LOCAL_RETRY_DELAY), "pyrmq:consumer:retry"
            )
        else:
            done = msgs
        offset = pq.remove_message(done)
        if offset >= 0 and not pq.dropped:
            consumer.offset_store.update_offset(mq, offset, True)


class ConsumeMessageOrderlyService(_ListenerRunner):
    def __init__(self, consumer: PushConsumer, listener: Listener) -> None:
        super().__init__(consumer, listener)
        self.workers: dict[MessageQueue, asyncio.Task[None]] = {}
        self._queues: dict[MessageQueue, ProcessQueue] = {}
        #: set by shutdown(): a worker ends once its queue has nothing left
        self.stopping = False

    async def shutdown(self, timeout: float) -> bool:
        # the workers wait for more messages forever; wake them so each one
        # consumes what is already pulled, then ends
        self.stopping = True
        for pq in self._queues.values():
            pq.arrived.set()
        return await super().shutdown(timeout)

    def submit_consume_request(
        self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue
    ) -> None:
        worker = self.workers.get(mq)
        if worker is None or worker.done():
            self._queues[mq] = pq
            task = asyncio.ensure_future(self._run(mq, pq))
            task.set_name(f"pyrmq:consumer:orderly {mq}")
            self.workers[mq] = task
            self.tasks.add(task)
            task.add_done_callback(self._done)

    async def stop_queue(self, mq: MessageQueue, timeout: float = 1.0) -> None:
        """Let the queue's current batch finish (bounded), then stop it."""
        worker = self.workers.pop(mq, None)
        self._queues.pop(mq, None)
        if worker is None or worker.done():
            return
        with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(worker), timeout)
        if not worker.done():
            worker.cancel()

    async def _run(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        consumer = self.consumer
        clustering = consumer.message_model is MessageModel.CLUSTERING
        while not pq.dropped:
            if self.stopping and (not pq.msg_tree or (clustering and not pq.locked)):
                return
            if (
                clustering
                and (not pq.locked or pq.is_lock_expired())
                and not await consumer.rebalance.lock(mq)
            ):
                await asyncio.sleep(LOCK_RETRY_DELAY)
                continue
            msgs = pq.take_messages(consumer.consume_message_batch_max_size)
            if not msgs:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await pq.arrived.wait()
                continue
            self.reset_retry_topic(msgs)
            ctx = ConsumeOrderlyContext(mq)
            pq.consuming = True
            try:
                status = await self.call(msgs, ctx)
            except Exception:
                log.exception(
                    "%s: orderly listener raised for %s; suspending the queue",
                    consumer.consumer_group,
                    mq,
                )
                status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            finally:
                pq.consuming = False
            if status is None:
                status = ConsumeOrderlyStatus.SUCCESS
            elif not isinstance(status, ConsumeOrderlyStatus):
                log.warning(
                    "%s: the listener returned %r, not a ConsumeOrderlyStatus; suspending",
                    consumer.consumer_group,
                    status,
                )
                status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            if pq.dropped:
                return
            offset = -1
            if status is ConsumeOrderlyStatus.SUCCESS:
                offset = pq.commit()
            elif await self._check_reconsume_times(msgs):
                pq.make_message_to_consume_again(msgs)
                pause = ctx.suspend_current_queue_time_millis
                if pause < 0:
                    pause = consumer.suspend_current_queue_time_millis
                await asyncio.sleep(max(10, pause) / 1000.0)
            else:
                offset = pq.commit()
            if offset >= 0 and not pq.dropped:
                consumer.offset_store.update_offset(mq, offset, False)

    async def _check_reconsume_times(self, msgs: list[MessageExt]) -> bool:
        """True when the batch must be consumed again; messages past
        max_reconsume_times go to the dead-letter queue instead."""
        consumer = self.consumer
        max_times = consumer.max_reconsume_times_orderly
        suspend = False
        for m in msgs:
            if m.reconsume_times >= max_times:
                if not await consumer.send_message_back(m, -1):
                    suspend = True
                    m.reconsume_times += 1
            else:
                suspend = True
                m.reconsume_times += 1
        return suspend
