"""NameServer request codes over TCP: 103, 104, 105, 106, 206, 100-102,
plus broker expiry and channel-close handling."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from typing import Any

from pyrmq.namesrv import NameServer
from pyrmq.namesrv.route_info_manager import RouteInfoManager
from pyrmq.remoting import RemotingClient, RemotingCommand
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .helpers import cluster, route, simple, wait_for

BROKER = "10.1.2.3:10911"


def register_cmd(
    topics: dict[str, dict[str, Any]],
    *,
    name: str = "broker-x",
    addr: str = BROKER,
    broker_id: int = 0,
    cluster_name: str = "C1",
    crc: int | None = None,
    counter: int = 1,
) -> RemotingCommand:
    table = {
        t: {
            "topicName": t,
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
            **cfg,
        }
        for t, cfg in topics.items()
    }
    body = json.dumps(
        {
            "topicConfigSerializeWrapper": {
                "topicConfigTable": table,
                "dataVersion": {"timestamp": 1700000000000, "counter": counter},
            },
            "filterServerList": [],
        }
    ).encode()
    return RemotingCommand(
        RC.REGISTER_BROKER,
        {
            "brokerName": name,
            "brokerAddr": addr,
            "clusterName": cluster_name,
            "haServerAddr": addr.rsplit(":", 1)[0] + ":10912",
            "brokerId": str(broker_id),
            "compressed": "false",
            "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc),
        },
        body,
    )


async def _namesrv(**kw: Any) -> tuple[NameServer, str]:
    ns = NameServer("127.0.0.1", 0, **kw)
    await ns.start()
    return ns, f"127.0.0.1:{ns.port}"


def test_register_broker_route_json_shape(arun):
    async def main() -> None:
        ns, addr = await _namesrv()
        cl = RemotingClient()
        try:
            r = await cl.invoke(
                addr, register_cmd({"TopicA": {"readQueueNums": 3, "writeQueueNums": 2}})
            )
            assert r.code == R.SUCCESS, r
            r = await route(cl, addr, "TopicA")
            assert r.code == R.SUCCESS, r
            # standard JSON with the quoted "0" master key
            assert b'"brokerAddrs":{"0":"10.1.2.3:10911"}' in r.body, r.body
            data = json.loads(r.body)
            assert data["brokerDatas"] == [
                {"brokerAddrs": {"0": BROKER}, "brokerName": "broker-x", "cluster": "C1"}
            ]
            (qd,) = data["queueDatas"]
            assert qd["brokerName"] == "broker-x"
            for k, want in (("readQueueNums", 3), ("writeQueueNums", 2), ("perm", 6)):
                assert type(qd[k]) is int and qd[k] == want, (k, qd)
            assert "orderTopicConf" not in data
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())


def test_register_broker_compressed_body_and_slave(arun):
    async def main() -> None:
        ns, addr = await _namesrv()
        cl = RemotingClient()
        try:
            # Java's compressed register body
            tc = {"topicName": "TopicZ", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
            parts = []
            for blob in (json.dumps({"timestamp": 1, "counter": 1}).encode(),):
                parts.append(struct.pack(">i", len(blob)) + blob)
            parts.append(struct.pack(">i", 1))
            blob = json.dumps(tc).encode()
            parts.append(struct.pack(">i", len(blob)) + blob)
            parts.append(struct.pack(">i", 2) + b"[]")
            body = zlib.compress(b"".join(parts))
            cmd = register_cmd({})
            cmd.body = body
            cmd.ext_fields["compressed"] = "true"
            cmd.ext_fields["bodyCrc32"] = str(zlib.crc32(body) & 0x7FFFFFFF)
            r = await cl.invoke(addr, cmd)
            assert r.code == R.SUCCESS, r
            r = await route(cl, addr, "TopicZ")
            assert r.code == R.SUCCESS, r
            assert json.loads(r.body)["queueDatas"][0]["readQueueNums"] == 2
            # a slave learns its master's addresses
            r = await cl.invoke(addr, register_cmd({}, addr="10.1.2.4:10911", broker_id=1))
            assert r.code == R.SUCCESS, r
            assert r.ext_fields.get("masterAddr") == BROKER, r
            assert r.ext_fields.get("haServerAddr") == "10.1.2.3:10912", r
            data = json.loads((await route(cl, addr, "TopicZ")).body)
            assert data["brokerDatas"][0]["brokerAddrs"] == {"0": BROKER, "1": "10.1.2.4:10911"}
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())


def test_register_broker_crc_mismatch_is_refused(arun):
    async def main() -> None:
        ns, addr = await _namesrv()
        cl = RemotingClient()
        try:
            good = register_cmd({"TopicA": {}})
            bad_crc = (int(good.ext_fields["bodyCrc32"]) + 1) & 0x7FFFFFFF or 1
            r = await cl.invoke(addr, register_cmd({"TopicA": {}}, crc=bad_crc))
            assert r.code != R.SUCCESS, r
            assert r.code == R.SYSTEM_ERROR and r.remark, r
            assert (await route(cl, addr, "TopicA")).code == R.TOPIC_NOT_EXIST
            # bodyCrc32 "0" skips the check
            r = await cl.invoke(addr, register_cmd({"TopicA": {}}, crc=0))
            assert r.code == R.SUCCESS, r
            # a body that is not JSON
            cmd = register_cmd({})
            cmd.body = b"{not json"
            cmd.ext_fields["bodyCrc32"] = "0"
            r = await cl.invoke(addr, cmd)
            assert r.code == R.SYSTEM_ERROR and r.remark, r
            # a header without brokerName
            cmd = register_cmd({})
            del cmd.ext_fields["brokerName"]
            r = await cl.invoke(addr, cmd)
            assert r.code == R.SYSTEM_ERROR and r.remark, r
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())


def test_route_unknown_topic_is_17(arun):
    async def main() -> None:
        ns, addr = await _namesrv()
        cl = RemotingClient()
        try:
            r = await route(cl, addr, "NoSuchTopic")
            assert r.code == R.TOPIC_NOT_EXIST, r
            assert r.remark and "NoSuchTopic" in r.remark
            assert r.body == b""
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())


def test_cluster_info_and_topic_list(arun):
    async def main() -> None:
        ns, addr = await _namesrv()
        cl = RemotingClient()
        try:
            assert (await cl.invoke(addr, register_cmd({"T1": {}, "T2": {}}))).code == R.SUCCESS
            r = await simple(cl, addr, RC.GET_BROKER_CLUSTER_INFO)
            assert r.code == R.SUCCESS
            info = json.loads(r.body)
            assert info["clusterAddrTable"] == {"C1": ["broker-x"]}
            assert info["brokerAddrTable"]["broker-x"]["brokerAddrs"] == {"0": BROKER}
            r = await simple(cl, addr, RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            assert r.code == R.SUCCESS
            assert set(json.loads(r.body)["topicList"]) >= {"T1", "T2"}
            # a re-registration without T2 drops T2's queues
            assert (await cl.invoke(addr, register_cmd({"T1": {}}, counter=2))).code == R.SUCCESS
            assert (await route(cl, addr, "T2")).code == R.TOPIC_NOT_EXIST
            assert (await route(cl, addr, "T1")).code == R.SUCCESS
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())


def test_kv_config_put_get_delete(arun, tmp_path):
    async def main() -> None:
        path = str(tmp_path / "kv.json")
        ns, addr = await _namesrv(kv_config_path=path)
        cl = RemotingClient()
        try:
            r = await simple(cl, addr, RC.GET_KV_CONFIG, namespace="NS", key="k")
            assert r.code == R.QUERY_NOT_FOUND and r.remark, r
            r = await simple(cl, addr, RC.PUT_KV_CONFIG, namespace="NS", key="k", value="v1")
            assert r.code == R.SUCCESS, r
            r = await simple(cl, addr, RC.GET_KV_CONFIG, namespace="NS", key="k")
            assert r.code == R.SUCCESS and r.ext_fields["value"] == "v1", r
            with open(path) as f:
                assert json.load(f)["configTable"]["NS"]["k"] == "v1"
            r = await simple(cl, addr, RC.PUT_KV_CONFIG, namespace="NS", key="k", value="v2")
            assert (await simple(cl, addr, RC.GET_KV_CONFIG, namespace="NS", key="k")).ext_fields[
                "value"
            ] == "v2"
            r = await simple(cl, addr, RC.DELETE_KV_CONFIG, namespace="NS", key="k")
            assert r.code == R.SUCCESS, r
            r = await simple(cl, addr, RC.GET_KV_CONFIG, namespace="NS", key="k")
            assert r.code == R.QUERY_NOT_FOUND, r
            # put without a key is refused
            r = await simple(cl, addr, RC.PUT_KV_CONFIG, namespace="NS", value="x")
            assert r.code == R.SYSTEM_ERROR and r.remark, r
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())


def test_order_topic_conf_from_kv(arun):
    async def main() -> None:
        ns, addr = await _namesrv()
        cl = RemotingClient()
        try:
            await cl.invoke(addr, register_cmd({"TO": {}}))
            await simple(
                cl,
                addr,
                RC.PUT_KV_CONFIG,
                namespace="ORDER_TOPIC_CONFIG",
                key="TO",
                value="broker-x:4",
            )
            data = json.loads((await route(cl, addr, "TO")).body)
            assert data["orderTopicConf"] == "broker-x:4"
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())


def test_unregister_broker_drops_routes(arun):
    async def main() -> None:
        ns, addr = await _namesrv()
        cl = RemotingClient()
        try:
            assert (await cl.invoke(addr, register_cmd({"TopicA": {}}))).code == R.SUCCESS
            assert (await route(cl, addr, "TopicA")).code == R.SUCCESS
            r = await simple(
                cl,
                addr,
                RC.UNREGISTER_BROKER,
                brokerName="broker-x",
                brokerAddr=BROKER,
                clusterName="C1",
                brokerId=0,
            )
            assert r.code == R.SUCCESS, r
            assert (await route(cl, addr, "TopicA")).code == R.TOPIC_NOT_EXIST
            info = json.loads((await simple(cl, addr, RC.GET_BROKER_CLUSTER_INFO)).body)
            assert info == {"brokerAddrTable": {}, "clusterAddrTable": {}}
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())


def test_broker_expiry_by_scan(arun):
    async def main() -> None:
        ns, addr = await _namesrv(broker_channel_expired=0.4, scan_interval=0.1)
        cl = RemotingClient()
        try:
            assert (await cl.invoke(addr, register_cmd({"TopicA": {}}))).code == R.SUCCESS
            # Re-registering keeps it alive past the expiry time
            for i in range(6):
                await asyncio.sleep(0.15)
                assert (
                    await cl.invoke(addr, register_cmd({"TopicA": {}}, counter=i))
                ).code == R.SUCCESS
            assert (await route(cl, addr, "TopicA")).code == R.SUCCESS

            # silent (connection still open): dropped within expiry + scan
            async def gone() -> bool:
                return (await route(cl, addr, "TopicA")).code == R.TOPIC_NOT_EXIST

            assert await wait_for(gone, 3.0)
            info = json.loads((await simple(cl, addr, RC.GET_BROKER_CLUSTER_INFO)).body)
            assert info["brokerAddrTable"] == {}
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())


def test_route_info_manager_expiry_with_injected_clock():
    now = [1000.0]
    rim = RouteInfoManager(clock=lambda: now[0])
    tc = {"T": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}
    rim.register_broker("C", "1.1.1.1:1", "b1", 0, "", tc, {"counter": 1}, object())
    rim.register_broker("C", "1.1.1.2:1", "b2", 0, "", tc, {"counter": 1}, object())
    now[0] += 100
    rim.touch("1.1.1.2:1")
    now[0] += 30
    assert rim.scan_not_active_broker(120) == ["1.1.1.1:1"]
    r = rim.pickup_topic_route_data("T")
    assert r is not None and [b["brokerName"] for b in r["brokerDatas"]] == ["b2"]
    now[0] += 121
    assert rim.scan_not_active_broker(120) == ["1.1.1.2:1"]
    assert rim.pickup_topic_route_data("T") is None
    assert rim.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_channel_close_drops_broker(arun):
    async def main() -> None:
        ns, addr = await _namesrv()
        cl = RemotingClient()
        other = RemotingClient()
        try:
            assert (await cl.invoke(addr, register_cmd({"TopicA": {}}))).code == R.SUCCESS
            assert (await route(other, addr, "TopicA")).code == R.SUCCESS
            cl.close_connection(addr)

            async def gone() -> bool:
                return (await route(other, addr, "TopicA")).code == R.TOPIC_NOT_EXIST

            assert await wait_for(gone, 2.0)
        finally:
            await cl.shutdown()
            await other.shutdown()
            await ns.shutdown()

    arun(main())


def test_real_broker_registers_and_unregisters(arun, tmp_path):
    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            r = await route(cl, c.namesrv_addr, "TBW102")
            assert r.code == R.SUCCESS, r
            data = json.loads(r.body)
            assert data["brokerDatas"][0]["brokerAddrs"] == {"0": c.broker_addr}
            assert data["queueDatas"][0]["perm"] == 7
            assert data["queueDatas"][0]["writeQueueNums"] == 8
            await c.stop_broker()
            assert (await route(cl, c.namesrv_addr, "TBW102")).code == R.TOPIC_NOT_EXIST
            await c.start_broker()
            r = await route(cl, c.namesrv_addr, "TBW102")
            assert r.code == R.SUCCESS, r
            assert json.loads(r.body)["brokerDatas"][0]["brokerAddrs"] == {"0": c.broker_addr}

    arun(main())


def test_namesrv_unknown_code(arun):
    async def main() -> None:
        ns, addr = await _namesrv()
        cl = RemotingClient()
        try:
            r = await simple(cl, addr, 9999)
            assert r.code == R.REQUEST_CODE_NOT_SUPPORTED and r.remark and "9999" in r.remark
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())


def test_query_data_version_and_delete_topic_in_namesrv(arun):
    async def main() -> None:
        ns, addr = await _namesrv()
        cl = RemotingClient()
        try:
            cmd = register_cmd({"TopicA": {}, "TopicB": {}}, counter=5)
            dv = json.loads(cmd.body)["topicConfigSerializeWrapper"]["dataVersion"]
            assert (await cl.invoke(addr, cmd)).code == R.SUCCESS
            fields = {
                "brokerName": "broker-x",
                "brokerAddr": BROKER,
                "clusterName": "C1",
                "brokerId": "0",
            }
            r = await cl.invoke(
                addr, RemotingCommand(RC.QUERY_DATA_VERSION, dict(fields), json.dumps(dv).encode())
            )
            assert r.code == R.SUCCESS and r.ext_fields["changed"] == "false", r
            assert json.loads(r.body) == dv
            newer = dict(dv, counter=6)
            r = await cl.invoke(
                addr,
                RemotingCommand(RC.QUERY_DATA_VERSION, dict(fields), json.dumps(newer).encode()),
            )
            assert r.ext_fields["changed"] == "true", r
            other = dict(fields, brokerAddr="9.9.9.9:1")
            r = await cl.invoke(
                addr, RemotingCommand(RC.QUERY_DATA_VERSION, other, json.dumps(dv).encode())
            )
            assert r.code == R.SUCCESS and r.ext_fields["changed"] == "true", r
            # DELETE_TOPIC_IN_NAMESRV
            r = await simple(cl, addr, RC.DELETE_TOPIC_IN_NAMESRV, topic="TopicA")
            assert r.code == R.SUCCESS, r
            assert (await route(cl, addr, "TopicA")).code == R.TOPIC_NOT_EXIST
            assert (await route(cl, addr, "TopicB")).code == R.SUCCESS
            topics = json.loads(
                (await simple(cl, addr, RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body
            )["topicList"]
            assert "TopicA" not in topics and "TopicB" in topics
        finally:
            await cl.shutdown()
            await ns.shutdown()

    arun(main())
