"""`pyrmq admin` commands added for mqadmin's config, write-perm and
ConsumeQueue tools, end to end against a `pyrmq standalone` subprocess:
updateBrokerConfig written to the broker.conf (and kept over a restart),
getNamesrvConfig / updateNamesrvConfig, wipeWritePerm / addWritePerm and
queryCq. A user's mistake is one `error:` line, no traceback."""

from __future__ import annotations

from typing import Any

from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess
from tests.client.test_admin_cli import failed, ok, ok_json


def _route_perm(n: str, topic: str) -> int:
    route: Any = ok_json("admin", "topicRoute", "-n", n, "-t", topic)
    (qd,) = route["queueDatas"]
    return int(qd["perm"])


def test_cli_config_write_perm_and_query_cq(tmp_path):
    srv = StandaloneProcess(tmp_path, SMALL_STORE)
    conf = tmp_path / "standalone.conf"
    conf.write_text("# kept by updateBrokerConfig\n" + conf.read_text())
    srv.start()
    try:
        n, b = srv.namesrv, srv.broker
        r = ok_json("admin", "updateBrokerConfig", "-n", n, "-b", b, "-k", "maxReconsumeTimes",
                    "-v", "7")  # fmt: skip
        assert r["brokers"] == [b] and r["remarks"] == {}
        text = conf.read_text()
        assert text.startswith("# kept by updateBrokerConfig\n")
        assert text.rstrip().endswith("maxReconsumeTimes=7")
        assert srv.stop() == 0
        srv.start()
        n, b = srv.namesrv, srv.broker
        assert ok_json("admin", "getBrokerConfig", "-n", n, "-b", b)[b]["maxReconsumeTimes"] == "7"

        # the name server's settings (this one has no config file)
        cfg = ok_json("admin", "getNamesrvConfig", "-n", n)
        assert cfg[n]["enableAllTopicList"] == "true" and cfg[n]["listenPort"] == n.split(":")[1]
        assert "enableTopicList" in ok("admin", "getNamesrvConfig", "-n", n)
        r = ok_json("admin", "updateNamesrvConfig", "-n", n, "-k", "enableAllTopicList",
                    "-v", "false")  # fmt: skip
        assert r["nameServers"] == [n] and "in memory only" in r["remarks"][n]
        assert "disable" in failed("admin", "topicList", "-n", n)
        out = ok("admin", "updateNamesrvConfig", "-n", n, "-k", "enableAllTopicList", "-v", "true")
        assert "update name server config success!" in out and "enableAllTopicList : true" in out
        line = failed("admin", "updateNamesrvConfig", "-n", n, "-k", "listenPort", "-v", "1")
        assert "listenPort" in line and "can not update at runtime" in line
        assert "noSuchKey" in failed("admin", "updateNamesrvConfig", "-n", n, "-k", "noSuchKey",
                                     "-v", "1")  # fmt: skip

        # write perm: the broker's topics leave and come back to the routes
        ok("admin", "updateTopic", "-n", n, "-b", b, "-t", "CliCqT", "-r", "1", "-w", "1")
        assert _route_perm(n, "CliCqT") == 6
        out = ok("admin", "wipeWritePerm", "-n", n, "-b", "broker-a")
        assert out.startswith(f"wipe write perm of broker[broker-a] in name server[{n}] OK, ")
        assert _route_perm(n, "CliCqT") == 4
        (row,) = ok_json("admin", "addWritePerm", "-n", n, "-b", "broker-a")
        assert row["nameServer"] == n and row["addTopicCount"] > 0
        assert _route_perm(n, "CliCqT") == 6
        assert "broker[no-such] is not registered" in failed("admin", "wipeWritePerm", "-n", n,
                                                             "-b", "no-such")  # fmt: skip

        # queryCq: the units of a queue, through the route or -b
        for i in range(3):
            ok("admin", "sendMessage", "-n", n, "-t", "CliCqT", "-p", f"b{i}")
        q = ok_json("admin", "queryCq", "-n", n, "-t", "CliCqT", "-q", "0", "-i", "0")
        assert q["brokerAddr"] == b and q["maxQueueIndex"] == 3
        assert [u["physicSize"] > 0 for u in q["queueData"]] == [True] * 3
        out = ok("admin", "queryCq", "-n", n, "-b", b, "-t", "CliCqT", "-q", "0", "-i", "1",
                 "-c", "1", "-g", "CliCqG")  # fmt: skip
        assert "max: 3, min: 0" in out and "CliCqG@CliCqT is not online!" in out
        out = ok("admin", "queryCq", "-n", n, "-t", "CliCqT", "-q", "0", "-i", "9")
        assert "Index 9 of 0@CliCqT is not exist!" in out
        assert "1 to 1000" in failed("admin", "queryCq", "-n", n, "-t", "CliCqT", "-q", "0",
                                     "-i", "0", "-c", "5000")  # fmt: skip
        assert "9@CliCqT is not exist!" in failed("admin", "queryCq", "-n", n, "-b", b, "-t",
                                                  "CliCqT", "-q", "9", "-i", "0")  # fmt: skip
        assert "NoSuchCqT" in failed("admin", "queryCq", "-n", n, "-t", "NoSuchCqT", "-q", "0",
                                     "-i", "0")  # fmt: skip
    finally:
        rc = srv.stop()
    assert rc == 0, srv.log.read_text()[-4000:]
