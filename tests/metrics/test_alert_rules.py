"""deploy/prometheus/alerts.yml, checked with promtool (Debian's
`prometheus` package; .ci/run installs it): the file is valid, and its
expressions, fed the values a real run exported (conftest.py's two
scrapes, as input series), fire for the lagging group and not for the
caught-up one. Alerts the run cannot produce (a full disk, a slow flush, a
slave behind) are also fed a synthetic value past their threshold, beside
the real one, which must not fire."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from ._scrape import series
from .conftest import GROUP_A, GROUP_B, RealRun

RULES = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian/Ubuntu: apt-get install prometheus; .ci/run "
    "installs it)",
)

#: one sample a minute: 5 minutes of the first scrape's values, then 20 of the second's
BEFORE, AFTER = 5, 20


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False
    )


def _selector(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _values(before: float, after: float) -> str:
    return " ".join([repr(before)] * BEFORE + [repr(after)] * AFTER)


def _input_series(run: RealRun) -> list[dict[str, str]]:
    """Every lag, committed-offset and storage sample of the two scrapes,
    as promtool input series (the first scrape's value, then the second's)."""
    out = []
    for name in (
        "rocketmq_consumer_lag_messages",
        "pyrmq_consumer_offset",
        "pyrmq_storage_disk_used_ratio",
        "pyrmq_storage_disk_warning_ratio",
        "rocketmq_storage_flush_behind_bytes",
        "pyrmq_replication_slave_behind_bytes",
    ):
        second = {json.dumps(ls, sort_keys=True): v for ls, v in series(run.second, name)}
        for labels, v in series(run.first, name):
            after = second.get(json.dumps(labels, sort_keys=True), v)
            out.append({"series": _selector(name, labels), "values": _values(v, after)})
    return out


def _alert(severity: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"exp_labels": {**labels, "severity": severity}}


def _without_annotations(tmp: pathlib.Path) -> pathlib.Path:
    """The rules without their annotations (promtool compares annotations
    exactly; their templates are checked by `promtool check rules`)."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    path = tmp / "alerts.json.yml"
    path.write_text(json.dumps(doc))
    return path


def test_rules_file_is_valid() -> None:
    r = _promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr


def test_alerts_on_a_real_runs_values(real_run: RealRun, tmp_path: pathlib.Path) -> None:
    run = real_run
    [(lagging, lag_b)] = series(run.first, "rocketmq_consumer_lag_messages", consumer_group=GROUP_B)
    [(caught_up, lag_a)] = series(
        run.first, "rocketmq_consumer_lag_messages", consumer_group=GROUP_A
    )
    assert lag_b > 0 and lag_a == 0
    [(node, disk)] = series(run.first, "pyrmq_storage_disk_used_ratio")
    [(_, warning)] = series(run.first, "pyrmq_storage_disk_warning_ratio")
    assert disk < warning  # the run's sends were taken
    inputs = _input_series(run)
    # synthetic, beside the real ones: a second broker past every threshold
    full = {**node, "node_id": "synthetic-broker"}
    inputs += [
        {"series": _selector("pyrmq_storage_disk_used_ratio", full), "values": "0.95x25"},
        {"series": _selector("pyrmq_storage_disk_warning_ratio", full), "values": "0.9x25"},
        {
            "series": _selector("rocketmq_storage_flush_behind_bytes", full),
            "values": f"{100 << 20}x25",
        },
        {
            "series": _selector("pyrmq_replication_slave_behind_bytes", {**full, "slave_id": "1"}),
            "values": f"{300 << 20}x25",
        },
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": inputs,
            "alert_rule_test": [
                # the lagging group's backlog grew between the scrapes (minute 5)
                {
                    "eval_time": "12m",
                    "alertname": "RocketMQConsumerLagGrowing",
                    "exp_alerts": [_alert("warning", lagging)],
                },
                # ... and its offsets never moved: stuck; the caught-up group is neither
                {
                    "eval_time": "15m",
                    "alertname": "RocketMQConsumerStuck",
                    "exp_alerts": [_alert("critical", lagging)],
                },
                {"eval_time": "22m", "alertname": "RocketMQConsumerLagGrowing", "exp_alerts": []},
                {
                    "eval_time": "10m",
                    "alertname": "RocketMQDiskAboveWarningRatio",
                    "exp_alerts": [_alert("critical", full)],
                },
                {
                    "eval_time": "10m",
                    "alertname": "RocketMQFlushBehind",
                    "exp_alerts": [_alert("warning", full)],
                },
                {
                    "eval_time": "10m",
                    "alertname": "RocketMQSlaveBehind",
                    "exp_alerts": [_alert("warning", {**full, "slave_id": "1"})],
                },
            ],
        }
    ]
    spec = {
        "rule_files": [str(_without_annotations(tmp_path))],
        "evaluation_interval": "1m",
        "tests": tests,
    }
    path = tmp_path / "alerts_test.yml"
    path.write_text(json.dumps(spec, indent=1))
    r = _promtool("test", "rules", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    # the expected lists are exact: the caught-up group fired nothing
    assert caught_up["consumer_group"] == GROUP_A
