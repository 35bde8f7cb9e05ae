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
