"""Send CommitLog byte ranges to a socket with sendfile, from asyncio.

Each range's segment stays pinned while its bytes wait for the socket, so
retention cannot unmap or unlink it under the send."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence

import rmqcore
from pyrmq.common.aio import wait_writable


async def sendfile_ranges(
    core: rmqcore.MessageStoreCore, sock: socket.socket, ranges: Sequence[tuple[int, int]]
) -> int:
    """Send each (phys_offset, size) range to the non-blocking sock in order;
    adjacent ranges go as one sendfile. Returns the bytes sent."""
    loop = asyncio.get_running_loop()
    fd = sock.fileno()
    total = 0
    for offset, size in coalesce_ranges(ranges):
        with core.pin(offset) as pin:
            sent = 0
            while sent < size:
                n = pin.sendfile(fd, offset + sent, size - sent)
                sent += n
                if sent < size:
                    await wait_writable(loop, fd)
        total += size
    return total


def coalesce_ranges(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for offset, size in ranges:
        if out and out[-1][0] + out[-1][1] == offset:
            out[-1] = (out[-1][0], out[-1][1] + size)
        else:
            out.append((offset, size))
    return out
