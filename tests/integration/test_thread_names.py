"""The names the broker's and clients' threads show to the OS (top -H,
ps -L, /proc/<pid>/task/<tid>/comm): pyrmq/common/threads.py and
csrc/thread_name.h. Python leaves every thread's OS name "python" without
them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import sys
import threading
from collections.abc import Callable

import pytest

import rmqcore
from pyrmq import Message, Producer
from pyrmq.admin import AdminClient
from pyrmq.common.threads import name_os_thread, single_thread_executor
from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess
from tests._waiting import wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux's thread names")


def os_names(pid: int | None = None) -> list[str]:
    """The OS name of every thread of pid (this process by default)."""
    task = pathlib.Path(f"/proc/{pid or os.getpid()}/task")
    names = []
    for t in task.iterdir():
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            names.append((t / "comm").read_text().strip())
    return names


def own_os_name() -> str:
    return pathlib.Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()


def in_a_thread(fn: Callable[[], object]) -> object:
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(fn()))
    t.start()
    t.join(10)
    assert not t.is_alive()
    return got[0]


def test_a_thread_names_itself_and_long_names_are_cut() -> None:
    def name_and_read() -> str:
        rmqcore.name_thread("ABCDEFGHIJKLMNOPQRST")
        return own_os_name()

    assert rmqcore.THREAD_NAME_MAX == 15
    assert in_a_thread(name_and_read) == "ABCDEFGHIJKLMNO"


@pytest.mark.parametrize("bad", ["", "a\0b"])
def test_a_bad_name_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="thread name"):
        rmqcore.name_thread(bad)


def test_naming_never_raises_in_an_executor() -> None:
    def read() -> str:
        name_os_thread("")  # refused, logged, not raised
        return own_os_name()

    pool = single_thread_executor("pyrmq-test", "PyrmqTestThread")
    try:
        assert pool.submit(own_os_name).result(10) == "PyrmqTestThread"
        assert pool.submit(read).result(10) == "PyrmqTestThread"
        assert pool.submit(lambda: threading.current_thread().name).result(10) == "pyrmq-test_0"
    finally:
        pool.shutdown()


def test_the_blocking_facades_loop_thread_is_named() -> None:
    import pyrmq.sync

    async def where() -> str:
        return own_os_name()

    assert pyrmq.sync.run(where(), timeout=30) == "pyrmq-loop"


def test_the_deflate_worker_thread_is_named() -> None:
    w = rmqcore.DeflateWorker(5, 4)  # its thread starts with the first body
    try:
        assert w.submit(b"x" * 1000, "t")
        got: list[object] = []

        async def compressed() -> None:
            await wait_until(lambda: bool(got.extend(w.done()) or got), "the body compressed")

        asyncio.run(compressed())
        # it named itself before it served the body
        assert "Deflate_0" in os_names()
    finally:
        w.close()


async def _sends(server: StandaloneProcess) -> None:
    """Sends with keys (the index thread's work) until every thread looked
    for has shown up (the flush threads start with their first flush)."""
    pid = server.proc.pid  # type: ignore[union-attr]
    want = {"BuildIndex", "FlushCommitLog", "FlushConsumeQ", "SendMessage_0", "SendMessage_1"}
    async with (
        Producer("thread-names", server.namesrv) as p,
        AdminClient(server.namesrv) as admin,
    ):
        await admin.create_topic("ThreadNamesT", broker_addr=server.broker)
        sent = 0

        async def named() -> bool:
            nonlocal sent
            msgs = [Message("ThreadNamesT", b"x" * 128, keys=f"k{sent + i}") for i in range(64)]
            await asyncio.gather(*(p.send(m) for m in msgs))
            sent += 64
            return want <= set(os_names(pid))

        await wait_until(named, f"broker threads named {sorted(want)}", progress=lambda: sent)


def test_the_broker_threads_show_their_jobs(tmp_path: pathlib.Path) -> None:
    settings = {**SMALL_STORE, "sendMessageThreadPoolNums": 3, "flushIntervalCommitLog": 50}
    server = StandaloneProcess(tmp_path, settings)
    server.start()
    try:
        asyncio.run(_sends(server))
        pid = server.proc.pid  # type: ignore[union-attr]
        names = os_names(pid)
        process_name = pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
    finally:
        assert server.stop() == 0
    for expected in ("StoreOpen", "BuildIndex", "FlushCommitLog", "FlushConsumeQ"):
        assert expected in names, names
    # sendMessageThreadPoolNums=3: the event loop and two C send threads
    assert {"SendMessage_0", "SendMessage_1"} <= set(names), names
    assert "SendMessage_2" not in names, names
    # no thread is left showing the process's name but the event loop's own
    # (asyncio's default executor included: pyrmq-asyncio)
    assert names.count(process_name) == 1, (process_name, names)
