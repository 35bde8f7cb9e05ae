"""Metrics after a real run (conftest.py: a standalone server, pyrmq's
producer and pull consumers, the endpoint scraped over HTTP): the numbers
against what was sent, consumed and committed."""

from __future__ import annotations

import pathlib

from pyrmq.storage.clean import disk_used_ratio
from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess

from ._scrape import listening_ports, series, total
from .conftest import BODY_A, BODY_B, GROUP_A, GROUP_B, SENT_A, SENT_B, RealRun


def test_messages_in_equal_acked_sends(real_run: RealRun) -> None:
    r = real_run
    assert r.ok_a == SENT_A
    assert total(r.first, "rocketmq_messages_in_total", topic="MetricsA") == r.ok_a
    assert total(r.first, "rocketmq_messages_in_total", topic="MetricsB") == SENT_B
    assert total(r.second, "rocketmq_messages_in_total", topic="MetricsB") == r.ok_b
    assert total(r.first, "rocketmq_throughput_in_total", topic="MetricsA") == r.ok_a * len(BODY_A)
    # sizes: 100 B bodies in the 1 KiB bucket, 2000 B ones in the 4 KiB one
    a_le_1k = total(r.first, "rocketmq_message_size_bucket", topic="MetricsA", le="1024")
    b_le_1k = total(r.first, "rocketmq_message_size_bucket", topic="MetricsB", le="1024")
    b_le_4k = total(r.first, "rocketmq_message_size_bucket", topic="MetricsB", le="4096")
    assert (a_le_1k, b_le_1k, b_le_4k) == (r.ok_a, 0, SENT_B)
    [(labels, _)] = series(r.first, "rocketmq_messages_in_total", topic="MetricsA")
    assert labels["message_type"] == "normal" and labels["is_system"] == "false"
    assert labels["node_type"] == "broker" and labels["cluster"] == "DefaultCluster"


def test_messages_out_and_lag_match_what_was_consumed(real_run: RealRun) -> None:
    r = real_run
    out_a = total(r.first, "rocketmq_messages_out_total", topic="MetricsA", consumer_group=GROUP_A)
    assert out_a == r.consumed_a == r.ok_a
    out_b = total(r.first, "rocketmq_messages_out_total", topic="MetricsB", consumer_group=GROUP_B)
    assert r.committed_b <= out_b <= SENT_B
    lag = "rocketmq_consumer_lag_messages"
    assert total(r.first, lag, topic="MetricsA", consumer_group=GROUP_A) == 0
    assert total(r.first, lag, topic="MetricsB", consumer_group=GROUP_B) == SENT_B - r.committed_b
    assert total(r.second, lag, consumer_group=GROUP_B) == r.ok_b - r.committed_b
    # pulled but not committed, and not yet pulled, add up to the lag
    inflight = total(r.first, "rocketmq_consumer_inflight_messages", consumer_group=GROUP_B)
    ready = total(r.first, "rocketmq_consumer_ready_messages", consumer_group=GROUP_B)
    assert inflight == out_b - r.committed_b
    assert inflight + ready == SENT_B - r.committed_b
    assert total(r.first, "pyrmq_consumer_offset", consumer_group=GROUP_B) == r.committed_b
    assert total(r.first, "rocketmq_consumer_lag_latency", consumer_group=GROUP_A) == 0
    assert total(r.first, "rocketmq_consumer_lag_latency", consumer_group=GROUP_B) > 0


def test_storage_connections_and_rpc(
    real_run: RealRun, server: StandaloneProcess, disk_warning_level: int
) -> None:
    r = real_run
    assert total(r.first, "rocketmq_storage_size") > SENT_B * len(BODY_B)
    disk = total(r.first, "pyrmq_storage_disk_used_ratio")
    # the broker's own measure (reserved blocks are neither used nor free),
    # a moment later: other writers on a shared disk may move it a little
    assert 0 < disk < 1
    assert abs(disk - disk_used_ratio(str(server.log_path.parent))) < 0.01
    assert total(r.first, "pyrmq_storage_disk_warning_ratio") == disk_warning_level / 100
    assert total(r.first, "rocketmq_consumer_connections", consumer_group=GROUP_A) == 1
    assert total(r.first, "rocketmq_consumer_connections", consumer_group=GROUP_B) == 1
    assert total(r.first, "rocketmq_producer_connections") >= 1
    assert total(r.first, "rocketmq_topic_number") >= 2
    assert total(r.first, "rocketmq_consumer_group_number") >= 2
    # every send answered: SEND_MESSAGE_V2 (310) requests answered SUCCESS (0)
    sends = total(
        r.second, "rocketmq_rpc_latency_count", request_code="310", response_code="0"
    ) + total(r.second, "rocketmq_rpc_latency_count", request_code="10", response_code="0")
    assert sends == r.ok_a + r.ok_b


def test_metrics_off_by_default_opens_no_port(real_run: RealRun, tmp_path: pathlib.Path) -> None:
    """The same server without the metrics keys: no `metrics` in its ready
    file and one listening port fewer (no 5557)."""
    on_ports = listening_ports(real_run.pid)
    assert int(real_run.metrics.rsplit(":", 1)[1]) in on_ports
    off = StandaloneProcess(tmp_path, SMALL_STORE)
    off.start()
    try:
        assert "metrics" not in off.info
        assert off.proc is not None
        off_ports = listening_ports(off.proc.pid)
        assert 5557 not in off_ports
        assert len(off_ports) == len(on_ports) - 1
    finally:
        off.stop()
