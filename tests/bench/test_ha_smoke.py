"""Smoke test of bench.ha with tiny cases: every setup runs end to end
against real broker processes, stores every acknowledged message, and the
slave catches up. Timings are never compared (other work shares the
machine)."""

from __future__ import annotations

import json
import pathlib

from bench import failover, ha


def test_ha_quick(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    res = ha.run(out, True, work_dir=tmp_path, seconds=0.5, production=False, failover_kills=0)
    assert json.loads((out / "ha.json").read_text())["setups"].keys() == res["setups"].keys()
    assert list(res["setups"]) == list(ha.SETUPS)
    for name, s in res["setups"].items():
        assert "error" not in s, (name, s)
        assert s["stored_ok"] and s["stored"] >= s["acked"] > 0, (name, s)
        for case in ("awaited", "concurrent32", "pipelined"):
            assert s["rows"][case]["msgs_per_s"] > 0, (name, case, s)
        if ha.SETUPS[name][2]:
            assert s["slave_caught_up"] and s["slave_stored"] == s["stored"], (name, s)
    assert res["sync_vs_async_concurrent32"] > 0
    assert "SYNC_MASTER / ASYNC_MASTER" in ha.table(res)
    assert not list(tmp_path.glob("pyrmq-bench-ha-*")), "the stores were not removed"


def test_failover_quick(tmp_path: pathlib.Path) -> None:
    """One kill with the tight settings: the master dies, another is
    elected, sends succeed again, and the old master rejoins."""
    out = tmp_path / "out"
    res = failover.run(out, True, work_dir=str(tmp_path), kills=1, settings=("fast",))
    s = res["settings"]["fast"]
    assert "error" not in s, s
    assert s["kills"] == 1 and s["stored_ok"] and s["stored"] >= s["acked"] > 0, s
    assert len(s["outages"]) + s["kills_unnoticed"] == 1, s
    assert s["election_s"] and s["rejoin_s"], s
    assert json.loads((out / "failover.json").read_text())["settings"].keys() == {"fast"}
    assert "fast (300 / 2000 / 300)" in failover.table(res)
    assert not list(tmp_path.glob("pyrmq-bench-failover-*")), "the stores were not removed"
