"""Regressions: the defects the request fuzzer (test_fuzz_handlers.py) found
once it sent every code the servers serve, one request each."""

from __future__ import annotations

from pyrmq.remoting import RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .helpers import cluster


def test_regression_role_changed_sent_two_way_is_answered(arun, tmp_path):
    """NOTIFY_BROKER_ROLE_CHANGED is one-way from a controller; sent as a
    request it went unanswered, its sender waiting out its timeout."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            cmd = RemotingCommand(RC.NOTIFY_BROKER_ROLE_CHANGED, {"masterEpoch": "x"})
            r = await cl.invoke(c.broker_addr, cmd, 5.0)
            assert r.code == R.SUCCESS, r

    arun(main())


def test_regression_register_broker_with_a_non_integer_master_epoch(arun, tmp_path):
    """REGISTER_BROKER's masterEpoch was parsed after the header check: a
    non-integer one escaped as an unhandled ValueError."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            head = {"brokerName": "evil", "brokerAddr": "127.0.0.9:1", "clusterName": "C",
                    "brokerId": "0", "masterEpoch": "TBW102"}  # fmt: skip
            r = await cl.invoke(c.namesrv_addr, RemotingCommand(RC.REGISTER_BROKER, head, b""))
            assert r.code == R.SYSTEM_ERROR and "bad register header" in (r.remark or ""), r
            assert c.namesrv is not None
            assert "evil" not in c.namesrv.routes.broker_addr_table

    arun(main())
