"""bench.broker_load.settle_store: a measurement starts on a broker whose
store has done its one-time work (bench.broker_report section a)."""

from __future__ import annotations

import time

from bench import broker_load as bl


def test_settle_store_puts_one_a_queue_and_waits_for_the_warming(tmp_path):
    with bl.standalone(str(tmp_path), "ASYNC_FLUSH") as srv:
        bl.create_topic(srv.broker, "SettleT", 4)
        bl.wait_route(srv.namesrv, "SettleT")
        cpu0 = srv.cpu_s()
        quiet, waited = bl.settle_store(srv, "SettleT", 4, timeout=60.0)
        # the first puts made the first segment and warmed the next: the
        # broker worked, then went quiet (a timeout says it never did)
        assert quiet, f"the broker still busy {waited:.1f} s after its first puts"
        assert srv.cpu_s() > cpu0
        with bl.BlockingClient(srv.broker) as c:
            assert bl.max_offsets(c, "SettleT", 4) == [1, 1, 1, 1]



def test_thread_cpu_names_the_broker_threads(tmp_path):
    """bench.broker_load.thread_cpu_s: section a's split of the broker's CPU
    by thread, under the names of pyrmq/common/threads.py."""
    want = {bl.MAIN_THREAD, "BuildIndex", "FlushCommitLog", "StoreOpen"}
    with bl.standalone(str(tmp_path), "ASYNC_FLUSH", conf={"flushIntervalCommitLog": 50}) as srv:
        # the flush thread starts with the first flush, 50 ms after the start
        for _ in range(600):
            split = bl.thread_cpu_s(srv.pid)
            if want <= set(split):
                break
            time.sleep(0.05)
    assert want <= set(split), split
    assert all(s >= 0 for s in split.values()), split


def test_cpu_by_thread_is_per_message_and_largest_first():
    before = {"event loop": 1.0, "BuildIndex": 0.1, "FlushCommitLog": 0.2}
    after = {"event loop": 1.5, "BuildIndex": 0.4, "FlushCommitLog": 0.2 + 1e-9, "New": 0.01}
    # 1,000 messages: 500 µs, 300 µs, 10 µs a message; the flush's 1e-6 µs left out
    assert bl.cpu_by_thread_us(before, after, 1000) == {
        "event loop": 500.0,
        "BuildIndex": 300.0,
        "New": 10.0,
    }
    assert list(bl.cpu_by_thread_us(before, after, 1000)) == ["event loop", "BuildIndex", "New"]
    # as the reports print it: largest first, under 0.05 µs left out
    split = {"BuildIndex": 0.32, "event loop": 21.5, "FlushCommitLog": 0.01}
    assert bl.by_thread_text(split) == "event loop 21.50, BuildIndex 0.32"
