"""The index thread (csrc/index_thread.c): with messageIndexAsync the puts'
dispatch wakes it from C, so keys are indexed with no Python call after a
put; it is started once, stopped by close(), and a stopped thread leaves
the index to explicit builds."""

from __future__ import annotations

import asyncio
import time

import pytest

import rmqcore
from tests._waiting import wait_until


def open_core(root: str, **kw: object) -> rmqcore.MessageStoreCore:
    kw.setdefault("index_async", True)
    return rmqcore.MessageStoreCore(root, commit_log_file_size=1 << 20,
                                    warm_mapped_files=False, **kw)  # fmt: skip


def put_keys(core: rmqcore.MessageStoreCore, prefix: str, n: int) -> None:
    for i in range(n):
        props = rmqcore.encode_properties({"KEYS": f"{prefix}{i}"})
        core.put("IdxT", i % 4, b"body %d" % i, props)


def wait_indexed(core: rmqcore.MessageStoreCore) -> None:
    """Until nothing lags (a stall: index_dispatched did not move)."""
    asyncio.run(
        wait_until(
            lambda: core.index_lag == 0,
            "the index thread indexed every put",
            progress=lambda: (core.index_dispatched, core.index_error),
            step=0.005,
        )
    )


def test_puts_wake_the_index_thread_from_c(tmp_path):
    core = open_core(str(tmp_path))
    try:
        put_keys(core, "before", 50)  # put before the start: its first round
        core.start_index_thread(5)
        with pytest.raises(ValueError, match="runs once"):
            core.start_index_thread(5)
        for r in range(3):  # each round after the thread went back to sleep
            wait_indexed(core)
            put_keys(core, f"r{r}-", 100)
            wait_indexed(core)
            assert core.find_key_offsets("IdxT", f"r{r}-99"), r
        assert core.find_key_offsets("IdxT", "before49")
        assert core.index_error is None
    finally:
        core.close()


def test_a_stopped_thread_leaves_the_index_to_builds_and_close(tmp_path):
    root = str(tmp_path)
    core = open_core(root)
    core.start_index_thread(0)
    core.stop_index_thread()
    core.stop_index_thread()  # twice: nothing
    put_keys(core, "k", 30)
    time.sleep(0.05)
    assert core.index_lag > 0  # nobody builds
    assert core.build_index(10) == 10
    core.start_index_thread(0)  # again after a stop
    put_keys(core, "m", 30)
    core.close()  # stops it mid-round, builds what is left
    core = open_core(root, index_async=False)
    try:
        for key in ("k29", "m0", "m29"):
            assert core.find_key_offsets("IdxT", key), key
    finally:
        core.close()


def test_no_index_thread_without_an_async_index(tmp_path):
    core = open_core(str(tmp_path), index_async=False)
    try:
        with pytest.raises(ValueError, match="index_async"):
            core.start_index_thread()
        with pytest.raises(ValueError, match="window_ms"):
            core.start_index_thread(-1)
    finally:
        core.close()
