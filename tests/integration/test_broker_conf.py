"""broker.conf: RocketMQ's own key names are understood (the flush and
timeout settings carry no unit in Java; pyrmq's fields end in _ms)."""

from __future__ import annotations

import logging

from pyrmq.broker.config import load_broker_conf


def test_java_names_without_unit_set_the_ms_fields(tmp_path, caplog):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerName=broker-x\n"
        "flushDiskType=SYNC_FLUSH\n"
        "flushIntervalCommitLog=200\n"
        "flushCommitLogThoroughInterval=3000\n"
        "flushIntervalConsumeQueue=700\n"
        "syncFlushTimeout=7000\n"
        "cleanResourceInterval=9000\n"
        "noSuchKey=1\n"
    )
    with caplog.at_level(logging.WARNING, logger="pyrmq.broker"):
        broker, store = load_broker_conf(str(conf))
    assert broker.broker_name == "broker-x"
    assert store.flush_interval_commit_log_ms == 200
    assert store.flush_commit_log_thorough_interval_ms == 3000
    assert store.flush_interval_consume_queue_ms == 700
    assert store.sync_flush_timeout_ms == 7000
    assert store.clean_resource_interval_ms == 9000
    # only the key pyrmq does not know is reported
    assert "does not use: noSuchKey" in caplog.text
    # the unit-carrying spellings still work
    conf.write_text("flushIntervalCommitLogMs=300\n")
    assert load_broker_conf(str(conf))[1].flush_interval_commit_log_ms == 300
