"""Smoke test of the bench suite's part 2 (our client) and part 3 (the
peers): each runner starts its server, runs every case with tiny counts and
returns the documented shape; the report and the plots are made from the
combined document. A peer whose server binary or client library is missing
is skipped with the reason. Timings are never compared (other work shares
the machine); only shapes, counts and that nothing failed."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib
from typing import Any

import pytest

from bench import _e2e, _report, client_bench, duel
from bench.peers import PEERS, _servers, missing, run_peer
from pyrmq.broker import busy_poll

TINY = dataclasses.replace(
    _e2e.Budget.make(True),
    sizes=(128,),
    seconds=0.2,
    awaited_seconds=0.1,
    max_msgs=2_000,
    case_bytes=1 << 20,
    window=64,
    batch=16,
    consume_max_msgs=500,
    consume_bytes=1 << 20,
    consume_batch=64,
    consume_seconds=20.0,
    e2e_rates=(200.0,),
    e2e_seconds=0.5,
    e2e_warmup=0.2,
)

THROUGHPUT = ("msgs_per_s", "MBps", "client_us_per_msg", "client_cpu_share", "server_cpu_share")


def check_system(doc: dict[str, Any], name: str, produce: set[str], consume: set[str]) -> None:
    assert doc["system"] == name and not doc.get("skipped")
    assert doc["client"] and doc["server"] and doc["durability"]
    json.dumps(doc)  # plain data
    cases = {r["case"] for r in doc["rows"]}
    assert cases == {"awaited", "e2e"} | produce | consume, cases
    for r in doc["rows"]:
        assert r["body"] == 128
        if r["case"] == "e2e":
            assert r["rate"] == 200.0 and r["sent"] > 0 and not r["failed"]
            assert 0 < r["received"] <= r["sent"], r  # a late one may miss the 1 s settle
            assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"] <= r["max_ms"]
            continue
        assert r["messages"] > 0, r
        assert all(r[k] >= 0 for k in THROUGHPUT), r
        assert not r.get("failed"), r
        if r["case"] == "awaited":
            assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"]
        if r["case"] in consume:
            assert r["messages"] == r["expected"], r


@pytest.mark.parametrize("name", sorted(PEERS))
def test_peer_runner(name: str, tmp_path: pathlib.Path) -> None:
    why = missing(name)
    if why:
        pytest.skip(why)
    doc = run_peer(name, str(tmp_path), TINY)
    batched = {"batched"} if name == "rabbitmq" else set()
    check_system(doc, name, {"pipelined"} | batched, {"consume"})
    assert doc["compare_with"] == PEERS[name][3]
    assert not list(tmp_path.iterdir()), "the peer's data directory was not removed"


def test_missing_binary_is_a_reason() -> None:
    assert _servers.missing_binary("nats") in (
        None,
        "nats-server not found (apt-get install nats-server)",
    )


def test_client_bench_and_report(tmp_path: pathlib.Path) -> None:
    """pyrmq's side (ASYNC_FLUSH) with the same tiny budget, then the
    suite's report and plots over it and whichever peers ran above."""
    doc = client_bench.run(str(tmp_path), TINY, "ASYNC_FLUSH")
    check_system(
        doc, "pyrmq", {"pipelined", "batched", "oneway"}, {"consume(push)", "consume(poll)"}
    )
    oneway = next(r for r in doc["rows"] if r["case"] == "oneway")
    assert oneway["lost"] == 0, oneway  # every oneway message stored
    suite = {
        "suite": {"quick": True, "budget": dataclasses.asdict(TINY)},
        "parts": {
            "2": {"systems": {"pyrmq": doc}},
            "3": {
                "systems": {
                    "redis-everysec": {"system": "redis-everysec", "skipped": "not run here"}
                }
            },
        },
        "errors": [],
    }
    targets = _report.targets(suite)
    assert len(targets) == 6
    assert all(
        t["met"] is None and t["pyrmq"] is not None
        for t in targets
        if t["peer"] == "redis-everysec"
    )
    md = _report.render(suite)
    assert "## Targets" in md and "pyrmq ASYNC_FLUSH" in md
    if importlib.util.find_spec("matplotlib") is None:
        return
    from bench import _plots

    names = _plots.draw_all(suite, tmp_path)
    assert {"produce_throughput.png", "consume_throughput.png", "latency.png"} <= set(names)
    for n in names:
        assert (tmp_path / n).stat().st_size > 1000


def test_duel(tmp_path: pathlib.Path) -> None:
    """bench.duel: pyrmq and Redis alternating, its target row and section."""
    why = missing("redis-everysec")
    if why:
        pytest.skip(why)
    d = duel.run(str(tmp_path), rounds=2, seconds=0.1)
    assert set(d["systems"]) == {
        "pyrmq",
        "pyrmq-nobatch",
        "pyrmq-nopoll",
        "redis-everysec",
    }
    assert d["auto_batch_p50_ratio"] > 0
    for v in d["systems"].values():
        assert len(v["p50_ms_per_round"]) == 2 and v["sends"] > 0
        assert 0 < v["pooled_p50_ms"] <= v["pooled_p99_ms"]
        assert v["server_cpu_us_per_send"] > 0
    assert d["ratio"] > 0 and d["no_poll_ratio"] > 0
    assert d["busy_poll_us"] == busy_poll.default_poll_us()
    assert 0 <= d["pyrmq_faster_rounds"] <= 2
    suite = {
        "suite": {"quick": True, "budget": dataclasses.asdict(TINY)},
        "parts": {"3": {"systems": {}, "duel": d}},
        "errors": [],
    }
    rows = [t for t in _report.targets(suite) if "alternating" in t["target"]]
    # d["ratio"] is rounded to 3 decimals: when small (a cold first round), that is
    # more than 1% of it; two goals: no worse than Redis, and issue 18's 0.8x
    assert [r["goal"] for r in rows] == [1.0, 1.25, 1.0]
    want = [d["ratio"], d["ratio"], d["no_poll_ratio"]]
    for r, ratio in zip(rows, want, strict=True):
        assert r["ratio"] == pytest.approx(ratio, rel=0.01, abs=5e-4)
    assert "eventLoopBusyPollUs=0" in rows[2]["target"]
    assert "pyrmq and Redis alternating" in _report.render(suite)
    assert not list(tmp_path.iterdir()), "data directories were not removed"


def test_pipelined_duel(tmp_path: pathlib.Path) -> None:
    """bench.duel --pipelined: four servers, every system each round, every
    acknowledged message stored; its two target rows and its section."""
    why = missing("redis-everysec")
    if why:
        pytest.skip(why)
    d = duel.run_pipelined(str(tmp_path), rounds=2, seconds=0.2, window=128)
    assert set(d["systems"]) == {name for name, _, _ in duel.PIPELINED}
    assert d["lost"] == 0
    for v in d["systems"].values():
        assert len(v["msgs_per_s_per_round"]) == 2 and v["median_msgs_per_s"] > 0
    # the auto-batching producers sent batches, the others none
    stats = d["auto_batch_stats"]
    assert stats["pyrmq-autobatch"]["batches"] > 0 and stats["pyrmq-single"]["batches"] == 0
    assert all(len(r["per_round"]) == 2 for r in d["ratios"].values())
    suite = {
        "suite": {"quick": True, "budget": dataclasses.asdict(TINY)},
        "parts": {"3": {"systems": {}, "duel_pipelined": d}},
        "errors": [],
    }
    rows = [t for t in _report.targets(suite) if "auto-batched" in t["target"]]
    assert [r["ratio"] for r in rows] == [
        d["ratios"]["autobatch_vs_redis_everysec"]["median"],
        d["ratios"]["sync_autobatch_vs_redis_always"]["median"],
    ]
    (single,) = [t for t in _report.targets(suite) if "without auto-batching" in t["target"]]
    assert single["pyrmq"] == d["systems"]["pyrmq-single"]["median_msgs_per_s"]
    assert "auto-batched, beside Redis" in _report.render(suite)
    assert not list(tmp_path.iterdir()), "data directories were not removed"
