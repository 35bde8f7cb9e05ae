"""Running `python -m pyrmq ...` as a user does, from a test's event loop
(the servers it talks to may run on that loop), bounded in time."""

from __future__ import annotations

import asyncio
import sys
from asyncio.subprocess import PIPE


async def pyrmq_cli(*args: str, timeout: float = 60.0) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m pyrmq ARGS`; the process
    is killed and TimeoutError raised after `timeout` seconds."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pyrmq", *args, stdout=PIPE, stderr=PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(), err.decode()
