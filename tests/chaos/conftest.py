"""Fault, crash and abuse suite (docs/RELIABILITY.md states each promise and
the test here that backs it).

Every test runs real servers on 127.0.0.1 (subprocesses where a crash is
part of the scenario) and compares the sets of sent, acknowledged and
received message ids; none passes on "no exception" alone.

Two sizes: the default (CI) runs each scenario briefly; the long mode runs
the full counts of the issue (20+ crash cycles per flush mode, a million
fuzz inputs, 1,000 idle connections, ...):

    python -m pytest tests/chaos                  # CI subset, a few minutes
    python -m pytest tests/chaos --long           # full counts
    PYRMQ_CHAOS_LONG=1 python -m pytest tests/chaos

Each test prints its figures as one `CHAOS {json}` line (run with -s to see
them, or collect them with tests/chaos/figures.py); RELIABILITY.md quotes
the figures of a long run."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

# The integration suite's bounded-loop runner, shared here.
from tests.integration.conftest import arun  # noqa: F401


@pytest.fixture(scope="session")
def long_mode(request: pytest.FixtureRequest) -> bool:
    """True for the full counts, False for the CI subset."""
    return bool(request.config.getoption("--long")) or os.environ.get(
        "PYRMQ_CHAOS_LONG", ""
    ) not in ("", "0")


def scale(long_mode: bool, ci: int, full: int) -> int:
    """The count for this mode: `ci` by default, `full` with --long."""
    return full if long_mode else ci


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Any:
    """report(**figures): print the test's figures as one CHAOS json line
    (and append it to $PYRMQ_CHAOS_FIGURES when set)."""

    def emit(**figures: Any) -> None:
        line = json.dumps({"test": request.node.nodeid, **figures}, sort_keys=True)
        print(f"\nCHAOS {line}", file=sys.stderr)
        path = os.environ.get("PYRMQ_CHAOS_FIGURES")
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    return emit
