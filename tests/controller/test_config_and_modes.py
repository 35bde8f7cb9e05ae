"""How a controller is run: bad configs are one `error:` line and exit 1;
controllers whose peer lists disagree refuse to serve and say so in their
log; enableControllerInNamesrv serves the controller on the name server's
port; SIGTERM stops a controller with status 0."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import pytest

from pyrmq.controller import ControllerClient
from pyrmq.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from pyrmq.testing.cluster import ServerProcess, free_ports
from tests._waiting import wait_until
from tests.controller.conftest import CLUSTER

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("controllerDLegerSelfId=n0\n", "controllerDLegerPeers is required"),
        (
            "controllerDLegerPeers=n0-127.0.0.1:1;n1-127.0.0.1:2\ncontrollerDLegerSelfId=n7\n",
            "controllerDLegerSelfId 'n7' is not in controllerDLegerPeers (n0, n1)",
        ),
        (
            "controllerDLegerPeers=n0-127.0.0.1:1;n1:127.0.0.1:2\ncontrollerDLegerSelfId=n0\n",
            "entry 'n1:127.0.0.1:2' is not id-host:port",
        ),
        (
            "controllerDLegerPeers=n0-127.0.0.1:1;n0-127.0.0.1:2\ncontrollerDLegerSelfId=n0\n",
            "repeats the id(s) n0",
        ),
        (
            "controllerDLegerPeers=n0-127.0.0.1:1\ncontrollerDLegerSelfId=n0\n"
            "scanNotActiveBrokerInterval=soon\n",
            "bad value for scanNotActiveBrokerInterval",
        ),
        (None, "cannot read config file"),
    ],
)
def test_bad_config_is_one_error_line(
    tmp_path: pathlib.Path, conf: str | None, message: str
) -> None:
    path = tmp_path / "controller.conf"
    if conf is not None:
        path.write_text(conf)
    r = subprocess.run(
        [sys.executable, "-m", "pyrmq", "controller", "-c", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert message in lines[0]
    assert "Traceback" not in r.stderr


def test_taken_raft_port_is_one_error_line(tmp_path: pathlib.Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        path = tmp_path / "controller.conf"
        path.write_text(
            f"controllerDLegerPeers=n0-127.0.0.1:{port}\ncontrollerDLegerSelfId=n0\n"
            f"controllerStorePath={tmp_path / 'store'}\nlistenPort=0\n"
        )
        r = subprocess.run(
            [sys.executable, "-m", "pyrmq", "controller", "-c", str(path)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
    assert r.returncode == 1
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert errors == [
        f"error: cannot listen on the Raft port 127.0.0.1:{port}: Address already in use"
    ]
    assert "Traceback" not in r.stderr


def test_disagreeing_peer_lists_are_refused(group_factory: Any, arun: Any) -> None:
    """n2 lists a fourth peer the others do not: n0 and n1 still make a
    majority and n2 follows them, so pysyncobj runs happily; the member
    check notices, every controller logs an ERROR naming both lists and
    answers requests SYSTEM_ERROR until the configs agree."""
    extra_port = free_ports(1)[0]
    g = group_factory(3)
    g.per_node = {2: {"controllerDLegerPeers": f"{g.peers};n3-127.0.0.1:{extra_port}"}}
    g.write_conf(2)

    async def main() -> None:
        await g.start()
        remoting = RemotingClient(name="test")
        try:

            def refused_in_logs() -> bool:
                return all("peer lists disagree" in g.log(i) for i in range(3))

            await wait_until(
                refused_in_logs, "every controller to log the disagreement", stall_after=40
            )
            line = next(ln for ln in g.log(0).splitlines() if "peer lists disagree" in ln)
            assert " ERROR " in line and "n3-127.0.0.1" in line
            for addr in g.addrs:
                cmd = RemotingCommand(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})
                resp = await remoting.invoke(addr, cmd, 5)
                assert resp.code == ResponseCode.SYSTEM_ERROR
                assert "refuses to serve" in (resp.remark or "")
        finally:
            await remoting.shutdown()

    arun(main(), timeout=120)


def test_controller_in_namesrv_and_sigterm(tmp_path: pathlib.Path, arun: Any) -> None:
    raft_port, ns_port = free_ports(2)
    conf = tmp_path / "namesrv.conf"
    conf.write_text(
        f"listenPort={ns_port}\nenableControllerInNamesrv=true\n"
        f"controllerDLegerGroup=group1\ncontrollerDLegerPeers=n0-127.0.0.1:{raft_port}\n"
        f"controllerDLegerSelfId=n0\ncontrollerStorePath={tmp_path / 'store'}\n"
    )
    ns = ServerProcess("namesrv", ["namesrv", "--host", "127.0.0.1", "-c", str(conf)], tmp_path)

    async def main() -> None:
        await ns.start_async()
        addr = f"127.0.0.1:{ns_port}"
        assert ns.info["namesrv"] == addr and ns.info["controller"] == addr
        async with ControllerClient(addr, retry_timeout=30) as client:
            bid, _ = await client.register(CLUSTER, "broker-c", "127.0.0.1:30911")
            assert bid == 1
            md = await client.get_metadata(addr)
            assert md.is_leader and md.group == "group1" and md.leader_address == addr
        remoting = RemotingClient(name="test")
        try:  # the name server's own codes still answer
            resp = await remoting.invoke(
                addr, RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO), 5
            )
            assert resp.code == ResponseCode.SUCCESS
        finally:
            await remoting.shutdown()

    try:
        arun(main(), timeout=120)
    finally:
        assert ns.stop() == 0
