"""Smoke test of bench.send_features: both modes run end to end against a
real `pyrmq standalone`, every acknowledged send is in the topic (the run
raises otherwise), and the table names both. Rates are never compared
(other work shares the machine)."""

from __future__ import annotations

import json
import pathlib

from bench import send_features


def test_send_features_quick(tmp_path: pathlib.Path) -> None:
    res = send_features.run(tmp_path / "out", seconds=1.0, rounds=1, body=128)
    assert json.loads((tmp_path / "out" / "send_features.json").read_text()) == res
    assert set(res["modes"]) == {"sync", "transaction"}
    assert res["acked"] == res["in_topic"] > 0
    for mode, row in res["modes"].items():
        assert row["msgs_per_s"] > 0 and row["failures"] == 0, (mode, row)
    assert "transactional send (commit)" in send_features.render(res)
