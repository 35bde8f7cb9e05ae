"""ACL 1.0 with the real RocketMQ C++ client (``rocketmq==0.4.4``,
``set_session_credentials``) against ``pyrmq standalone`` with aclEnable=true.

A signed producer and consumer work; a wrong secret, an unknown access key,
a client without credentials (it still signs, with AccessKey ""), a topic
without PUB and a group without SUB are refused, and nothing is stored or
consumed; a changed plain_acl.yml is in force within seconds, without a
restart. Topics are made with ``pyrmq admin`` and an admin account."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

try:
    import rocketmq.client  # noqa: F401
except Exception as exc:  # ImportError, or OSError when the bundled librocketmq.so won't load
    pytest.skip(
        f"the RocketMQ C++ client (pip install rocketmq==0.4.4) is not usable here: {exc!r}",
        allow_module_level=True,
    )

from rocketmq.exceptions import RocketMQException
from rocketmq.ffi import _CPullStatus

from pyrmq.admin import AdminClient
from pyrmq.admin import acl as acl_admin
from tests._waiting import wait_until

from .conftest import REPO, StandaloneServer
from .cpp import Clients, Collector, assert_send_ok, make_message, pull_until, pull_walk

ADMIN = ("cppAdmin01", "cppAdminSecret")
USER = ("cppUser001", "cppUserSecret")
ACL = """
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: cppAdmin01
    secretKey: cppAdminSecret
    admin: true
  - accessKey: cppUser001
    secretKey: cppUserSecret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [T_ok=PUB|SUB, T_subonly=SUB]
    groupPerms: [G_ok=SUB, G_pull=SUB]
"""
TOPICS = ("T_ok", "T_subonly", "T_later", "T_wrong", "T_unknown", "T_unsigned")
WAIT = 30.0


def admin_cli(server: StandaloneServer, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pyrmq", "admin", *args, "-n", server.namesrv,
           "--access-key", ADMIN[0], "--secret-key", ADMIN[1]]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    work = tmp_path_factory.mktemp("acl")
    (work / "plain_acl.yml").write_text(ACL)
    conf = work / "broker.conf"
    conf.write_text(f"aclEnable=true\naclPlainFile={work / 'plain_acl.yml'}\n")
    srv = StandaloneServer(work / "srv", "pyrmq standalone (acl)", ("-c", str(conf)))
    srv.start()
    try:
        for t in TOPICS:
            r = admin_cli(srv, "updateTopic", "-b", srv.broker, "-t", t, "-r", "2", "-w", "2")
            assert r.returncode == 0, r.stderr
        yield srv
    finally:
        rc = srv.stop()
        assert rc == 0, f"exit status on SIGTERM: {rc}\n{srv.log_tail(60)}"


@pytest.fixture
def signed(acl_server: StandaloneServer) -> Iterator[Clients]:
    c = Clients(acl_server.namesrv, USER)
    yield c
    c.close()


@pytest.fixture
def admin_clients(acl_server: StandaloneServer) -> Iterator[Clients]:
    c = Clients(acl_server.namesrv, ADMIN)
    yield c
    c.close()


def stored(admin_clients: Clients, topic: str) -> list[bytes]:
    """Everything in topic, pulled by the admin account."""
    return [m.body for m in pull_walk(admin_clients.pull_consumer(), topic, timeout=WAIT)]


def test_signed_producer_and_consumers_work(signed, admin_clients):
    p = signed.producer()
    bodies = [f"acl-ok-{i}".encode() for i in range(10)]
    for b in bodies:
        assert_send_ok(p.send_sync(make_message("T_ok", b)))
    got = pull_until(signed.pull_consumer("G_pull"), "T_ok", bodies, timeout=WAIT)
    assert set(bodies) <= {m.body for m in got}
    # a push consumer of a permitted group receives what is sent after it pulls
    col = Collector("push")
    signed.push_consumer("G_ok", "T_ok", col)
    late = [f"acl-push-{i}".encode() for i in range(10)]
    deadline = time.monotonic() + 60
    sent: list[bytes] = []
    while not set(late) <= set(col.bodies()) and time.monotonic() < deadline:
        # keep sending until the consumer's first pulls have started (new group: last offset)
        for b in late:
            if b not in sent or not col.messages:
                assert_send_ok(p.send_sync(make_message("T_ok", b)))
                sent.append(b)
        col.wait_for(lambda ms: set(late) <= {m.body for m in ms}, 2.0)
    assert set(late) <= set(col.bodies()), f"push consumer got {len(col.messages)}"
    assert not col.errors


@pytest.mark.parametrize(
    ("credentials", "topic"),
    [
        (("cppUser001", "wrongSecret1"), "T_wrong"),
        (("nobody0001", "whatever999"), "T_unknown"),
        (None, "T_unsigned"),
        (USER, "T_subonly"),
    ],
    ids=["wrong-secret", "unknown-access-key", "unsigned", "topic-without-pub"],
)
def test_refused_sends_store_nothing(acl_server, admin_clients, credentials, topic):
    clients = Clients(acl_server.namesrv, credentials)
    try:
        p = clients.producer()
        for i in range(3):
            with pytest.raises(RocketMQException):
                p.send_sync(make_message(topic, f"never-{i}".encode()))
    finally:
        clients.close()
    assert stored(admin_clients, topic) == []


def test_group_without_sub_consumes_nothing(acl_server, signed, admin_clients):
    p = signed.producer()
    bodies = [f"acl-denied-{i}".encode() for i in range(6)]
    for b in bodies:
        assert_send_ok(p.send_sync(make_message("T_ok", b)))
    denied = Collector("denied")
    signed.push_consumer("G_denied", "T_ok", denied)
    statuses: list[tuple[int, int, int, int, int]] = []
    with pytest.raises(AssertionError, match="did not finish"):
        # every pull is refused (the client sees no result: BROKER_TIMEOUT), so the
        # bounded walk never gets past the first queue
        pull_walk(signed.pull_consumer("G_not_listed"), "T_ok", timeout=3, statuses=statuses)
    assert statuses and {s[1] for s in statuses} == {_CPullStatus.BROKER_TIMEOUT}, statuses[:3]
    # the permitted group sees them: the topic is readable, the group is not
    got = pull_until(signed.pull_consumer("G_pull"), "T_ok", bodies, timeout=WAIT)
    assert set(bodies) <= {m.body for m in got}
    for b in bodies:  # more traffic while the denied consumer keeps trying
        assert_send_ok(p.send_sync(make_message("T_ok", b + b"-again")))
    assert not denied.wait_for(lambda ms: bool(ms), 5.0), "the denied push consumer got messages"


def test_changed_plain_acl_yml_applies_without_restart(acl_server, admin_clients):
    clients = Clients(acl_server.namesrv, USER)
    try:
        p = clients.producer()
        with pytest.raises(RocketMQException):
            p.send_sync(make_message("T_later", b"before"))
        path = pathlib.Path(acl_server.workdir.parent / "plain_acl.yml")
        assert path.exists(), path
        path.write_text(ACL.replace("T_subonly=SUB]", "T_subonly=SUB, T_later=PUB|SUB]"))

        async def version() -> int:
            async with AdminClient(acl_server.namesrv, access_key=ADMIN[0],
                                   secret_key=ADMIN[1]) as admin:  # fmt: skip
                return (await acl_admin.cluster_acl_config_version(admin))[0].counter

        def sendable() -> bool:
            try:
                assert_send_ok(p.send_sync(make_message("T_later", b"after")))
            except RocketMQException:
                return False
            return True

        took = asyncio.run(
            wait_until(
                sendable, "the edited plain_acl.yml in force", progress=version, stall_after=10
            )
        )
        assert took >= 0
        assert b"after" in stored(admin_clients, "T_later")
        assert b"before" not in stored(admin_clients, "T_later")
    finally:
        path.write_text(ACL)
        clients.close()
