"""Replication and failover: real broker processes on 127.0.0.1."""

from tests.integration.conftest import arun  # noqa: F401
