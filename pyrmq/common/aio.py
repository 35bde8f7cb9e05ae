"""Small asyncio helpers shared by the layers."""

from __future__ import annotations

import asyncio


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
