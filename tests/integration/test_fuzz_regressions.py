"""Regressions: the defects the request fuzzer (test_fuzz_handlers.py) found
once it sent every code the servers serve, one request each."""

from __future__ import annotations

import json

from pyrmq.remoting import RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .fuzz_vocabulary import broker_config
from .helpers import cluster, heartbeat_body


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


def test_regression_retry_queue_nums_beyond_max_queue_nums(arun, tmp_path):
    """A subscription group (or the broker's retryQueueNums) with 2^31-1
    retry queues was taken; the group's first heartbeat created a %RETRY%
    topic that large, and GET_TOPIC_STATS_INFO of it looped over every
    queue on the event loop: the broker stopped serving. Both updates are
    refused now, and a group table from an older file cannot make a retry
    topic wider than maxQueueNums."""
    huge = 2**31 - 1
    old = tmp_path / "store" / "config" / "subscriptionGroup.json"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"subscriptionGroupTable": {
        "OldG": {"groupName": "OldG", "retryQueueNums": huge}}}))  # fmt: skip

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            body = json.dumps({"groupName": "WideG", "retryQueueNums": huge}).encode()
            r = await cl.invoke(
                a, RemotingCommand(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
            )
            assert r.code == R.INVALID_PARAMETER and "maxQueueNums" in (r.remark or ""), r
            assert c.broker is not None and c.broker.groups.get("WideG") is None
            before = await broker_config(cl, a)
            r = await cl.invoke(
                a, RemotingCommand(RC.UPDATE_BROKER_CONFIG, {}, f"retryQueueNums={huge}".encode())
            )
            assert r.code == R.INVALID_PARAMETER and "maxQueueNums" in (r.remark or ""), r
            assert await broker_config(cl, a) == before
            hb = heartbeat_body("old@1", "OldG", {"OldT": "*"})
            r = await cl.invoke(a, RemotingCommand(RC.HEART_BEAT, {}, hb))
            assert r.code == R.SUCCESS, r
            tc = c.broker.topics.get("%RETRY%OldG")
            assert tc is not None and tc.queue_nums == c.broker.topics.max_queue_nums
            r = await cl.invoke(
                a, RemotingCommand(RC.GET_TOPIC_STATS_INFO, {"topic": "%RETRY%OldG"}), 10.0
            )
            assert r.code == R.SUCCESS, r

    arun(main())


def test_regression_hostile_runtime_config_is_refused_whole(arun, tmp_path):
    """UPDATE_BROKER_CONFIG took a negative or meaningless brokerPermission,
    negative retryQueueNums, maxReconsumeTimes, shortPollingTimeMills and
    transferBySendfileMinBytes. Each is refused with a remark now, and a
    good change beside a bad one is not applied either."""
    bodies = [
        b"brokerPermission=-1\n",
        b"brokerPermission=2147483647\n",
        b"longPollingEnable=false\nbrokerPermission=16\n",
        b"retryQueueNums=-5\n",
        b"maxReconsumeTimes=-100\n",
        b"shortPollingTimeMills=-1\n",
        b"transferBySendfileMinBytes=-1\n",
        b"brokerPermission=4\nbrokerName=evil\n",
        b"maxReconsumeTimes=5\nnoSuchKey=1\n",
        b"longPollingEnable=false\nretryQueueNums=x\n",
    ]

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            before = await broker_config(cl, a)
            for body in bodies:
                r = await cl.invoke(a, RemotingCommand(RC.UPDATE_BROKER_CONFIG, {}, body))
                assert r.code in (R.INVALID_PARAMETER, R.NO_PERMISSION) and r.remark, (body, r)
                assert await broker_config(cl, a) == before, body

    arun(main())


def test_regression_subscription_group_body_nested_too_deep(arun, tmp_path):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with a body nested deeper than
    Python's recursion limit escaped as an unhandled RecursionError."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            for body in (b"[" * 50_000, b'{"groupName":"DeepG","x":' + b"[" * 50_000):
                cmd = RemotingCommand(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
                r = await cl.invoke(c.broker_addr, cmd)
                assert r.code == R.INVALID_PARAMETER and "RecursionError" in (r.remark or ""), r
            assert c.broker is not None and c.broker.groups.get("DeepG") is None

    arun(main())


def test_regression_consume_message_directly_offset_beyond_a_long(arun, tmp_path):
    """CONSUME_MESSAGE_DIRECTLY with an offset message id whose 8 offset
    bytes exceed a Java long escaped as an unhandled OverflowError from the
    store lookup."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            ext = {"consumerGroup": "G", "clientId": "c@1", "topic": "T",
                   "msgId": "7F00000100002A9FFFFFFFFFFFFFFFFF"}  # fmt: skip
            cmd = RemotingCommand(RC.CONSUME_MESSAGE_DIRECTLY, ext)
            r = await cl.invoke(c.broker_addr, cmd)
            assert r.code == R.SYSTEM_ERROR and "no message with offset id" in (r.remark or ""), r

    arun(main())
