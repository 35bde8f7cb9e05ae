"""The official 5.x SDK through ``pyrmq proxy``, RocketMQ 5's proxy in its
cluster mode: a process of its own in front of a name server and two
brokers (processes too). Sends spread over both brokers; SimpleConsumer
receives from both, acks to the broker that gave each receipt handle;
a transaction left open is recovered by check-back over the proxy's
connection. Every test compares the sets sent and received."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pyrmq.client.api import MQClientAPI
from pyrmq.common.message import MessageQueue
from pyrmq.remoting import RemotingClient
from pyrmq.testing.cluster import ProcessCluster, ServerProcess
from tests.interop import sdk5
from tests.interop.conftest import REPO
from tests.interop.cpp import unique

WAIT = 60.0  # seconds for what should happen promptly, on a loaded machine
QUEUES = 2  # per broker
BROKERS = ("broker-a", "broker-b")


class Proxied:
    def __init__(self, cluster: ProcessCluster, proxy: ServerProcess) -> None:
        self.cluster = cluster
        self.proxy = proxy

    @property
    def grpc(self) -> str:
        return str(self.proxy.info["grpc"])

    @property
    def namesrv(self) -> str:
        return self.cluster.namesrv_addr

    def admin(self, *args: str) -> None:
        cmd = [sys.executable, "-m", "pyrmq", "admin", *args, "-n", self.namesrv]
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r

    def make_topic(self, message_type: str = "NORMAL") -> str:
        """A topic of QUEUES queues on each broker, routed by the name server."""
        name = unique("CL5")
        self.admin("updateTopic", "-c", "DefaultCluster", "-t", name, "-r", str(QUEUES),
                   "-w", str(QUEUES), "-a", f"+message.type={message_type}")  # fmt: skip
        deadline = time.monotonic() + WAIT
        while sorted(self.queue_counts(name)) != sorted(BROKERS):
            assert time.monotonic() < deadline, f"no route of {name} on both brokers"
            time.sleep(0.2)
        return name

    def make_group(self) -> str:
        name = unique("GCL5")
        self.admin("updateSubGroup", "-c", "DefaultCluster", "-g", name)
        return name

    def queue_counts(self, topic: str) -> dict[str, int]:
        """broker name -> messages stored in the topic's queues there."""

        async def count() -> dict[str, int]:
            remoting = RemotingClient()
            api = MQClientAPI(remoting, [self.namesrv])
            try:
                route = await api.get_topic_route(topic)
                out: dict[str, int] = {}
                for b in route.broker_datas if route else ():
                    addr = b.broker_addrs[0]
                    out[b.broker_name] = sum(
                        [
                            await api.get_max_offset(addr, MessageQueue(topic, b.broker_name, q))
                            for q in range(QUEUES)
                        ]
                    )
                return out
            finally:
                await remoting.shutdown()

        return asyncio.run(count())


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    root = tmp_path_factory.mktemp("cluster-proxy")
    sdk5.sdk_path()  # installed before the servers start, not inside a test's wait
    conf = {"transactionTimeOut": 1000, "transactionCheckInterval": 1000}
    with ProcessCluster(root, BROKERS, broker_conf=conf) as cluster:
        proxy = ServerProcess(
            "proxy",
            ["proxy", "-n", cluster.namesrv_addr, "--host", "127.0.0.1", "--grpc-port", "0"],
            root,
        )
        proxy.start()
        try:
            yield Proxied(cluster, proxy)
        finally:
            rc = proxy.stop()
            assert rc == 0, f"pyrmq proxy exit status on SIGTERM: {rc}\n{proxy.log_tail(60)}"
    # three stores of allocated 1 GiB segments: not kept until the session ends
    shutil.rmtree(root, ignore_errors=True)


def receive(p: Proxied, topic: str, group: str, want: int, **kw: Any) -> list[dict[str, Any]]:
    args = dict(endpoint=p.grpc, topic=topic, group=group, want=want, seconds=WAIT,
                invisible_s=20, mode="ack")  # fmt: skip
    args.update(kw)
    return sdk5.run("simple", timeout=WAIT + 60, **args)


def test_sends_spread_over_both_brokers_and_are_received_from_both(proxied: Proxied) -> None:
    topic, group = proxied.make_topic(), proxied.make_group()
    sent = [o for o in sdk5.run("send", endpoint=proxied.grpc, topic=topic, n=40) if "sent" in o]
    assert len(sent) == 40  # at random over 4 queues: both brokers but 1 time in 2**39
    counts = proxied.queue_counts(topic)
    assert sum(counts.values()) == 40 and all(counts[b] > 0 for b in BROKERS), counts
    got = receive(proxied, topic, group, 40)
    assert not [o for o in got if "error" in o], got
    recv = [o for o in got if "recv" in o]
    assert sorted(o["recv"] for o in recv) == sorted(o["body"] for o in sent)
    assert {o["id"] for o in recv} == {o["id"] for o in sent}
    assert {o["acked"] for o in got if "acked" in o} == {o["id"] for o in sent}
    again = receive(proxied, topic, group, 1, seconds=4)
    assert [o for o in again if "recv" in o] == [], "acked messages came back"


def test_unacked_messages_come_back_and_a_changed_handle_acks(proxied: Proxied) -> None:
    topic, group = proxied.make_topic(), proxied.make_group()
    sent = [o for o in sdk5.run("send", endpoint=proxied.grpc, topic=topic, n=6) if "sent" in o]
    # The SDK takes the route's queues in turn, two of each broker, so two
    # receives in a row may go to the same broker. The first receive's
    # invisible time is long enough that its own later receives (each a 2 s
    # long poll) cannot see a message twice, on a loaded machine too.
    # Unless a receive failed: what its broker popped for it stays invisible
    # for those 10 s (as in RocketMQ), so the others may come back first.
    first = receive(proxied, topic, group, 6, mode="noack", invisible_s=10, distinct=True)
    bodies = [o["recv"] for o in first if "recv" in o]
    assert sorted(set(bodies)) == sorted(o["body"] for o in sent), (sent, first)
    failed = [o for o in first if "error" in o]
    assert len(bodies) == len(set(bodies)) or failed, f"delivered twice in 10 s: {first}"
    # each comes back after its invisible time: its invisible time is changed,
    # and the new handle acks it at the broker that gave it
    second = receive(proxied, topic, group, 6, mode="change", change_s=5, invisible_s=2)
    recv = [o for o in second if "recv" in o]
    assert not [o for o in second if "error" in o], second
    assert sorted(o["recv"] for o in recv) == sorted(o["body"] for o in sent)
    assert all(o["attempt"] >= 2 for o in recv), recv
    assert {o["acked"] for o in second if "acked" in o} == {o["id"] for o in sent}
    again = receive(proxied, topic, group, 1, seconds=8)
    assert [o for o in again if "recv" in o] == [], "acked messages came back"


def test_an_orphaned_transaction_is_recovered_through_the_proxy(proxied: Proxied) -> None:
    """The producer dies after its half messages (on both brokers); each
    broker asks a producer of the topic, on its connection from the proxy,
    over its Telemetry stream (the dead one's is gone: another's); it
    commits, and a consumer receives every message."""
    topic, group = proxied.make_topic("TRANSACTION"), proxied.make_group()
    halves = [
        o
        for o in sdk5.run("tx", endpoint=proxied.grpc, topic=topic, n=16, resolution="orphan")
        if "half" in o
    ]
    # 16 over 2 brokers' 4 queues, at random: all on one broker 1 time in 2**15
    assert len(halves) == 16
    checker = sdk5.start("checker", endpoint=proxied.grpc, topic=topic, seconds=WAIT,
                         answer="commit")  # fmt: skip
    try:
        got = receive(proxied, topic, group, 16)
    finally:
        checker.kill()
        out, err = checker.communicate(timeout=30)
    checked = {o["checked"] for o in sdk5.parse(out) if "checked" in o}
    assert sorted(o["recv"] for o in got if "recv" in o) == sorted(o["body"] for o in halves), (
        got,
        err[-2000:],
    )
    assert checked >= {o["id"] for o in halves}, (checked, err[-2000:])
    counts = proxied.queue_counts(topic)
    assert sum(counts.values()) == 16 and all(counts[b] > 0 for b in BROKERS), counts


def _proxy_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pyrmq", "proxy", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_proxy_command_line_mistakes_are_one_line(tmp_path: pathlib.Path) -> None:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"proxyMode": "LOCAL", "namesrvAddr": "127.0.0.1:1"}))
    wrong_type = tmp_path / "type.json"
    wrong_type.write_text(json.dumps({"namesrvAddr": "127.0.0.1:1", "grpcServerPort": "x"}))
    cases = {
        (): "no name server",
        ("-pc", str(bad_json)): "is not JSON",
        ("-pc", str(local)): "the cluster mode",
        ("-pc", str(wrong_type)): "grpcServerPort",
        ("-n", "127.0.0.1:1", "--grpc-port", "99999"): "grpcServerPort 99999 is not a port",
    }
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        cases[("-n", "127.0.0.1:1", "--host", "127.0.0.1", "--grpc-port", port)] = "cannot listen"
        for args, says in cases.items():
            r = _proxy_cli(*args)
            assert r.returncode != 0, (args, r)
            assert "Traceback" not in r.stderr and says in r.stderr, (args, r.stderr)
