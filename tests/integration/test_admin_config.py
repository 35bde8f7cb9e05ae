"""UPDATE_BROKER_CONFIG (25) written back into the broker.conf the broker
was started from, and the name server's config (GET_NAMESRV_CONFIG 319,
UPDATE_NAMESRV_CONFIG 318), as raw frames against real servers on
127.0.0.1. Error paths answer a RocketMQ code with a remark."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from pyrmq.broker import Broker, load_broker_conf
from pyrmq.namesrv import NameServer
from pyrmq.remoting import RemotingClient
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R

from .helpers import simple

CONF = """# broker-a, written by hand
brokerName=broker-a
brokerClusterName = DefaultCluster
listenHost=127.0.0.1
listenPort=0

# polling
longPollingEnable=true
mappedFileSizeCommitLog=8388608
mappedFileSizeConsumeQueue=200000
maxHashSlotNum=4096
maxIndexNum=16384
warmMappedFileEnable=false
"""


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _conf(r: Any) -> dict[str, str]:
    return dict(line.split("=", 1) for line in r.body.decode().splitlines())


@contextlib.asynccontextmanager
async def _broker(path: str, namesrv: str, store: str) -> AsyncIterator[Broker]:
    bcfg, scfg = load_broker_conf(path, {"namesrvAddr": namesrv, "storePathRootDir": store})
    b = Broker(bcfg, scfg, config_path=path)
    await b.start()
    try:
        yield b
    finally:
        await b.shutdown()


def test_update_broker_config_is_written_to_the_conf_file(arun, tmp_path):
    path = str(tmp_path / "broker.conf")
    with open(path, "w") as f:
        f.write(CONF)
    os.chmod(path, 0o640)
    store = str(tmp_path / "store")

    async def main() -> None:
        cl = RemotingClient(name="itest")
        async with NameServer("127.0.0.1", 0) as ns:
            n = f"127.0.0.1:{ns.port}"
            try:
                async with _broker(path, n, store) as b:
                    r = await simple(cl, b.addr, RC.GET_BROKER_CONFIG)
                    assert _conf(r)["brokerConfigPath"] == path
                    body = b"longPollingEnable=false\nmaxReconsumeTimes=5\n"
                    r = await simple(cl, b.addr, RC.UPDATE_BROKER_CONFIG, body=body)
                    assert r.code == R.SUCCESS and not r.remark, r
                    text = _read(path)
                    # changed in place, the rest kept; a key the file lacked appended
                    assert "# broker-a, written by hand\n" in text and "# polling\n" in text
                    assert "\nlongPollingEnable=false\n" in text
                    assert "longPollingEnable=true" not in text
                    assert text.rstrip().endswith("maxReconsumeTimes=5")
                    assert "brokerClusterName = DefaultCluster\n" in text
                    assert os.stat(path).st_mode & 0o777 == 0o640
                    assert not os.path.exists(path + ".tmp")
                    # refused updates leave the file alone
                    before = _read(path)
                    r = await simple(cl, b.addr, RC.UPDATE_BROKER_CONFIG, body=b"brokerName=x")
                    assert r.code == R.NO_PERMISSION and "brokerName" in r.remark, r
                    r = await simple(
                        cl, b.addr, RC.UPDATE_BROKER_CONFIG, body=b"brokerConfigPath=/tmp/x"
                    )
                    assert r.code == R.NO_PERMISSION, r
                    assert _read(path) == before
                    # a write that fails (the temp file's place is taken by a
                    # folder): nothing changes, in memory or on disk
                    os.mkdir(path + ".tmp")
                    r = await simple(cl, b.addr, RC.UPDATE_BROKER_CONFIG,
                                     body=b"longPollingEnable=true")  # fmt: skip
                    assert r.code == R.SYSTEM_ERROR, r
                    assert "config not changed" in r.remark and path in r.remark, r
                    assert _read(path) == before
                    r = await simple(cl, b.addr, RC.GET_BROKER_CONFIG)
                    assert _conf(r)["longPollingEnable"] == "false"
                    os.rmdir(path + ".tmp")
                # restarted from the same file: the changed values
                async with _broker(path, n, store) as b:
                    conf = _conf(await simple(cl, b.addr, RC.GET_BROKER_CONFIG))
                    assert conf["longPollingEnable"] == "false"
                    assert conf["maxReconsumeTimes"] == "5"
            finally:
                await cl.shutdown()

    arun(main())


def test_update_broker_config_without_a_file_says_so(arun, tmp_path):
    from .helpers import cluster

    async def main() -> None:
        async with cluster(tmp_path) as (c, cl):
            a = c.broker_addr
            r = await simple(cl, a, RC.UPDATE_BROKER_CONFIG, body=b"maxReconsumeTimes=3")
            assert r.code == R.SUCCESS and "in memory only" in r.remark, r
            r = await simple(cl, a, RC.GET_BROKER_CONFIG)
            assert _conf(r)["maxReconsumeTimes"] == "3" and _conf(r)["brokerConfigPath"] == ""
            # the same value again changes nothing: no remark needed
            r = await simple(cl, a, RC.UPDATE_BROKER_CONFIG, body=b"maxReconsumeTimes=3")
            assert r.code == R.SUCCESS and not r.remark, r

    arun(main())


def test_namesrv_config_get_and_update(arun, tmp_path):
    from pyrmq.common.config_file import read_properties
    from pyrmq.namesrv.config import NamesrvRuntimeConfig

    path = str(tmp_path / "namesrv.conf")
    with open(path, "w") as f:
        f.write("# my name server\nlistenPort=0\nenableTopicList = true\n")

    def start() -> NameServer:
        props = read_properties(path)
        return NameServer(
            "127.0.0.1",
            0,
            settings=NamesrvRuntimeConfig.settings_from_properties(props),
            config_path=path,
        )

    async def main() -> None:
        cl = RemotingClient(name="itest")
        try:
            async with start() as ns:
                n = f"127.0.0.1:{ns.port}"
                r = await simple(cl, n, RC.GET_NAMESRV_CONFIG)
                assert r.code == R.SUCCESS, r
                conf = _conf(r)
                assert conf["listenPort"] == str(ns.port) and conf["configStorePath"] == path
                assert conf["enableAllTopicList"] == "true" and conf["enableTopicList"] == "true"
                assert conf["scanNotActiveBrokerInterval"] == "10000"
                body = b"enableAllTopicList=false\nenableTopicList=false\n"
                r = await simple(cl, n, RC.UPDATE_NAMESRV_CONFIG, body=body)
                assert r.code == R.SUCCESS and not r.remark, r
                # both take effect at once, with RocketMQ's answer
                r = await simple(cl, n, RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
                assert r.code == R.SYSTEM_ERROR and r.remark == "disable", r
                r = await simple(cl, n, RC.GET_TOPICS_BY_CLUSTER, cluster="DefaultCluster")
                assert r.code == R.SYSTEM_ERROR and r.remark == "disable", r
                text = _read(path)
                assert text.startswith("# my name server\nlistenPort=0\nenableTopicList = false\n")
                assert text.rstrip().endswith("enableAllTopicList=false")
                # refused: keys read at start, unknown keys, bad values, junk
                before = _read(path)
                for body, code, word in (
                    (b"listenPort=1\nenableTopicList=true", R.NO_PERMISSION, "listenPort"),
                    (b"kvConfigPath=/tmp/kv", R.NO_PERMISSION, "kvConfigPath"),
                    (b"noSuchKey=1", R.INVALID_PARAMETER, "noSuchKey"),
                    (b"enableTopicList=yes", R.INVALID_PARAMETER, "enableTopicList"),
                    (b"scanNotActiveBrokerInterval=1", R.INVALID_PARAMETER, "100"),
                    (b"garbage line", R.INVALID_PARAMETER, "string2Properties"),
                    (b"", R.INVALID_PARAMETER, "no config key"),
                    (b"\xff\xfe=1", R.INVALID_PARAMETER, "string2Properties"),
                ):
                    r = await simple(cl, n, RC.UPDATE_NAMESRV_CONFIG, body=body)
                    assert r.code == code and word in r.remark, (body, r)
                assert _read(path) == before
                assert _conf(await simple(cl, n, RC.GET_NAMESRV_CONFIG))["enableTopicList"] == (
                    "false"
                )
                r = await simple(cl, n, RC.UPDATE_NAMESRV_CONFIG,
                                 body=b"scanNotActiveBrokerInterval=2000")  # fmt: skip
                assert r.code == R.SUCCESS and ns.scan_interval == 2.0, r
            # a restart from the file has the changed values
            async with start() as ns:
                n = f"127.0.0.1:{ns.port}"
                conf = _conf(await simple(cl, n, RC.GET_NAMESRV_CONFIG))
                assert conf["enableAllTopicList"] == "false"
                assert conf["enableTopicList"] == "false"
                assert conf["scanNotActiveBrokerInterval"] == "2000"
            # no file: memory only, and the answer says so
            async with NameServer("127.0.0.1", 0) as ns:
                n = f"127.0.0.1:{ns.port}"
                r = await simple(cl, n, RC.UPDATE_NAMESRV_CONFIG, body=b"enableTopicList=false")
                assert r.code == R.SUCCESS and "in memory only" in r.remark, r
        finally:
            await cl.shutdown()

    arun(main())
