"""Smoke test of bench.ha with tiny cases: every setup runs end to end
against real broker processes, stores every acknowledged message, and the
slave catches up. Timings are never compared (other work shares the
machine)."""

from __future__ import annotations

import json
import pathlib

from bench import ha


def test_ha_quick(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    res = ha.run(out, True, work_dir=tmp_path, seconds=0.5, production=False)
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
