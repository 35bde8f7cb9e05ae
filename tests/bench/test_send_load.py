"""bench.pipelined.send_load (section b, bench.multicore): a short load
against a real standalone, its rate and its split of the broker's CPU by
thread."""

from __future__ import annotations

import os

from bench import broker_load as bl
from bench import pipelined as pl


def test_send_load_counts_answers_and_splits_the_cpu_by_thread(tmp_path):
    with bl.standalone(str(tmp_path), "ASYNC_FLUSH") as srv:
        bl.create_topic(srv.broker, "LoadT", 4)
        bl.wait_route(srv.namesrv, "LoadT")
        r = pl.send_load(srv, "LoadT", 4, 128, procs=1, conns=1, window=16, warmup=0.3,
                         duration=1.0)  # fmt: skip
    assert r["bad"] == 0 and r["msgs_per_s"] > 0, r
    split = r["server_cpu_us_per_msg_by_thread"]
    # the event loop served every send: it is in the split, and no thread
    # is charged more than the whole process
    assert bl.MAIN_THREAD in split, split
    # /proc counts in clock ticks, read a moment apart for the process and
    # for its threads: two ticks a window of slack
    tick_us = 2 / os.sysconf("SC_CLK_TCK") / (r["msgs_per_s"] * 1.0) * 1e6
    assert all(us <= r["server_cpu_us_per_msg"] + tick_us for us in split.values()), r
