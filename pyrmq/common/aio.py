"""Small asyncio helpers shared by the layers."""

from __future__ import annotations

import asyncio
import collections.abc
import contextvars
import sys
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


async def wait_writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Wait until the non-blocking socket fd can take more bytes."""
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, ready)
    try:
        await fut
    finally:
        loop.remove_writer(fd)


def write(writer: asyncio.StreamWriter, data: bytes) -> None:
    """writer.write(data), or ConnectionResetError once the peer's close has
    been seen: asyncio's loop drops a write to a closed transport (and logs
    it after a few), uvloop's raises RuntimeError ("the handler is closed"),
    which a task catching connection errors would die of."""
    if writer.is_closing():
        raise ConnectionResetError("the connection was closed")
    writer.write(data)


def start_eager(coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
    """A task that runs `coro` at once, up to its first real wait, as
    Python 3.12's eager tasks do (``asyncio.Task(..., eager_start=True)``),
    on 3.11 too. What a callback starts this way runs inside that callback
    instead of a loop turn later. While it runs it is the loop's current
    task, in a context of its own, as any task's steps are (asyncio.timeout
    works in it). A loop with a task factory of its own makes the task
    there, and it starts a loop turn later, as any task does."""
    loop = asyncio.get_running_loop()
    if loop.get_task_factory() is not None:
        return loop.create_task(coro, name=name)
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, name=name, eager_start=True)
    return _eager_before_312(loop, coro, name)


def _eager_before_312(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], name: str
) -> asyncio.Task[T]:
    """3.11: the task is made around a _FirstStepRun; its first step is run
    here, under the task's own context and as the current task; the task's
    own first step, a loop turn later, takes up where it stopped."""
    from asyncio.tasks import _enter_task, _leave_task  # 3.11's, as its Task steps use

    ctx = contextvars.copy_context()
    stepper = _FirstStepRun(coro)
    task: asyncio.Task[T] = loop.create_task(stepper, name=name, context=ctx)
    outer = asyncio.current_task(loop)
    if outer is not None:  # started from inside another task: swap it out, as 3.12 does
        _leave_task(loop, outer)
    _enter_task(loop, task)
    try:
        ctx.run(stepper.run_first)
    finally:
        _leave_task(loop, task)
        if outer is not None:
            _enter_task(loop, outer)
    return task


#: coroutine attributes a _FirstStepRun passes on (asyncio's task repr and get_stack)
_SHOWN = frozenset(("__name__", "__qualname__", "cr_code", "cr_frame", "cr_running", "cr_await"))

_PENDING, _WAITING, _RETURNED, _RAISED, _HANDED_ON = range(5)


class _FirstStepRun(collections.abc.Coroutine):
    """A coroutine whose first step was run outside its task (run_first),
    handed to that task to finish: the task's first send() gets what that
    step yielded (the future it waits on) or its outcome, and every send()
    and throw() after it goes to the coroutine itself."""

    __slots__ = ("_coro", "_out", "_state")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self._state = _PENDING
        self._out: Any = None

    def __getattr__(self, name: str) -> Any:
        """What task reprs and stacks read of a coroutine, from the real one."""
        if name in _SHOWN:
            return getattr(self._coro, name)
        raise AttributeError(name)

    def run_first(self) -> None:
        try:
            self._out = self._coro.send(None)
            self._state = _WAITING
        except StopIteration as e:
            self._out, self._state = e.value, _RETURNED
        except BaseException as e:  # the task's first step raises it
            self._out, self._state = e, _RAISED

    def send(self, value: Any) -> Any:
        state, out = self._state, self._out
        if state == _HANDED_ON:
            return self._coro.send(value)
        self._state, self._out = _HANDED_ON, None
        if state == _WAITING:
            return out
        if state == _RETURNED:
            raise StopIteration(out)
        if state == _RAISED:
            raise out
        return self._coro.send(value)  # never run first: an ordinary first step

    def throw(self, exc: Any, *args: Any) -> Any:
        """The task was cancelled (or thrown into) before it took over: a
        future the first step waits on is cancelled, as a task cancels the
        future it waits on, and the exception goes to the coroutine."""
        state, out = self._state, self._out
        self._state, self._out = _HANDED_ON, None
        if state == _WAITING and isinstance(out, asyncio.Future):
            out.cancel()
        elif state == _RETURNED:
            raise StopIteration(out)  # it ended already: the task ends as its cancel says
        elif state == _RAISED:
            raise out
        return self._coro.throw(exc, *args)

    def close(self) -> None:
        self._state, self._out = _HANDED_ON, None
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        raise TypeError("a coroutine already started for its task cannot be awaited")
