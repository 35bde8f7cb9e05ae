"""Blocking facades over the asyncio client, for code that does not use
asyncio: the same classes and method names, minus `await`.

    from pyrmq import Message
    from pyrmq.sync import Producer

    with Producer("my-group", namesrv_addr="127.0.0.1:9876") as producer:
        print(producer.send(Message("TopicTest", b"hello")))

Every facade runs its asyncio object on one event loop thread per process
("pyrmq-loop", a daemon; uvloop's when uvloop is installed). After fork()
the child gets a fresh loop thread, so a producer created in a child
process (multiprocessing, Spark executors) works; objects created before
the fork belong to the parent and must not be used in the child.
`pyrmq.sync.run(coro)` runs any coroutine of the client on that loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from pyrmq.common.errors import ClientError
from pyrmq.common.message import Message, MessageExt, MessageQueue
from pyrmq.common.results import (
    LocalTransactionState,
    SendResult,
    SendStatus,
    TransactionSendResult,
)
from pyrmq.common.subscription import MessageSelector
from pyrmq.common.threads import name_os_thread
from pyrmq.consumer import pull_consumer as _pull
from pyrmq.consumer import push_consumer as _push
from pyrmq.producer import producer as _producer
from pyrmq.producer import transaction as _tx
from pyrmq.producer.selector import MessageQueueSelector

T = TypeVar("T")

__all__ = ["Producer", "PullConsumer", "PushConsumer", "TransactionProducer", "run", "submit"]


class _LoopThread:
    """One event loop in one daemon thread, remade after fork."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None and self._pid == os.getpid() and not loop.is_closed():
            return loop
        with self._lock:
            if self._loop is None or self._pid != os.getpid() or self._loop.is_closed():
                self._loop = self._start()
                self._pid = os.getpid()
            return self._loop

    @staticmethod
    def _start() -> asyncio.AbstractEventLoop:
        try:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            name_os_thread("pyrmq-loop")
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        threading.Thread(target=run, name="pyrmq-loop", daemon=True).start()
        ready.wait()
        return loop

    def after_fork_in_child(self) -> None:
        # the parent's loop thread does not exist in the child; its loop
        # object must not be closed from here (it may hold the parent's fds)
        self._loop = None
        self._pid = 0
        self._lock = threading.Lock()


_LOOP = _LoopThread()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_LOOP.after_fork_in_child)


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start a coroutine on the facade loop and return at once: a
    concurrent.futures.Future of its result (for overlapping work, such as
    fetching the next chunk while this thread handles the current one)."""
    loop = _LOOP.loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coro.close()
        raise ClientError("pyrmq.sync called from the facade's own event loop (a listener?)")
    return asyncio.run_coroutine_threadsafe(coro, loop)


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run a coroutine on the facade loop and wait for its result."""
    fut = submit(coro)
    try:
        return fut.result(timeout)
    except concurrent.futures.TimeoutError:
        fut.cancel()
        raise TimeoutError(f"no result in {timeout}s") from None


def _make(factory: Callable[[], T]) -> T:
    async def build() -> T:
        return factory()

    return run(build())


def _discard(aw: Awaitable[Any]) -> None:
    """Close a coroutine that will never run (no "never awaited" warning)."""
    if isinstance(aw, Coroutine):
        aw.close()


class _Facade:
    _obj: Any
    _pid: int

    def _run(self, aw: Awaitable[T], timeout: float | None = None) -> T:
        if self._pid != os.getpid():
            _discard(aw)
            raise ClientError(
                f"this {type(self).__name__} was created in process {self._pid}; create a new "
                "one after fork()"
            )
        started = False

        async def wrap() -> T:
            nonlocal started
            started = True
            return await aw

        try:
            return run(wrap(), timeout)
        except ClientError:
            if not started:  # refused before it ran (called on the facade's own loop)
                _discard(aw)
            raise

    def start(self) -> None:
        self._run(self._obj.start())

    def shutdown(self) -> None:
        self._run(self._obj.shutdown())

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __getattr__(self, name: str) -> Any:
        # settings and read-only state (client_id, producer_group, ...)
        return getattr(self._obj, name)


class Producer(_Facade):
    """Blocking pyrmq.Producer: the same arguments and methods."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._pid = os.getpid()
        self._obj: _producer.Producer = _make(lambda: _producer.Producer(*args, **kwargs))

    def send(
        self,
        msg: Message,
        *,
        mq: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        return self._run(self._obj.send(msg, mq=mq, selector=selector, arg=arg, timeout=timeout))

    def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        mq: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        return self._run(
            self._obj.send_batch(msgs, mq=mq, selector=selector, arg=arg, timeout=timeout)
        )

    def send_async(
        self,
        msg: Message | Sequence[Message],
        callback: _producer.SendCallback | None = None,
        *,
        mq: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> concurrent.futures.Future[SendResult]:
        """Returns at once: a concurrent.futures.Future of the result; the
        callback, if given, runs on the pyrmq loop thread (keep it short)."""

        async def start() -> asyncio.Future[SendResult]:
            return self._obj.send_async(
                msg, callback, mq=mq, selector=selector, arg=arg, timeout=timeout
            )

        out: concurrent.futures.Future[SendResult] = concurrent.futures.Future()
        inner = self._run(start())

        def copy(f: asyncio.Future[SendResult]) -> None:
            if f.cancelled():
                out.cancel()
            elif f.exception() is not None:
                out.set_exception(f.exception())
            else:
                out.set_result(f.result())

        _LOOP.loop().call_soon_threadsafe(inner.add_done_callback, copy)
        return out

    def send_oneway(
        self,
        msg: Message,
        *,
        mq: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> None:
        self._run(self._obj.send_oneway(msg, mq=mq, selector=selector, arg=arg))

    def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self._obj.fetch_publish_message_queues(topic))


class _ChecksInThreads:
    """The async producer's listener over a blocking one: a check runs in a
    worker thread of the loop's executor, never on the loop."""

    def __init__(self, listener: _tx.TransactionListener) -> None:
        self.listener = listener

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        raise AssertionError("the facade runs execute_local_transaction itself")

    async def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return await asyncio.to_thread(self.listener.check_local_transaction, msg)  # type: ignore[arg-type]


class TransactionProducer(Producer):
    """Blocking pyrmq.TransactionProducer. The listener's methods are plain
    functions: execute_local_transaction runs in the thread that called
    send_message_in_transaction (its database connection, its thread-local
    state), check_local_transaction in a worker thread."""

    def __init__(
        self,
        producer_group: str,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        transaction_listener: _tx.TransactionListener,
        **kwargs: Any,
    ) -> None:
        self._pid = os.getpid()
        self.transaction_listener = transaction_listener
        checks = _ChecksInThreads(transaction_listener)
        self._obj: _tx.TransactionProducer = _make(
            lambda: _tx.TransactionProducer(
                producer_group, namesrv_addr, transaction_listener=checks, **kwargs
            )
        )

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        result = self._run(self._obj.send_half_message(msg))
        remark = ""
        if result.send_status is SendStatus.SEND_OK:
            state, remark = _tx.listener_state_blocking(
                self.transaction_listener.execute_local_transaction,
                msg,
                arg,
                what="execute_local_transaction",
            )
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        self._run(self._obj.end_transaction_or_log(result, state, remark, msg))
        return _tx.transaction_result(result, state)


class PushConsumer(_Facade):
    """Blocking pyrmq.PushConsumer. Plain-function listeners run in its
    thread pool; start() returns once the consumer runs, and messages keep
    arriving until shutdown()."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._pid = os.getpid()
        self._obj: _push.PushConsumer = _make(lambda: _push.PushConsumer(*args, **kwargs))

    def subscribe(self, topic: str, sub_expression: str | MessageSelector = "*") -> None:
        async def sub() -> None:
            self._obj.subscribe(topic, sub_expression)

        self._run(sub())

    def unsubscribe(self, topic: str) -> None:
        async def unsub() -> None:
            self._obj.unsubscribe(topic)

        self._run(unsub())

    def register_message_listener(self, listener: _push.Listener, *, orderly: bool = False) -> None:
        self._obj.register_message_listener(listener, orderly=orderly)

    def register_message_listener_orderly(self, listener: _push.Listener) -> None:
        self._obj.register_message_listener(listener, orderly=True)

    def suspend(self) -> None:
        self._obj.suspend()

    def resume(self) -> None:
        self._obj.resume()


class PullConsumer(_Facade):
    """Blocking pyrmq.PullConsumer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._pid = os.getpid()
        self._obj: _pull.PullConsumer = _make(lambda: _pull.PullConsumer(*args, **kwargs))

    def subscribe(self, topic: str, sub_expression: str | MessageSelector = "*") -> None:
        async def sub() -> None:
            self._obj.subscribe(topic, sub_expression)

        self._run(sub())

    def assign(self, mqs: Iterable[MessageQueue]) -> None:
        mqs = list(mqs)

        async def assign() -> None:
            self._obj.assign(mqs)

        self._run(assign())

    def assignment(self) -> set[MessageQueue]:
        return set(self._obj.assignment())

    def poll(self, timeout: float | None = None) -> list[MessageExt]:
        return self._run(self._obj.poll(timeout))

    def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        self._run(self._obj.commit(offsets))

    def committed(self, mq: MessageQueue) -> int:
        return self._run(self._obj.committed(mq))

    def position(self, mq: MessageQueue) -> int:
        return self._obj.position(mq)

    def seek(self, mq: MessageQueue, offset: int) -> None:
        self._run(self._obj.seek(mq, offset))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        self._run(self._obj.seek_to_begin(mq))

    def seek_to_end(self, mq: MessageQueue) -> None:
        self._run(self._obj.seek_to_end(mq))

    def seek_to_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> None:
        self._run(self._obj.seek_to_timestamp(mq, timestamp_ms))

    def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._run(self._obj.offset_for_timestamp(mq, timestamp_ms))

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self._obj.fetch_message_queues(topic))

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        mqs = list(mqs)

        async def pause() -> None:
            self._obj.pause(mqs)

        self._run(pause())

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        mqs = list(mqs)

        async def resume() -> None:  # moves held batches back into the loop's queue
            self._obj.resume(mqs)

        self._run(resume())
