"""Waiting for a condition without mistaking a slow machine for a stall.

CI runs on whatever machine the submitting session had, busy or not, so a
fixed timeout cannot tell "the system stopped" from "the system is slow".
`wait_until` watches a progress measure as well as the condition:

* it returns as soon as the condition holds;
* it fails as a STALL when the progress measure has not changed for
  `stall_after` seconds: nothing happened, which is what a test exists to
  catch (a lost wake-up, a dead loop, a client that gave up);
* while the measure keeps changing it goes on waiting, up to `limit`
  seconds in all, and then fails saying the system progressed but never got
  there (slow beyond reason, or a target that cannot be met).

Without a progress measure the condition's own value is the only sign of
life, so the wait is a plain timeout of `stall_after` seconds and says so.
Every wait is bounded in count and time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable

Cond = Callable[[], "bool | Awaitable[bool]"]
Progress = Callable[[], Hashable]

#: `limit` by default: this many times `stall_after`
LIMIT_FACTOR = 6


async def _value(fn: Callable[[], object]) -> object:
    v = fn()
    if asyncio.iscoroutine(v) or isinstance(v, asyncio.Future):
        v = await v
    return v


async def wait_until(
    cond: Cond,
    what: str,
    *,
    progress: Progress | None = None,
    stall_after: float = 30.0,
    limit: float | None = None,
    step: float = 0.05,
) -> float:
    """Poll cond() (plain or async) every `step` s until it is true; the
    seconds it took. `progress()` returns a snapshot (numbers, a tuple)
    that changes whenever the system does work toward the condition.
    AssertionError naming `what` on a stall or at `limit`."""
    loop = asyncio.get_running_loop()
    if limit is None:
        limit = stall_after * LIMIT_FACTOR if progress is not None else stall_after
    t0 = loop.time()
    snapshot = await _value(progress) if progress is not None else None
    changed_at = t0
    for _ in range(int(limit / step) + 2):
        if await _value(cond):
            return loop.time() - t0
        now = loop.time()
        if progress is not None:
            current = await _value(progress)
            if current != snapshot:
                snapshot, changed_at = current, now
        if now - changed_at >= stall_after:
            if progress is None:
                raise AssertionError(
                    f"timed out after {stall_after:.0f} s waiting for {what} "
                    "(no progress measure: cannot tell a stall from a slow machine)"
                )
            raise AssertionError(
                f"STALL while waiting for {what}: no progress for {stall_after:.0f} s "
                f"(progress {snapshot!r}, {now - t0:.1f} s into the wait)"
            )
        if now - t0 >= limit:
            raise AssertionError(
                f"SLOW: {what} not reached within {limit:.0f} s although the system "
                f"progressed (last change {now - changed_at:.1f} s ago, progress {snapshot!r})"
            )
        await asyncio.sleep(step)
    raise AssertionError(f"gave up waiting for {what} after {loop.time() - t0:.0f} s")
