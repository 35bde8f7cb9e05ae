"""Smoke test of bench.backlog and bench.scale in quick mode with tiny
counts: both run end to end against real broker processes, write their
JSON, and return the documented shapes with rates above zero. Timings are
never compared (other work shares the machine)."""

from __future__ import annotations

import json
import pathlib

from bench import backlog, scale


def test_backlog_quick(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    res = backlog.run(out, True, messages=20_000, seconds=0.5, work_dir=tmp_path)
    assert json.loads((out / "backlog.json").read_text())["summary"] == res["summary"]
    steps = res["steps"]
    assert [s["step"] for s in steps] == [0, 1]
    assert 0 < steps[0]["messages"] < steps[1]["messages"] and steps[1]["messages"] >= 20_000
    for s in steps:
        for key in ("produce_rate", "consume_rate", "consume_head_rate", "consume_old_rate"):
            assert s[key] > 0, (key, s)
        assert s["broker"]["rss_mib"] > 0
        assert s["files"]["commitlog"] >= 1 and s["files"]["consumequeue"] >= 1
        assert s["consume_head"]["msgs"] == s["consume_head"]["expected"]
    cases = [r["case"] for r in res["recovery"]]
    assert cases == ["clean", "crash_unflushed", "crash_flushed"]
    for r in res["recovery"]:
        assert r["ready_s"] > 0 and r["messages_after"] >= r["messages"]
        assert r["abnormal"] == (r["case"] != "clean")
    unflushed = res["recovery"][1]
    assert unflushed["records_dispatched"] >= unflushed["unflushed"]
    assert res["summary"]["largest_backlog"] == steps[-1]["messages"]
    assert not list(tmp_path.glob("pyrmq-bench-backlog-*")), "the store was not removed"


def test_scale_quick(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    res = scale.run(out, True, brokers=(1, 2), connections=(1, 10), seconds=0.5, work_dir=tmp_path)
    assert json.loads((out / "scale.json").read_text())["connections"] == res["connections"]
    assert [r["brokers"] for r in res["brokers"]] == [1, 2]
    for r in res["brokers"]:
        assert r["produce_rate"] > 0 and len(r["per_broker_rate"]) == r["brokers"]
        assert all(x > 0 for x in r["per_broker_rate"])
        assert len(r["rss_mib"]) == r["brokers"] and r["p99_ms"] > 0
    assert [r["connections"] for r in res["connections"]] == [1, 10]
    for r in res["connections"]:
        assert r["produce_rate"] > 0 and r["p50_ms"] > 0 and r["rss_mib"] > 0
        assert r["broker_fds"] >= r["connections"]
    assert not list(tmp_path.glob("pyrmq-bench-scale-*")), "the stores were not removed"
