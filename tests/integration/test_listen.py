"""pyrmq.common.listen: a listener out of file descriptors keeps the client
waiting in the backlog and tells the loop's exception handler, on asyncio's
loop and on uvloop (whose own listener resets the client and says nothing).

Each case runs in a child process, which lowers its own RLIMIT_NOFILE."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import asyncio, json, os, resource, socket, sys

    from pyrmq.common.listen import ACCEPT_ERROR_MESSAGE, start_stream_server

    USE_LIBUV_LISTENER = sys.argv[2] == "libuv"

    async def echo(reader, writer):
        writer.write(await reader.readexactly(4))
        await writer.drain()
        writer.close()

    async def main():
        loop = asyncio.get_running_loop()
        reported = []
        loop.set_exception_handler(lambda _l, ctx: reported.append(ctx.get("message")))
        if USE_LIBUV_LISTENER:
            server = await asyncio.start_server(echo, "127.0.0.1", 0)
        else:
            server = await start_stream_server(echo, "127.0.0.1", 0, name="t")
        port = server.sockets[0].getsockname()[1]
        client = socket.socket()  # its descriptor taken before there are none
        client.setblocking(False)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        hogs = []
        try:
            while True:
                hogs.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        try:
            client.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        client.send(b"ping")  # lands in the backlogged connection's buffer
        for _ in range(100):  # ~2 s: the accept fails and is told meanwhile
            if reported:
                break
            await asyncio.sleep(0.02)
        for fd in hogs:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        answer = b""
        try:
            answer = await asyncio.wait_for(loop.sock_recv(client, 4), 10)
        except (OSError, asyncio.TimeoutError) as e:
            answer = repr(e).encode()
        server.close()
        await server.wait_closed()
        print(json.dumps({"answer": answer.decode(), "reported": reported}))

    if sys.argv[1] == "uvloop":
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    else:
        runner = asyncio.Runner()
    with runner:
        runner.run(main())
    """
)


def _run(loop: str, listener: str = "pyrmq") -> dict[str, object]:
    r = subprocess.run(
        [sys.executable, "-c", CHILD, loop, listener],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, object] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_out_of_descriptors_waits_and_is_told(loop: str) -> None:
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    r = _run(loop)
    assert r["answer"] == "ping", r
    assert "socket.accept() out of system resource" in r["reported"], r  # type: ignore[operator]


def test_libuv_listener_resets_silently() -> None:
    """Why uvloop's own listener is not used: the same client is reset
    and nothing is told (if this ever passes as served, libuv changed and
    pyrmq.common.listen may go)."""
    pytest.importorskip("uvloop")
    r = _run("uvloop", "libuv")
    assert r["answer"] != "ping", r
    assert r["reported"] == [], r
