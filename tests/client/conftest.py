"""Client tests: real NameServer + Broker(s) on 127.0.0.1 (LocalCluster in
process, or `pyrmq` subprocesses where a broker must be killed), driven by
pyrmq's own Producer / PushConsumer / PullConsumer over TCP.

`arun(coro, timeout=...)` runs a coroutine on this test's own event loop,
bounded in time; at teardown no task may be left pending."""

from __future__ import annotations

from tests.integration.conftest import arun  # noqa: F401  (fixture re-export)
