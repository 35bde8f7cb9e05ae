"""Smoke test of bench.filter_pull: every case consumes exactly the share
of the backlog its filter selects (the run raises otherwise) from a real
`pyrmq standalone` with enablePropertyFilter, and the table names every
case. Rates are never compared (other work shares the machine)."""

from __future__ import annotations

import json
import pathlib

from bench import filter_pull


def test_filter_pull_quick(tmp_path: pathlib.Path) -> None:
    res = filter_pull.run(tmp_path / "out", messages=2_000, rounds=1, body=64)
    assert json.loads((tmp_path / "out" / "filter_pull.json").read_text()) == res
    assert set(res["cases"]) == set(filter_pull.CASES)
    for case, row in res["cases"].items():
        assert row["delivered_per_s"] > 0 and row["scanned_per_s"] > 0, (case, row)
    table = filter_pull.render(res)
    assert "sql 10% (p < 10)" in table and "tag 10% (TagA)" in table
