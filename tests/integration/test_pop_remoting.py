"""POP over the remoting protocol, as a separate proxy sends it
(pyrmq/broker/processor/pop.py has the wire contract): POP_MESSAGE with
long polling, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, the dead-lettering
CONSUMER_SEND_MSG_BACK with extraInfo, GET_TOPIC_CONFIG and
GET_SUBSCRIPTIONGROUP_CONFIG, and every error answer with its code and
remark. Real brokers on 127.0.0.1, real sockets; each test compares the
messages sent with those received."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import rmqcore
from pyrmq.remoting import RemotingClient, RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .helpers import cluster, create_topic, props, pull_all, send_ok, simple

NO_MESSAGE_CODES = (R.POLLING_TIMEOUT,)


async def create_group(cl: RemotingClient, a: str, group: str, **extra: Any) -> None:
    cfg = {"groupName": group, "consumeEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16}
    cfg.update(extra)
    r = await simple(cl, a, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(cfg).encode())
    assert r.code == R.SUCCESS, r


def pop_fields(
    topic: str,
    group: str,
    *,
    n: int = 32,
    invisible: int = 30_000,
    poll: int = 0,
    queue_id: int = -1,
    **extra: Any,
) -> dict[str, str]:
    f: dict[str, Any] = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "maxMsgNums": n,
        "invisibleTime": invisible,
        "pollTime": poll,
        "bornTime": int(time.time() * 1000),
        "initMode": 0,
        "expType": "TAG",
        "exp": "*",
        "order": "false",
        "attemptId": "a1",
    }
    f.update(extra)
    return {k: str(v) for k, v in f.items() if v is not None}


async def pop(
    cl: RemotingClient, a: str, topic: str, group: str, timeout: float = 10.0, **kw: Any
) -> RemotingCommand:
    return await cl.invoke(
        a, RemotingCommand(RC.POP_MESSAGE, pop_fields(topic, group, **kw)), timeout
    )


def records(r: RemotingCommand) -> list[dict[str, Any]]:
    """The popped records, each with its properties decoded ("props")."""
    assert r.code == R.SUCCESS, r
    out = rmqcore.decode_records(r.body, True)
    for rec in out:
        rec["props"] = rmqcore.decode_properties(rec["properties"])
        assert rec["props"]["POP_CK"], rec
    for k in ("popTime", "invisibleTime", "reviveQid", "restNum"):
        int(r.ext_fields[k])
    assert r.ext_fields["msgOffsetInfo"] and r.ext_fields["startOffsetInfo"], r
    return out


async def pop_until(
    cl: RemotingClient, a: str, topic: str, group: str, want: int, deadline: float = 20.0, **kw: Any
) -> list[dict[str, Any]]:
    """Pop (long polling) until `want` records came or the deadline passed."""
    got: list[dict[str, Any]] = []
    end = time.monotonic() + deadline
    for _ in range(1000):
        if len(got) >= want or time.monotonic() > end:
            break
        r = await pop(cl, a, topic, group, poll=500, **kw)
        if r.code in NO_MESSAGE_CODES:
            continue
        got.extend(records(r))
    return got


async def ack(
    cl: RemotingClient, a: str, topic: str, group: str, rec: dict[str, Any]
) -> RemotingCommand:
    return await simple(
        cl, a, RC.ACK_MESSAGE, consumerGroup=group, topic=topic, queueId=rec["queue_id"],
        offset=rec["queue_offset"], extraInfo=rec["props"]["POP_CK"],
    )  # fmt: skip


def bodies(recs: list[dict[str, Any]]) -> set[bytes]:
    return {bytes(r["body"]) for r in recs}


def test_pop_long_polling(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            await create_topic(cl, a, "PopLp")
            # nothing there: pollTime 0 answers at once, a short poll after it
            for poll in (0, 200):
                r = await pop(cl, a, "PopLp", "G", poll=poll)
                assert r.code == R.POLLING_TIMEOUT and not r.body, r
                assert r.ext_fields["restNum"] == "0" and r.ext_fields["msgOffsetInfo"] == ""
            waiting = asyncio.create_task(pop(cl, a, "PopLp", "G", poll=20_000, timeout=25))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await send_ok(cl, a, "PopLp", b"late", 1, props(TAGS="t1", KEYS="k1"))
            # the arrival answers the pop, long before its 20 s poll ends
            # (which would find the message too)
            done, _ = await asyncio.wait([waiting], timeout=15)
            assert done, "the arrival did not wake the waiting pop"
            r = waiting.result()
            (rec,) = records(r)
            assert bytes(rec["body"]) == b"late" and rec["topic"] == "PopLp"
            assert rec["queue_id"] == 1 and rec["queue_offset"] == 0
            assert rec["props"]["TAGS"] == "t1" and rec["props"]["KEYS"] == "k1"
            assert r.ext_fields["startOffsetInfo"] == "0 1 0", r
            assert r.ext_fields["msgOffsetInfo"] == "0 1 0", r
            assert r.ext_fields["invisibleTime"] == "30000" and r.ext_fields["reviveQid"] == "0"
            assert (await ack(cl, a, "PopLp", "G", rec)).code == R.SUCCESS
            # a batch across queues, and a tag filter
            sent = {f"m{i}".encode() for i in range(6)}
            for i, body in enumerate(sorted(sent)):
                await send_ok(cl, a, "PopLp", body, i % 2, props(TAGS="a" if i % 3 else "b"))
            got = await pop_until(cl, a, "PopLp", "F", 4, exp="a")
            assert bodies(got) == {b for i, b in enumerate(sorted(sent)) if i % 3}
            got = await pop_until(cl, a, "PopLp", "G", 6)
            assert bodies(got) == sent

    arun(main())


def test_pop_ack_nothing_redelivered(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            await create_topic(cl, a, "PopAck", 4)
            sent = {f"a{i}".encode() for i in range(8)}
            for i, body in enumerate(sorted(sent)):
                await send_ok(cl, a, "PopAck", body, i % 4)
            got = await pop_until(cl, a, "PopAck", "G", 8, invisible=1000)
            assert bodies(got) == sent and len(got) == 8
            for rec in got:
                r = await ack(cl, a, "PopAck", "G", rec)
                assert r.code == R.SUCCESS, r
            # acked twice: the handle is spent
            r = await ack(cl, a, "PopAck", "G", got[0])
            assert r.code == R.NO_MESSAGE and "expired" in r.remark, r
            await asyncio.sleep(1.5)  # past the invisible time: nothing comes back
            r = await pop(cl, a, "PopAck", "G", poll=1000)
            assert r.code == R.POLLING_TIMEOUT, r

    arun(main())


def test_pop_without_ack_is_redelivered(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            await create_topic(cl, a, "PopRe")
            sent = {f"r{i}".encode() for i in range(3)}
            for i, body in enumerate(sorted(sent)):
                await send_ok(cl, a, "PopRe", body, i % 2)
            first = await pop_until(cl, a, "PopRe", "G", 3, invisible=1000)
            assert bodies(first) == sent
            again = await pop_until(cl, a, "PopRe", "G", 3, deadline=30)
            assert bodies(again) == sent
            for rec in again:
                # read from %RETRY%G, shown under the topic asked for
                assert rec["topic"] == "PopRe" and rec["props"]["RETRY_TOPIC"] == "PopRe", rec
                assert rec["reconsume_times"] == 1
                assert (await ack(cl, a, "PopRe", "G", rec)).code == R.SUCCESS
            # the first handles died with the redelivery
            r = await ack(cl, a, "PopRe", "G", first[0])
            assert r.code == R.NO_MESSAGE, r
            r = await pop(cl, a, "PopRe", "G", poll=300)
            assert r.code == R.POLLING_TIMEOUT, r

    arun(main())


def test_change_invisible_time_gives_a_new_handle(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            await create_topic(cl, a, "PopCi", 1)
            await send_ok(cl, a, "PopCi", b"ci", 0)
            (rec,) = await pop_until(cl, a, "PopCi", "G", 1, invisible=1000)
            old = rec["props"]["POP_CK"]
            r = await simple(
                cl, a, RC.CHANGE_MESSAGE_INVISIBLETIME, consumerGroup="G", topic="PopCi",
                queueId=0, offset=0, extraInfo=old, invisibleTime=60_000,
            )  # fmt: skip
            assert r.code == R.SUCCESS, r
            new = r.ext_fields["extraInfo"]
            assert new != old and r.ext_fields["invisibleTime"] == "60000"
            assert int(r.ext_fields["popTime"]) > 0 and r.ext_fields["reviveQid"] == "0"
            r = await simple(cl, a, RC.ACK_MESSAGE, consumerGroup="G", topic="PopCi", extraInfo=old)
            assert r.code == R.NO_MESSAGE, r
            await asyncio.sleep(1.5)  # the first invisible time is over: not redelivered
            r = await pop(cl, a, "PopCi", "G", poll=500)
            assert r.code == R.POLLING_TIMEOUT, r
            r = await simple(cl, a, RC.ACK_MESSAGE, consumerGroup="G", topic="PopCi", extraInfo=new)
            assert r.code == R.SUCCESS, r

    arun(main())


def test_orderly_group_one_queue_at_a_time(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            await create_topic(cl, a, "PopFifo", 2)
            await create_group(cl, a, "OG", consumeMessageOrderly=True)
            sent = {f"q{q}-{i}".encode(): q for q in (0, 1) for i in range(3)}
            for body, q in sent.items():
                await send_ok(cl, a, "PopFifo", body, q)
            got: list[dict[str, Any]] = []
            seen_queues: list[int] = []
            for _ in range(50):
                if len(got) >= len(sent):
                    break
                r = await pop(cl, a, "PopFifo", "OG", n=1, poll=300)
                if r.code == R.POLLING_TIMEOUT:
                    continue
                (rec,) = records(r)
                # while it is out, its queue gives nothing more
                q = rec["queue_id"]
                seen_queues.append(q)
                r = await pop(cl, a, "PopFifo", "OG", n=32, queue_id=q)
                assert r.code == R.POLLING_TIMEOUT, r
                got.append(rec)
                assert (await ack(cl, a, "PopFifo", "OG", rec)).code == R.SUCCESS
            assert bodies(got) == set(sent)
            for q in (0, 1):  # each queue in its order
                order = [bytes(r["body"]) for r in got if r["queue_id"] == q]
                assert order == [f"q{q}-{i}".encode() for i in range(3)], order

    arun(main())


def test_dead_letter_by_send_back_with_extra_info(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            await create_topic(cl, a, "PopDlq", 1)
            sent = {b"d0", b"d1"}
            for body in sorted(sent):
                await send_ok(cl, a, "PopDlq", body, 0)
            got = await pop_until(cl, a, "PopDlq", "DG", 2)
            assert bodies(got) == sent
            for rec in got:
                r = await simple(
                    cl, a, RC.CONSUMER_SEND_MSG_BACK, group="DG", originTopic="PopDlq",
                    offset=rec["commit_log_offset"], delayLevel=-1,
                    originMsgId=rec["props"].get("UNIQ_KEY", ""), extraInfo=rec["props"]["POP_CK"],
                )  # fmt: skip
                assert r.code == R.SUCCESS, r
                # dead-lettered and acked: the handle is spent
                r = await simple(
                    cl, a, RC.CONSUMER_SEND_MSG_BACK, group="DG", originTopic="PopDlq",
                    delayLevel=-1, extraInfo=rec["props"]["POP_CK"],
                )  # fmt: skip
                assert r.code == R.NO_MESSAGE, r
                assert (await ack(cl, a, "PopDlq", "DG", rec)).code == R.NO_MESSAGE
            dlq = await pull_all(cl, a, "%DLQ%DG", 0, group="DLQREADER")
            assert {bytes(m["body"]) for m in dlq} == sent
            r = await pop(cl, a, "PopDlq", "DG", poll=300)
            assert r.code == R.POLLING_TIMEOUT, r

    arun(main())


def test_get_topic_and_subscription_group_config(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, auto_create_subscription_group=False) as (c, cl):
            a = c.broker_addr
            await create_topic(cl, a, "PopCfg", 3)
            r = await simple(cl, a, RC.GET_TOPIC_CONFIG, topic="PopCfg")
            assert r.code == R.SUCCESS, r
            tc = json.loads(r.body)
            all_tc = json.loads((await simple(cl, a, RC.GET_ALL_TOPIC_CONFIG)).body)
            assert tc == all_tc["topicConfigTable"]["PopCfg"]
            assert tc["readQueueNums"] == 3 and tc["perm"] == 6 and "attributes" in tc
            r = await simple(cl, a, RC.GET_TOPIC_CONFIG, topic="NoSuchTopic")
            assert r.code == R.TOPIC_NOT_EXIST and "NoSuchTopic" in r.remark, r

            await create_group(cl, a, "CfgG", retryMaxTimes=5)
            r = await simple(cl, a, RC.GET_SUBSCRIPTIONGROUP_CONFIG, group="CfgG")
            assert r.code == R.SUCCESS, r
            sg = json.loads(r.body)
            all_sg = json.loads((await simple(cl, a, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body)
            assert sg == all_sg["subscriptionGroupTable"]["CfgG"] and sg["retryMaxTimes"] == 5
            r = await simple(cl, a, RC.GET_SUBSCRIPTIONGROUP_CONFIG, group="NoSuchGroup")
            assert r.code == R.SUBSCRIPTION_GROUP_NOT_EXIST and "NoSuchGroup" in r.remark, r
            r = await simple(cl, a, RC.GET_TOPIC_CONFIG)
            assert r.code == R.SYSTEM_ERROR and "topic" in r.remark, r
        # auto-creation on: an unknown group is made, as a pop would make it
        async with cluster(tmp_path / "auto") as (c, cl):
            r = await simple(cl, c.broker_addr, RC.GET_SUBSCRIPTIONGROUP_CONFIG, group="NewG")
            assert r.code == R.SUCCESS and json.loads(r.body)["groupName"] == "NewG", r

    arun(main())


def test_errors_answered_and_broker_still_serving(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path, auto_create_subscription_group=False) as (c, cl):
            a = c.broker_addr
            await create_topic(cl, a, "PopErr", 1)
            await create_group(cl, a, "EG")
            await create_group(cl, a, "Off", consumeEnable=False)
            await send_ok(cl, a, "PopErr", b"e0", 0)

            async def expect(code: int, words: str, cmd_code: int, **fields: Any) -> None:
                r = await cl.invoke(
                    a, RemotingCommand(cmd_code, {k: str(v) for k, v in fields.items()}), 5.0
                )
                assert r.code == code and words in (r.remark or ""), (fields, r)

            def pf(**kw: Any) -> dict[str, str]:
                base = {"topic": "PopErr", "group": "EG"}
                base.update({k: kw.pop(k) for k in ("topic", "group") if k in kw})
                return pop_fields(base["topic"], base["group"], **kw)

            P = RC.POP_MESSAGE
            await expect(R.SUBSCRIPTION_GROUP_NOT_EXIST, "NoG", P, **pf(group="NoG"))
            await expect(R.NO_PERMISSION, "Off", P, **pf(group="Off"))
            await expect(R.TOPIC_NOT_EXIST, "NoTopic", P, **pf(topic="NoTopic"))
            await expect(R.SUBSCRIPTION_PARSE_FAILED, "", P, **pf(expType="SQL92", exp="a >"))
            await expect(R.SUBSCRIPTION_PARSE_FAILED, "", P, **pf(expType="XPATH", exp="x"))
            await expect(R.INVALID_PARAMETER, "invisibleTime", P, **pf(invisible=10))
            await expect(R.INVALID_PARAMETER, "maxMsgNums", P, **pf(n=0))
            await expect(R.INVALID_PARAMETER, "maxMsgNums", P, **pf(n=33))
            await expect(R.INVALID_PARAMETER, "pollTime", P, **pf(poll=20_001))
            await expect(R.INVALID_PARAMETER, "pollTime", P, **pf(poll=-1))
            await expect(R.INVALID_PARAMETER, "group", P, **pf(group="x" * 300))
            await expect(R.SYSTEM_ERROR, "queueId", P, **pf(queue_id=9))
            missing = pf()
            del missing["consumerGroup"]
            await expect(R.SYSTEM_ERROR, "consumerGroup", P, **missing)
            await expect(R.SYSTEM_ERROR, "maxMsgNums", P, **pf(n="ten"))
            await expect(R.SYSTEM_ERROR, "pollTime", P, **{**pf(), "pollTime": ""})

            ack_f = {"consumerGroup": "EG", "topic": "PopErr"}
            bad = "v1 0 0 0 1 1000 broker-a"
            A, CI = RC.ACK_MESSAGE, RC.CHANGE_MESSAGE_INVISIBLETIME
            await expect(R.NO_MESSAGE, "expired", A, **ack_f, extraInfo=bad)
            await expect(R.NO_MESSAGE, "not given by pyrmq", A, **ack_f, extraInfo="garbage")
            await expect(R.NO_MESSAGE, "broker-z", A, **ack_f, extraInfo=bad[:-1] + "z")
            await expect(R.SYSTEM_ERROR, "extraInfo", A, **ack_f)
            await expect(R.SUBSCRIPTION_GROUP_NOT_EXIST, "NoG", A, consumerGroup="NoG",
                         topic="PopErr", extraInfo=bad)  # fmt: skip
            await expect(R.TOPIC_NOT_EXIST, "NoT", A, consumerGroup="EG", topic="NoT",
                         extraInfo=bad)  # fmt: skip
            await expect(R.NO_MESSAGE, "expired", CI, **ack_f, extraInfo=bad, invisibleTime=5000)
            await expect(R.INVALID_PARAMETER, "invisibleTime", CI, **ack_f, extraInfo=bad,
                         invisibleTime=1)  # fmt: skip
            await expect(R.SYSTEM_ERROR, "invisibleTime", CI, **ack_f, extraInfo=bad)
            await expect(R.NO_MESSAGE, "expired", RC.CONSUMER_SEND_MSG_BACK, group="EG",
                         originTopic="PopErr", delayLevel=-1, extraInfo=bad)  # fmt: skip
            await expect(R.INVALID_PARAMETER, "delayLevel", RC.CONSUMER_SEND_MSG_BACK,
                         group="EG", originTopic="PopErr", delayLevel=3, extraInfo=bad)  # fmt: skip

            # a handle given for another queue or offset is refused
            (rec,) = await pop_until(cl, a, "PopErr", "EG", 1)
            h = rec["props"]["POP_CK"]
            await expect(R.NO_MESSAGE, "names queue 0 offset 0", A, **ack_f, extraInfo=h,
                         queueId=0, offset=7)  # fmt: skip

            # still serving: the message acks, another comes and goes
            assert (await ack(cl, a, "PopErr", "EG", rec)).code == R.SUCCESS
            await send_ok(cl, a, "PopErr", b"e1", 0)
            got = await pop_until(cl, a, "PopErr", "EG", 1)
            assert bodies(got) == {b"e1"}
            assert (await ack(cl, a, "PopErr", "EG", got[0])).code == R.SUCCESS

        # a slave serves no POP
        async with cluster(
            tmp_path / "slave", broker_role="SLAVE", broker_id=1, ha_master_address="127.0.0.1:1"
        ) as (c, cl):
            for code, fields in (
                (RC.POP_MESSAGE, pop_fields("PopErr", "EG")),
                (RC.ACK_MESSAGE, {"consumerGroup": "EG", "topic": "T", "extraInfo": bad}),
            ):
                r = await cl.invoke(c.broker_addr, RemotingCommand(code, fields), 5.0)
                assert r.code == R.NO_PERMISSION and "is a slave now" in r.remark, r
                assert "POP is served by its master" in r.remark

    arun(main())


def test_a_body_that_does_not_inflate_is_left_out(arun, tmp_path):
    """A message flagged compressed (sysFlag bit 0) whose body is not zlib
    data cannot be handed out; it is skipped (logged), the queue goes on."""

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            await create_topic(cl, a, "PopZ", 1)
            await send_ok(cl, a, "PopZ", b"not zlib data", 0, sysflag=1)
            await send_ok(cl, a, "PopZ", b"fine", 0)
            got = await pop_until(cl, a, "PopZ", "G", 1)
            assert bodies(got) == {b"fine"}
            r = await pop(cl, a, "PopZ", "G", poll=300)
            assert r.code == R.POLLING_TIMEOUT, r

    arun(main())
