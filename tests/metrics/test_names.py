"""The metric table is the one list: every name the dashboard, the alert
rules and the docs use is in pyrmq/metrics/names.py, and the docs point to
the table instead of copying it."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

from pyrmq.metrics.names import BY_NAME, METRICS, markdown_table

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME = re.compile(r"\b(?:rocketmq|pyrmq)_[a-z_]+\b")
SUFFIXES = ("_bucket", "_count", "_sum")


def _known(name: str) -> bool:
    return name in BY_NAME or any(
        name.endswith(s) and name.removesuffix(s) in BY_NAME for s in SUFFIXES
    )


def _exprs(obj: object) -> list[str]:
    if isinstance(obj, dict):
        return [e for k, v in obj.items() for e in ([v] if k == "expr" else _exprs(v))]
    if isinstance(obj, list):
        return [e for v in obj for e in _exprs(v)]
    return []


def test_dashboard_and_alerts_use_only_table_names() -> None:
    dash = json.loads((ROOT / "deploy" / "grafana" / "pyrmq.json").read_text())
    exprs = _exprs(dash["panels"]) + [
        v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)
    ]
    exprs.append((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    used = {n for e in exprs for n in NAME.findall(e)}
    unknown = sorted(n for n in used if not _known(n))
    assert unknown == []
    assert len(used) >= 15


def test_the_table_prints_and_the_docs_point_to_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pyrmq.metrics"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout.strip() == markdown_table()
    assert all(f"`{m.name}`" in out.stdout for m in METRICS)
    doc = (ROOT / "docs" / "METRICS.md").read_text()
    assert "pyrmq/metrics/names.py" in doc and "python -m pyrmq.metrics" in doc
    # not copied: a copy would drift
    assert sum(f"`{m.name}`" in doc for m in METRICS) < len(METRICS) // 2
