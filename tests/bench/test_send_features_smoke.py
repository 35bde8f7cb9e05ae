"""Smoke test of bench.send_features: every case runs end to end against
real `pyrmq standalone` brokers, every acknowledged send is in its topic
(the run raises otherwise: a duplicate check that suppressed a distinct
message fails it), and the table names every case. Rates are never compared
(other work shares the machine)."""

from __future__ import annotations

import json
import pathlib

from bench import send_features


def test_send_features_quick(tmp_path: pathlib.Path) -> None:
    res = send_features.run(tmp_path / "out", seconds=1.0, rounds=1, body=128)
    assert json.loads((tmp_path / "out" / "send_features.json").read_text()) == res
    assert set(res["cases"]) == set(send_features.CASES)
    assert res["acked"] == res["in_topic"] > 0
    for case, row in res["cases"].items():
        assert row["msgs_per_s"] > 0 and row["failures"] == 0, (case, row)
        assert row["client_cpu_us"] > 0 and row["broker_cpu_us"] > 0, (case, row)
    table = send_features.render(res)
    assert "transactional send (commit)" in table and "duplicateDetection, pipelined" in table
