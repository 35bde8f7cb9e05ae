"""`pyrmq cluster` as a user runs it: one command starts a name server and
master/slave groups as processes; clients use it; Ctrl-C (SIGINT) stops
every process it started; mistakes get one `error:` line."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

from pyrmq.common.errors import RMQError
from pyrmq.common.message import Message
from pyrmq.common.results import SendStatus
from pyrmq.producer import Producer
from pyrmq.remoting import RequestCode
from tests._reading import read_queue
from tests._waiting import wait_until
from tests.chaos._crash_helpers import Admin

REPO = pathlib.Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cluster_runs_master_slave_groups_and_ctrl_c_stops_them(
    arun: Any, tmp_path: pathlib.Path
) -> None:
    ready = tmp_path / "ready.json"
    cmd = [sys.executable, "-m", "pyrmq", "cluster", "--brokers", "2", "--replicas", "2"]
    cmd += ["--dir", str(tmp_path / "c"), "--base-port", "0", "--namesrv-port", "0"]
    proc = subprocess.Popen(
        [*cmd, "--ready-file", str(ready)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        for _ in range(1200):  # 120 s at most
            if ready.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert ready.exists(), proc.stdout.read().decode() if proc.stdout else ""
        info = json.loads(ready.read_text())
        assert sorted(info["brokers"]) == ["broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1"]
        pids = [
            json.loads((tmp_path / "c" / f"{n}.ready.json").read_text())["pid"]
            for n in [*info["brokers"], "namesrv"]
        ]

        async def use() -> None:
            async with Admin(info["namesrv"]) as admin:
                for name in ("broker-a-0", "broker-b-0"):
                    await admin.create_topic(info["brokers"][name], "ClusterT", 2)
                async with Producer("cluster-pg", info["namesrv"]) as p:
                    results = [
                        await p.send(Message("ClusterT", f"m{i}".encode())) for i in range(20)
                    ]
                assert all(r.send_status is SendStatus.SEND_OK for r in results)
                assert {r.message_queue.broker_name for r in results} == {"broker-a", "broker-b"}
                # each slave holds its master's messages
                for group in ("broker-a", "broker-b"):
                    mine = [r for r in results if r.message_queue.broker_name == group]
                    for _ in range(100):
                        got = []
                        for r in mine:
                            got += await read_queue(
                                admin.api, info["brokers"][f"{group}-1"], r.message_queue
                            )
                        if len({m.msg_id for m in got}) >= len(mine):
                            break
                        await asyncio.sleep(0.1)
                    bodies = {m.body for m in got}
                    assert {f"m{i}".encode() for i, r in enumerate(results) if r in mine} <= bodies

        arun(use(), timeout=120)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, out.decode()
        assert b"stopped" in out
        assert not [pid for pid in pids if _alive(pid)], "processes left running"
    finally:
        _end(proc, tmp_path / "c")


def test_cluster_mistakes_get_one_error_line(tmp_path: pathlib.Path) -> None:
    cases = [
        (["--brokers", "0"], "--brokers must be within"),
        (["--replicas", "12"], "--replicas must be within"),
        (["--base-port", "65530", "--brokers", "3"], "--base-port 65530"),
        (["-c", str(tmp_path / "missing.conf")], "missing.conf"),
    ]
    for extra, want in cases:
        r = subprocess.run(
            [sys.executable, "-m", "pyrmq", "cluster", "--dir", str(tmp_path / "x"), *extra],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 1, (extra, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and want in lines[0], lines


def test_cluster_with_controllers_fails_over_when_the_master_dies(
    arun: Any, tmp_path: pathlib.Path
) -> None:
    ready = tmp_path / "ready.json"
    cmd = [sys.executable, "-m", "pyrmq", "cluster", "--brokers", "1", "--replicas", "2"]
    cmd += ["--controllers", "3", "--dir", str(tmp_path / "c")]
    cmd += ["--base-port", "0", "--namesrv-port", "0", "--ready-file", str(ready)]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        for _ in range(1200):  # 120 s at most
            if ready.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert ready.exists(), proc.stdout.read().decode() if proc.stdout else ""
        info = json.loads(ready.read_text())
        assert len(info["namesrv"].split(";")) == 3

        async def use() -> None:
            async with Admin(info["namesrv"]) as admin:

                async def master(replicas: int = 1) -> str | None:
                    """The master, once its SyncStateSet has `replicas` members."""
                    for name, addr in info["brokers"].items():
                        try:
                            resp = await admin.api.broker_request(
                                addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=2.0
                            )
                        except RMQError:
                            continue
                        t = json.loads(resp.body)["table"]
                        in_set = json.loads(t.get("syncStateSet", "[]"))
                        if t.get("controllerRole") == "MASTER" and len(in_set) >= replicas:
                            return name
                    return None

                # only a SyncStateSet member may take over: wait until the
                # slave is one (checkSyncStateSetPeriod, 5 s by default)
                await wait_until(
                    lambda: _is(master(2)), "a master with its slave in sync", stall_after=60
                )
                first = await master(2)
                assert first is not None
                await admin.create_topic(info["brokers"][first], "FoCmdT", 2)
                async with Producer("fo-cmd", info["namesrv"], send_msg_timeout=2.0) as p:
                    assert (await p.send(Message("FoCmdT", b"before"))).send_status is (
                        SendStatus.SEND_OK
                    )
                    pid = json.loads((tmp_path / "c" / f"{first}.ready.json").read_text())["pid"]
                    os.kill(pid, signal.SIGKILL)

                    async def sent_again() -> bool:
                        try:
                            r = await p.send(Message("FoCmdT", b"after"))
                        except RMQError:
                            return False
                        return r.send_status is SendStatus.SEND_OK

                    await wait_until(
                        sent_again, "a send accepted by the new master", stall_after=60
                    )
                assert await master() not in (None, first)

        arun(use(), timeout=180)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
        assert b"stopped" in out
    finally:
        _end(proc, tmp_path / "c")


async def _is(coro: Any) -> bool:
    return await coro is not None


def _end(proc: subprocess.Popen[bytes], root: pathlib.Path) -> None:
    """A test that failed midway: SIGINT the command (it stops its
    processes), else SIGKILL it and the processes it started, by PID."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    for ready in root.glob("*.ready.json"):
        try:
            pid = json.loads(ready.read_text())["pid"]
        except (OSError, ValueError, KeyError):
            continue
        try:
            ours = b"pyrmq" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # gone
        if ours:
            os.kill(pid, signal.SIGKILL)
