"""AdminClient (pyrmq.admin) against an in-process LocalCluster, and the
`pyrmq admin` / `pyrmq produce` / `pyrmq consume` commands run as
subprocesses against a `pyrmq standalone` subprocess.

No pytest-asyncio: `arun(coro)` runs a coroutine on the test's own loop,
bounded in time. Every subprocess has a timeout; the standalone server is
stopped by its PID (SIGTERM, then SIGKILL if it does not exit)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest

from pyrmq.admin import AdminClient
from pyrmq.client.instance import ClientInstance
from pyrmq.common.errors import (
    ClientError,
    QueryNotFoundError,
    RemotingError,
    TopicNotExistError,
)
from pyrmq.common.message import MessageQueue
from pyrmq.remoting import RemotingCommand, RequestCode
from pyrmq.testing import LocalCluster
from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess

T = TypeVar("T")
REPO = pathlib.Path(__file__).resolve().parents[2]
READY_TIMEOUT = 30.0
CLI_TIMEOUT = 60.0


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- AdminClient against LocalCluster ----------------------------------------------------


def test_api_topics_cluster_and_status(arun, tmp_path):
    async def main() -> None:
        async with (
            LocalCluster(str(tmp_path)) as c,
            AdminClient(c.namesrv_addr, timeout=5.0) as admin,
        ):
            created = await admin.create_topic(
                "ApiT", read_queue_nums=3, write_queue_nums=3, broker_addr=c.broker_addr
            )
            assert created.brokers == [c.broker_addr]
            assert "ApiT" in await admin.topic_list()
            route = await admin.topic_route("ApiT")
            assert route.queue_datas[0].read_queue_nums == 3
            for i in range(5):
                await admin.send_message("ApiT", f"m{i}", tags="t", keys=f"key{i}")
            r = await admin.send_message("ApiT", "pinned", broker_name="broker-a", queue_id=2)
            assert r.message_queue == MessageQueue("ApiT", "broker-a", 2)
            st = await admin.topic_status("ApiT")
            assert [q.queue_id for q in st.queues] == [0, 1, 2]
            assert st.total_messages == 6 and all(q.min_offset == 0 for q in st.queues)
            assert all(q.last_update_timestamp > 0 for q in st.queues if q.max_offset)
            cl = await admin.cluster_list()
            (b,) = cl.brokers
            assert (b.cluster, b.broker_name, b.broker_id, b.addr) == (
                "DefaultCluster",
                "broker-a",
                0,
                c.broker_addr,
            )
            assert int(b.runtime["commitLogMaxOffset"]) > 0 and b.error is None
            assert cl.clusters == {"DefaultCluster": ["broker-a"]}
            status = await admin.broker_status(c.broker_addr)
            assert status["brokerVersionDesc"] == "pyrmq"
            # RocketMQ's keys: stored per second over 10 s, 60 s, 600 s (the
            # 6 sends above, once the stats are sampled), the disk's use
            c.broker.stats.sample()
            status = await admin.broker_status(c.broker_addr)
            put = [float(x) for x in status["putTps"].split()]
            assert len(put) == 3 and all(x >= 0 for x in put) and max(put) > 0, put
            assert len(status["getTransferedTps"].split()) == 3
            assert 0.0 < float(status["commitLogDiskRatio"]) <= 1.0
            # cluster-wide create, then delete
            await admin.create_topic("ApiT2", 2, 2, cluster="DefaultCluster")
            await admin.topic_route("ApiT2")
            deleted = await admin.delete_topic("ApiT2", "DefaultCluster")
            assert deleted.brokers == [c.broker_addr]
            with pytest.raises(TopicNotExistError):
                await admin.topic_route("ApiT2")
            with pytest.raises(ClientError, match="unknown"):
                await admin.create_topic("ApiT3", cluster="NoSuchCluster")

    arun(main())


def test_api_message_queries(arun, tmp_path):
    async def main() -> None:
        async with (
            LocalCluster(str(tmp_path)) as c,
            AdminClient(c.namesrv_addr) as admin,
        ):
            await admin.create_topic("QryT", 2, 2, broker_addr=c.broker_addr)
            sent = [
                await admin.send_message("QryT", f"body{i}", keys=["common", f"k{i}"])
                for i in range(6)
            ]
            by_key = await admin.query_msg_by_key("QryT", "common")
            assert sorted(m.body for m in by_key) == [b"body%d" % i for i in range(6)]
            assert all(m.broker_name == "broker-a" for m in by_key)
            assert [m.body for m in await admin.query_msg_by_key("QryT", "k3")] == [b"body3"]
            assert len(await admin.query_msg_by_key("QryT", "common", max_num=2)) == 2
            assert await admin.query_msg_by_key("QryT", "absent") == []
            # offset msg id, then UNIQ_KEY (needs the topic)
            (m,) = await admin.query_msg_by_id(sent[1].offset_msg_id)
            assert m.body == b"body1" and m.msg_id == sent[1].msg_id
            assert m.broker_name == "broker-a"
            (m,) = await admin.query_msg_by_id(sent[2].msg_id, "QryT")
            assert m.body == b"body2"
            with pytest.raises(QueryNotFoundError, match="give its topic"):
                await admin.query_msg_by_id(sent[2].msg_id)
            with pytest.raises(QueryNotFoundError):
                await admin.query_msg_by_id("not-hex")
            with pytest.raises(QueryNotFoundError):
                await admin.query_msg_by_id("F" * 32, "QryT")
            # by queue offset
            mq = sent[4].message_queue
            m = await admin.query_msg_by_offset(
                "QryT", mq.broker_name, mq.queue_id, sent[4].queue_offset
            )
            assert m.body == b"body4"
            with pytest.raises(QueryNotFoundError, match="no message at offset"):
                await admin.query_msg_by_offset("QryT", "broker-a", 0, 999)
            # consume without a group
            got = await admin.consume_message("QryT", 100)
            assert sorted(m.body for m in got) == sorted(b"body%d" % i for i in range(6))
            assert len(await admin.consume_message("QryT", 4)) == 4
            q0 = await admin.consume_message("QryT", 100, broker_name="broker-a", queue_id=0)
            assert q0 and all(m.queue_id == 0 for m in q0)
            tail = await admin.consume_message("QryT", 100, queue_id=0, offset=1)
            assert [m.queue_offset for m in tail] == [m.queue_offset for m in q0][1:]
            future = int(time.time() * 1000) + 60_000
            assert await admin.consume_message("QryT", 100, begin_ms=future) == []
            assert await admin.consume_message("QryT", 100, end_ms=0) == []
            with pytest.raises(ClientError):
                await admin.consume_message("QryT", 10, queue_id=7)

    arun(main())


def test_api_consumer_progress_and_offline_reset(arun, tmp_path):
    async def main() -> None:
        async with (
            LocalCluster(str(tmp_path)) as c,
            AdminClient(c.namesrv_addr) as admin,
        ):
            await admin.create_topic("ProgT", 2, 2, broker_addr=c.broker_addr)
            first = [await admin.send_message("ProgT", f"a{i}") for i in range(4)]
            await asyncio.sleep(0.05)
            middle = int(time.time() * 1000)
            await asyncio.sleep(0.05)
            for i in range(4):
                await admin.send_message("ProgT", f"b{i}")
            p = await admin.consumer_progress("PG", "ProgT")
            assert p.topics == ["ProgT"] and p.clients == []
            assert p.diff_total == 8
            # a consumer of PG commits offsets: the lag drops
            api, a = admin.api, c.broker_addr
            for q in range(2):
                await api.update_consumer_offset(a, "PG", MessageQueue("ProgT", "broker-a", q), 3)
            p = await admin.consumer_progress("PG", "ProgT")
            assert [q.consumer_offset for q in p.queues] == [3, 3]
            assert p.diff_total == 2
            # offline group: per-queue search + commit
            r = await admin.reset_offset_by_time("PG", "ProgT", middle)
            assert r.notified_brokers == []
            per_queue = {q.queue_id: q for q in r.queues}
            n_first = [sum(1 for s in first if s.message_queue.queue_id == q) for q in (0, 1)]
            assert [per_queue[q].old_offset for q in (0, 1)] == [3, 3]
            assert [per_queue[q].new_offset for q in (0, 1)] == n_first
            p = await admin.consumer_progress("PG", "ProgT")
            assert p.diff_total == 4
            # without force an offset only moves backwards
            r = await admin.reset_offset_by_time("PG", "ProgT", -1, force=False)
            assert [q.new_offset for q in r.queues] == n_first
            r = await admin.reset_offset_by_time("PG", "ProgT", 0, force=False)
            assert [q.new_offset for q in r.queues] == [0, 0]
            r = await admin.reset_offset_by_time("PG", "ProgT", -1)
            assert (await admin.consumer_progress("PG", "ProgT")).diff_total == 0
            # no topic: the topics the group has offsets of (GET_CONSUME_STATS)
            p = await admin.consumer_progress("PG")
            assert p.topics == ["ProgT"] and p.diff_total == 0
            # a group with no offset and no retry topic: its topics are unknown
            with pytest.raises(ClientError, match="give the topic"):
                await admin.consumer_progress("NoOffsetsG")

    arun(main())


def test_api_reset_notifies_online_consumer(arun, tmp_path):
    """INVOKE_BROKER_TO_RESET_OFFSET: the broker commits the offsets and
    sends RESET_CONSUMER_CLIENT_OFFSET (220) to the group's consumers."""

    async def main() -> None:
        async with (
            LocalCluster(str(tmp_path)) as c,
            AdminClient(c.namesrv_addr) as admin,
        ):
            await admin.create_topic("OnT", 2, 2, broker_addr=c.broker_addr)
            for i in range(6):
                await admin.send_message("OnT", f"x{i}")
            got: asyncio.Queue[RemotingCommand] = asyncio.Queue()
            member = ClientInstance(c.namesrv_addr)
            member.request_handlers[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] = got.put_nowait
            member.consumer_data = lambda: [
                {
                    "groupName": "OnG",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "subscriptionDataSet": [{"topic": "OnT", "subString": "*"}],
                }
            ]
            try:
                await member.update_topic_route("OnT")
                assert await member.send_heartbeat_to_all_brokers() == 1
                # the broker registers the new %RETRY%OnG with the name server
                # right after the heartbeat, asynchronously
                for _ in range(100):
                    try:
                        p = await admin.consumer_progress("OnG")  # only %RETRY%OnG
                        break
                    except ClientError:
                        await asyncio.sleep(0.05)
                assert p.topics == ["%RETRY%OnG"] and p.clients == [member.client_id]
                r = await admin.reset_offset_by_time("OnG", "OnT", -1)
                assert r.notified_brokers == [c.broker_addr]
                assert sorted(q.new_offset for q in r.queues) == [3, 3]
                cmd = await asyncio.wait_for(got.get(), 5.0)
                assert cmd.ext_fields["group"] == "OnG" and cmd.ext_fields["topic"] == "OnT"
                assert cmd.ext_fields["timestamp"] == "-1" and cmd.is_oneway
                body = json.loads(cmd.body)
                assert sorted(
                    (e["brokerName"], e["topic"], e["queueId"], e["offset"])
                    for e in body["offsetTable"]
                ) == [("broker-a", "OnT", 0, 3), ("broker-a", "OnT", 1, 3)]
                p = await admin.consumer_progress("OnG", "OnT")
                # GET_CONSUME_STATS with a topic: that topic only, as mqadmin shows
                assert p.diff_total == 0 and p.topics == ["OnT"]
            finally:
                await member.shutdown()

    arun(main())


def test_api_unreachable_name_server(arun):
    async def main() -> None:
        async with AdminClient(f"127.0.0.1:{free_port()}", timeout=2.0) as admin:
            with pytest.raises(RemotingError, match="no name server answered"):
                await admin.topic_list()

    arun(main())


# -- the command line against `pyrmq standalone` -------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    srv = StandaloneProcess(tmp_path_factory.mktemp("admin-cli"), SMALL_STORE)
    srv.start()
    try:
        yield srv
    finally:
        rc = srv.stop()
    assert rc == 0, f"standalone exit status {rc}:\n{srv.log.read_text()[-4000:]}"


def pyrmq(*args: str, input: str | None = None, timeout: float = CLI_TIMEOUT) -> Any:
    """`python -m pyrmq ARGS`; the CompletedProcess (text)."""
    return subprocess.run(
        [sys.executable, "-m", "pyrmq", *args],
        cwd=REPO,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def ok(*args: str, input: str | None = None) -> str:
    r = pyrmq(*args, input=input)
    assert r.returncode == 0, (args, r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    return str(r.stdout)


def ok_json(*args: str) -> Any:
    return json.loads(ok(*args, "--json"))


def failed(*args: str) -> str:
    """Run a command that must fail: exit 1, one `error:` line, no traceback."""
    r = pyrmq(*args)
    assert r.returncode == 1, (args, r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return str(lines[0])


def test_cli_topic_and_cluster_commands(server):
    n, b = server.namesrv, server.broker
    out = ok(
        "admin", "updateTopic", "-n", n, "-c", "DefaultCluster", "-t", "CliT", "-r", "4", "-w", "4"
    )
    assert f"create topic to {b} success" in out and "readQueueNums=4" in out
    # the old dashed name and long options still work
    ok(
        "admin",
        "update-topic",
        "-n",
        n,
        "-b",
        b,
        "-t",
        "CliOld",
        "--read-queues",
        "2",
        "--write-queues",
        "2",
    )
    assert "CliT" in ok("admin", "topicList", "-n", n).split()
    assert "CliOld" in ok_json("admin", "topic-list", "-n", n)
    route = ok_json("admin", "topicRoute", "-n", n, "-t", "CliT")
    assert route["queueDatas"][0]["readQueueNums"] == 4
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": b}
    assert "#Broker Name" in ok("admin", "topicRoute", "-n", n, "-t", "CliT")
    brokers = ok_json("admin", "clusterList", "-n", n)
    assert [(x["cluster"], x["addr"]) for x in brokers] == [("DefaultCluster", b)]
    assert int(brokers[0]["runtime"]["commitLogMaxOffset"]) >= 0
    assert b in ok("admin", "clusterList", "-n", n)
    status = ok_json("admin", "brokerStatus", "-n", n, "-b", b)
    assert status["brokerVersionDesc"] == "pyrmq"
    assert "brokerVersionDesc" in ok("admin", "brokerStatus", "-n", n, "-c", "DefaultCluster")
    ok("admin", "deleteTopic", "-n", n, "-t", "CliOld", "-c", "DefaultCluster")
    assert "CliOld" in failed("admin", "topicRoute", "-n", n, "-t", "CliOld")


def test_cli_message_commands(server):
    n = server.namesrv
    ok("admin", "updateTopic", "-n", n, "-b", server.broker, "-t", "MsgT", "-r", "2", "-w", "2")
    lines = ok("produce", "-n", n, "-t", "MsgT", "--keys", "ck1", "--tags", "tg", "--json",
               input="one\ntwo\n\nthree\n").splitlines()  # fmt: skip
    sent = [json.loads(x) for x in lines]
    assert [s["sendStatus"] for s in sent] == ["SEND_OK"] * 3
    one = ok_json("admin", "sendMessage", "-n", n, "-t", "MsgT", "-p", "four", "-k", "ck2",
                  "-c", "x", "-b", "broker-a", "-i", "1")  # fmt: skip
    assert (one["queueId"], one["sendStatus"]) == (1, "SEND_OK")
    # topicStatus shows the offsets
    st = ok_json("admin", "topicStatus", "-n", n, "-t", "MsgT")
    assert st["total_messages"] == 4
    assert sum(q["max_offset"] for q in st["queues"]) == 4
    assert "#Max Offset" in ok("admin", "topicStatus", "-n", n, "-t", "MsgT")
    # queryMsgByKey finds them
    found = ok_json("admin", "queryMsgByKey", "-n", n, "-t", "MsgT", "-k", "ck1")
    assert sorted(m["body"] for m in found) == ["one", "three", "two"]
    assert all(m["tags"] == "tg" and m["keys"] == ["ck1"] for m in found)
    assert "three" in ok("admin", "queryMsgByKey", "-n", n, "-t", "MsgT", "-k", "ck1")
    # queryMsgById: offset id, then a UNIQ_KEY with the topic; several ids at once
    (m,) = ok_json("admin", "queryMsgById", "-n", n, "-i", sent[1]["offsetMsgId"])
    assert m["body"] == "two" and m["msgId"] == sent[1]["msgId"]
    (m,) = ok_json("admin", "queryMsgById", "-n", n, "-i", sent[2]["msgId"], "-t", "MsgT")
    assert m["body"] == "three"
    both = ok_json(
        "admin", "queryMsgById", "-n", n, "-i", f"{sent[0]['offsetMsgId']},{one['offsetMsgId']}"
    )
    assert [x["body"] for x in both] == ["one", "four"]
    assert "Message Body:        two" in ok(
        "admin", "queryMsgById", "-n", n, "-i", sent[1]["offsetMsgId"]
    )
    # queryMsgByOffset
    s0 = sent[0]
    (m,) = ok_json("admin", "queryMsgByOffset", "-n", n, "-t", "MsgT", "-b", "broker-a",
                   "-i", str(s0["queueId"]), "-o", str(s0["queueOffset"]))  # fmt: skip
    assert m["body"] == "one"
    # consumeMessage reads everything without a group offset, or one queue
    got = ok_json("admin", "consumeMessage", "-n", n, "-t", "MsgT")
    assert sorted(x["body"] for x in got) == ["four", "one", "three", "two"]
    q1 = ok_json(
        "admin", "consumeMessage", "-n", n, "-t", "MsgT", "-b", "broker-a", "-i", "1", "-c", "1"
    )
    assert len(q1) == 1 and q1[0]["queueId"] == 1
    assert "4 message(s)" in ok("admin", "consumeMessage", "-n", n, "-t", "MsgT")


def test_cli_consumer_progress_and_reset(server, arun):
    n, b = server.namesrv, server.broker
    ok("admin", "updateTopic", "-n", n, "-b", b, "-t", "LagT", "-r", "2", "-w", "2")
    out = ok("produce", "-n", n, "-t", "LagT", "--body", "early", "--count", "4", "-q")
    assert "sent 4 message(s)" in out
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    ok("produce", "-n", n, "-t", "LagT", "--body", "late", "--count", "4", "--quiet")
    p = ok_json("admin", "consumerProgress", "-n", n, "-g", "LagG", "-t", "LagT")
    assert p["diff_total"] == 8

    async def commit(offset: int) -> None:
        client = ClientInstance(n)
        try:
            for q in range(2):
                mq = MessageQueue("LagT", "broker-a", q)
                await client.api.update_consumer_offset(b, "LagG", mq, offset)
        finally:
            await client.shutdown()

    arun(commit(3))
    p = ok_json("admin", "consumerProgress", "-n", n, "-g", "LagG", "-t", "LagT")
    assert [q["consumer_offset"] for q in p["queues"]] == [3, 3] and p["diff_total"] == 2
    text = ok("admin", "consumerProgress", "-n", n, "-g", "LagG", "-t", "LagT")
    assert "Diff Total: 2" in text and "#Consumer Offset" in text
    # back to the first message
    r = ok_json("admin", "resetOffsetByTime", "-n", n, "-g", "LagG", "-t", "LagT", "-s", "0")
    assert [(q["old_offset"], q["new_offset"]) for q in r["queues"]] == [(3, 0), (3, 0)]
    assert (
        ok_json("admin", "consumerProgress", "-n", n, "-g", "LagG", "-t", "LagT")["diff_total"] == 8
    )
    # to the middle, in mqadmin's time format
    stamp = (
        time.strftime("%Y-%m-%d#%H:%M:%S", time.localtime(middle / 1000)) + f":{middle % 1000:03d}"
    )
    out = ok("admin", "resetOffsetByTime", "-n", n, "-g", "LagG", "-t", "LagT", "-s", stamp)
    assert "#New Offset" in out and "no consumer of the group is online" in out
    assert (
        ok_json("admin", "consumerProgress", "-n", n, "-g", "LagG", "-t", "LagT")["diff_total"] == 4
    )
    # to now: nothing left
    ok("admin", "reset-offset-by-time", "-n", n, "-g", "LagG", "-t", "LagT", "-s", "now")
    assert (
        ok_json("admin", "consumerProgress", "-n", n, "-g", "LagG", "-t", "LagT")["diff_total"] == 0
    )


def test_cli_produce_and_consume(server):
    n, b = server.namesrv, server.broker
    ok("admin", "updateTopic", "-n", n, "-b", b, "-t", "PcT", "-r", "2", "-w", "2")
    out = ok("produce", "-n", n, "-t", "PcT", "--body", "hi", "--count", "3", "--tags", "A")
    assert out.count("SEND_OK") == 3
    lines = ok("consume", "-n", n, "-t", "PcT", "--from-beginning", "--count", "3",
               "--timeout", "20", "--json").splitlines()  # fmt: skip
    msgs = [json.loads(x) for x in lines]
    assert [(m["body"], m["tags"]) for m in msgs] == [("hi", "A")] * 3
    # with a group: printed messages are committed, so it resumes after them
    out = ok("consume", "-n", n, "-t", "PcT", "-g", "PcG", "--from-beginning", "--count", "3",
             "--timeout", "20")  # fmt: skip
    assert out.count("] hi") == 3
    p = ok_json("admin", "consumerProgress", "-n", n, "-g", "PcG", "-t", "PcT")
    assert p["diff_total"] == 0
    # a new console group starts at the end: nothing old, and stops when idle
    out = ok("consume", "-n", n, "-t", "PcT", "--timeout", "1.5")
    assert out == ""


def test_cli_errors(server):
    n = server.namesrv
    assert "NoSuchTopic" in failed("admin", "topicStatus", "-n", n, "-t", "NoSuchTopic")
    assert "does not exist" in failed("admin", "consumeMessage", "-n", n, "-t", "NoSuchTopic")
    assert "does not exist" in failed("consume", "-n", n, "-t", "NoSuchTopic", "--timeout", "1")
    assert "not hexadecimal" in failed("admin", "queryMsgById", "-n", n, "-i", "xyz")
    # a well-formed offset id of this broker at an offset that holds nothing
    host, _, port = server.broker.rpartition(":")
    bogus = socket.inet_aton(host).hex().upper() + f"{int(port):08X}" + f"{10**12:016X}"
    assert "not found" in failed("admin", "queryMsgById", "-n", n, "-i", bogus)
    dead = f"127.0.0.1:{free_port()}"
    assert "no name server answered" in failed("admin", "topicList", "-n", dead)
    assert "no name server answered" in failed("admin", "clusterList", "-n", dead, "--timeout", "2")
    assert "error:" in failed("produce", "-n", dead, "-t", "X", "--body", "b", "--timeout", "2")
    assert "not host:port" in failed("admin", "topicList", "-n", "nowhere")
    # bad arguments
    assert "-t/--topic" in failed("admin", "topicStatus", "-n", n)
    assert "timestamp" in failed(
        "admin", "resetOffsetByTime", "-n", n, "-g", "G", "-t", "T", "-s", "soon"
    )
    assert "invalid choice" in failed("admin", "noSuchCommand")
    assert "give the topic" in failed("admin", "consumerProgress", "-n", n, "-g", "NeverSeen")


def test_cli_output_closed_by_its_reader_ends_quietly(server, tmp_path):
    """`pyrmq admin getBrokerConfig | true`: the reader is gone before the
    command writes; it ends with 141 (a SIGPIPE'd command's status) and
    prints nothing, neither "error: Broken pipe" nor a traceback."""
    with open(tmp_path / "stderr", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pyrmq", "admin", "getBrokerConfig", "-n", server.namesrv,
             "-b", server.broker],
            stdout=subprocess.PIPE,
            stderr=err,
        )  # fmt: skip
        assert proc.stdout is not None
        proc.stdout.close()  # before the command has even imported pyrmq
        try:
            rc = proc.wait(timeout=CLI_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert (rc, (tmp_path / "stderr").read_text()) == (141, "")
