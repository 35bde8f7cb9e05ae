"""pyrmq.common.aio.start_eager: a task whose first step runs inside the
call that starts it, as Python 3.12's eager tasks, on every Python the
project supports. Plain asyncio, no servers: the consume service's use of
it is tested against a broker in test_push_listener.py."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from pyrmq.common.aio import start_eager

_var: contextvars.ContextVar[str] = contextvars.ContextVar("_var", default="caller")


def test_the_first_step_runs_inside_the_call_as_the_current_task(arun):
    async def main() -> None:
        seen: list[Any] = []

        async def body() -> int:
            task = asyncio.current_task()
            seen.append(("first step", task.get_name() if task else None))
            _var.set("task")
            async with asyncio.timeout(5):  # needs a current task
                await asyncio.sleep(0.001)
            seen.append(("resumed", _var.get()))
            return 42

        task = start_eager(body(), "eager")
        seen.append("start_eager returned")
        assert _var.get() == "caller"  # the task's context is its own
        assert await task == 42
        assert seen == [("first step", "eager"), "start_eager returned", ("resumed", "task")]
        assert "body" in repr(task)

    arun(main(), timeout=10)


def test_outcomes_of_a_first_step_that_ends_or_raises(arun):
    async def main() -> None:
        async def returns() -> str:
            return "done"

        async def raises() -> None:
            raise ValueError("listener failed")

        done = start_eager(returns(), "returns")
        failed = start_eager(raises(), "raises")
        assert await done == "done"
        with pytest.raises(ValueError, match="listener failed"):
            await failed

    arun(main(), timeout=10)


def test_started_inside_another_task_that_task_is_current_again_after(arun):
    async def main() -> None:
        inner_saw: list[str] = []

        async def inner() -> None:
            t = asyncio.current_task()
            inner_saw.append(t.get_name() if t else "")

        async def outer() -> str:
            task = start_eager(inner(), "inner")
            me = asyncio.current_task()
            await task
            return me.get_name() if me else ""

        assert await asyncio.create_task(outer(), name="outer") == "outer"
        assert inner_saw == ["inner"]

    arun(main(), timeout=10)


@pytest.mark.parametrize("when", ["before its task takes over", "after"])
def test_a_cancel_reaches_the_coroutine_and_the_future_it_waits_on(arun, when):
    async def main() -> None:
        waited: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        cleaned: list[str] = []

        async def body() -> None:
            try:
                await waited
            finally:
                cleaned.append("finally ran")

        task = start_eager(body(), "cancelled")
        if when == "after":
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cleaned == ["finally ran"]
        assert waited.cancelled()

    arun(main(), timeout=10)


def test_a_loop_task_factory_makes_the_task_and_it_starts_a_turn_later(arun):
    async def main() -> None:
        loop = asyncio.get_running_loop()
        made: list[asyncio.Task[Any]] = []

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
            made.append(asyncio.Task(coro, loop=loop, **kw))
            return made[-1]

        ran: list[str] = []

        async def body() -> None:
            ran.append("ran")

        loop.set_task_factory(factory)
        try:
            task = start_eager(body(), "made")
            assert ran == [] and made == [task] and task.get_name() == "made"
            await task
            assert ran == ["ran"]
        finally:
            loop.set_task_factory(None)

    arun(main(), timeout=10)
