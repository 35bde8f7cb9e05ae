"""bench.broker_load.settle_store: a measurement starts on a broker whose
store has done its one-time work (bench.broker_report section a)."""

from __future__ import annotations

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


def test_thread_cpu_names_the_broker_threads_doing_the_work(tmp_path):
    """bench.broker_load.thread_cpu_s: section a's split of the broker's CPU
    a message by thread (the names of pyrmq/common/threads.py)."""
    with bl.standalone(str(tmp_path), "ASYNC_FLUSH") as srv:
        bl.create_topic(srv.broker, "SplitT", 4)
        bl.wait_route(srv.namesrv, "SplitT")
        before = bl.thread_cpu_s(srv.pid)
        bl.settle_store(srv, "SplitT", 4, timeout=60.0)  # puts: the loop works
        after = bl.thread_cpu_s(srv.pid)
    assert {bl.MAIN_THREAD, "BuildIndex", "FlushCommitLog"} <= set(after), after
    assert after[bl.MAIN_THREAD] > before[bl.MAIN_THREAD]
    split = bl.cpu_by_thread_us(before, after, 4)
    assert bl.MAIN_THREAD in split, split
    assert list(split.values()) == sorted(split.values(), reverse=True), split  # largest first
    assert all(us >= 0.05 for us in split.values()), split
