"""examples/spark_pipeline.py runs as its README says, against a
standalone broker, and aggregates every order it produced."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_example_pipeline_end_to_end(broker: Any, tmp_path: pathlib.Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cmd = [
        sys.executable,
        str(REPO / "examples" / "spark_pipeline.py"),
        "--name-server",
        broker.namesrv,
        "--rows",
        "3000",
        "--work",
        str(tmp_path / "work"),
    ]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "produced: {'SEND_OK': 3000}" in first.stdout
    assert "orders aggregated: 3000" in first.stdout
    # again: 3,000 more orders; the stream goes on from its checkpoint
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "orders aggregated: 6000" in again.stdout
