"""Replication and failover: real broker and controller processes on
127.0.0.1. `--long` (or PYRMQ_CHAOS_LONG=1) runs the full counts."""

from tests.chaos.conftest import long_mode  # noqa: F401
from tests.integration.conftest import arun  # noqa: F401
