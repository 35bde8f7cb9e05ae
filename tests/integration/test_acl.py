"""ACL 1.0 end to end with pyrmq's own clients: a LocalCluster broker with
aclEnable=true, real sockets on 127.0.0.1. Signed Producer, PushConsumer,
PullConsumer and TransactionProducer work; wrong secrets, unknown or missing
access keys and missing rights are refused with NO_PERMISSION and store
nothing; the admin API and CLI change plain_acl.yml; a changed file takes
effect without a restart; a client's answers to broker requests are signed."""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pyrmq import LocalTransactionState, Message, MessageExt, Producer, PullConsumer, PushConsumer
from pyrmq.acl import AclClientRPCHook
from pyrmq.admin import AdminClient
from pyrmq.admin import acl as acl_admin
from pyrmq.common.errors import NoPermissionError, TopicNotExistError
from pyrmq.consumer.types import ConsumeFromWhere
from pyrmq.producer.transaction import TransactionProducer
from pyrmq.remoting import Connection, RemotingClient, RemotingCommand, RemotingServer
from pyrmq.testing import LocalCluster
from tests._cli import pyrmq_cli
from tests._waiting import wait_until

ADMIN = ("adminAK01", "adminSK01")
USER = ("userAK001", "userSK001")
ACL = """
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: adminAK01
    secretKey: adminSK01
    admin: true
  - accessKey: userAK001
    secretKey: userSK001
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [AclT=PUB|SUB, TxT=PUB|SUB, SubOnlyT=SUB]
    groupPerms: [G_push=SUB, G_pull=SUB, PG_tx=PUB]
"""
FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@contextlib.asynccontextmanager
async def acl_cluster(tmp_path: pathlib.Path, text: str = ACL) -> AsyncIterator[LocalCluster]:
    path = tmp_path / "plain_acl.yml"
    path.write_text(text)
    c = LocalCluster(
        str(tmp_path / "store"),
        acl_enable=True,
        acl_plain_file=str(path),
        transaction_check_interval=200,
        transaction_time_out=300,
    )
    await c.start()
    try:
        yield c
    finally:
        await c.shutdown()


def creds(pair: tuple[str, str]) -> dict[str, str]:
    return {"access_key": pair[0], "secret_key": pair[1]}


async def stored(c: LocalCluster, topic: str) -> int:
    """Messages in topic, asked with the admin account (0: no such topic).
    Any other failure is raised: a request that timed out on a busy machine
    must not pass for an empty topic."""
    async with AdminClient(c.namesrv_addr, timeout=30.0, **creds(ADMIN)) as admin:
        try:
            status = await admin.topic_status(topic)
        except TopicNotExistError:
            return 0
    return sum(q.max_offset for q in status.queues)


def test_signed_pyrmq_clients_end_to_end(arun, tmp_path):
    async def main() -> None:
        async with acl_cluster(tmp_path) as c:
            ns = c.namesrv_addr
            async with Producer("PG_user", ns, **creds(USER)) as p:
                for i in range(20):
                    await p.send(Message("AclT", f"m{i}".encode()))
            got: list[bytes] = []

            async def listen(msgs: list[MessageExt], ctx: Any) -> None:
                got.extend(m.body for m in msgs)

            push = PushConsumer("G_push", ns, consume_from_where=FIRST, **creds(USER))
            push.subscribe("AclT", "*")
            push.register_message_listener(listen)
            async with push:
                await wait_until(lambda: len(got) >= 20, "20 messages to the signed push consumer",
                                 progress=lambda: len(got), stall_after=20)  # fmt: skip
            assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))

            pulled: list[bytes] = []
            pull = PullConsumer("G_pull", ns, consume_from_where=FIRST, **creds(USER))
            pull.subscribe("AclT", "*")
            async with pull:

                async def more() -> bool:
                    pulled.extend(m.body for m in await pull.poll(timeout=0.5))
                    return len(pulled) >= 20

                await wait_until(more, "20 messages to the signed pull consumer",
                                 progress=lambda: len(pulled), stall_after=20)  # fmt: skip
            assert sorted(pulled) == sorted(got)

            class Unknown:
                checked = 0

                async def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
                    return LocalTransactionState.UNKNOW

                def check_local_transaction(self, msg: MessageExt) -> Any:
                    self.checked += 1
                    return LocalTransactionState.COMMIT_MESSAGE

            listener = Unknown()
            # the commit goes back in answer to the broker's check (signed END_TRANSACTION)
            async with TransactionProducer("PG_tx", ns, transaction_listener=listener,
                                           **creds(USER)) as tp:  # fmt: skip
                await tp.send_message_in_transaction(Message("TxT", b"tx"))
                await wait_until(
                    lambda: listener.checked > 0, "a transaction check", stall_after=20
                )

                async def committed() -> bool:
                    return await stored(c, "TxT") >= 1

                await wait_until(committed, "the checked transaction committed", stall_after=20)

    arun(main(), timeout=120)


def test_refusals_store_and_consume_nothing(arun, tmp_path):
    async def main() -> None:
        async with acl_cluster(tmp_path) as c:
            ns = c.namesrv_addr
            async with Producer("PG_ok", ns, **creds(USER)) as p:
                await p.send(Message("AclT", b"first"))
            cases = [
                ({"access_key": "userAK001", "secret_key": "wrongSecret"}, "AclT",
                 "Check signature failed for accessKey=userAK001"),
                ({"access_key": "nobody0001", "secret_key": "whatever99"}, "AclT",
                 "No acl config for accessKey=nobody0001"),
                ({}, "AclT", "No accessKey is configured"),
                (creds(USER), "SubOnlyT", "No permission for topic SubOnlyT: accessKey=userAK001 "
                 "needs PUB, has SUB"),
                (creds(USER), "Elsewhere", "No permission for topic Elsewhere"),
            ]  # fmt: skip
            for kw, topic, why in cases:
                # a long deadline: on a busy machine a slow answer must not
                # pass for a refusal, nor a refusal for a timeout
                async with Producer(
                    "PG_bad", ns, retry_times_when_send_failed=0, send_msg_timeout=30.0, **kw
                ) as bad:
                    with pytest.raises(NoPermissionError) as info:
                        await bad.send(Message(topic, b"never"))
                    assert why in info.value.remark, info.value.remark
            # the first send created AclT: the name servers may hear of it a
            # moment later on a busy machine
            await wait_until(lambda: stored(c, "AclT"), "AclT's route and its message")
            assert await stored(c, "AclT") == 1
            assert await stored(c, "SubOnlyT") == 0
            # a group without SUB reads nothing, not even what is there
            denied = PullConsumer("G_denied", ns, consume_from_where=FIRST, **creds(USER))
            denied.subscribe("AclT", "*")
            async with denied:
                for _ in range(3):
                    assert await denied.poll(timeout=0.5) == []
            async with AdminClient(ns, **creds(ADMIN)) as admin:
                progress = await admin.consumer_progress("G_denied", "AclT")
            assert all((q.consumer_offset or 0) <= 0 for q in progress.queues), progress

    arun(main(), timeout=120)


def test_admin_api_and_file_changes_apply_without_restart(arun, tmp_path):
    async def main() -> None:
        async with acl_cluster(tmp_path) as c:
            ns = c.namesrv_addr
            acl = c.broker.acl  # type: ignore[union-attr]
            assert acl is not None
            async with AdminClient(ns, **creds(ADMIN)) as admin:
                v0 = (await acl_admin.cluster_acl_config_version(admin))[0]
                brokers = await acl_admin.update_acl_config(
                    admin, "madeByAdmin", secret_key="madeSecret1", topic_perms=["AclT=PUB"]
                )
                assert brokers == [c.broker_addr]
                v1 = (await acl_admin.cluster_acl_config_version(admin))[0]
                assert v1.counter > v0.counter and v1.broker_addr == c.broker_addr
            made = {"access_key": "madeByAdmin", "secret_key": "madeSecret1"}
            async with Producer("PG_made", ns, retry_times_when_send_failed=0, **made) as p:
                await p.send(Message("AclT", b"by the new account"))
                # a user account may not administer
                async with AdminClient(ns, **creds(USER)) as user:
                    with pytest.raises(NoPermissionError, match="Need admin permission"):
                        await acl_admin.delete_acl_config(user, "madeByAdmin")
                async with AdminClient(ns, **creds(ADMIN)) as admin:
                    await acl_admin.delete_acl_config(admin, "madeByAdmin")
                with pytest.raises(NoPermissionError, match="No acl config"):
                    await p.send(Message("AclT", b"deleted"))

            # plain_acl.yml edited by hand: in force within seconds, no restart
            path = pathlib.Path(acl.path)
            async with Producer("PG_u", ns, retry_times_when_send_failed=0, **creds(USER)) as p:
                with pytest.raises(NoPermissionError):
                    await p.send(Message("LaterT", b"x"))
                path.write_text(ACL.replace("SubOnlyT=SUB]", "SubOnlyT=SUB, LaterT=PUB]"))

                async def sendable() -> bool:
                    try:
                        await p.send(Message("LaterT", b"now"))
                    except NoPermissionError:
                        return False
                    return True

                await wait_until(sendable, "the edited plain_acl.yml in force",
                                 progress=lambda: acl.version.counter, stall_after=10)  # fmt: skip
                # a malformed edit keeps the last good config
                version = acl.version
                path.write_text("accounts: [\n")
                await wait_until(lambda: acl._bad_seen is not None, "the bad file noticed",
                                 stall_after=10)  # fmt: skip
                assert acl.version == version
                await p.send(Message("LaterT", b"still"))

    arun(main(), timeout=120)


def test_client_answers_to_broker_requests_are_signed(arun):
    """A RemotingClient with the hook signs its requests and the answers it
    gives the server's requests (CHECK_TRANSACTION_STATE, running info)."""

    async def main() -> None:
        seen: dict[str, RemotingCommand] = {}
        conns: list[Connection] = []

        def server_side(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            seen["request"] = cmd
            conns.append(conn)
            return cmd.response(0)

        def client_side(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.response(0, {"answer": "yes"}, b"body")

        server = RemotingServer("127.0.0.1", 0, name="test-server")
        server.register(1234, server_side)
        await server.start()
        hook = AclClientRPCHook(*USER)
        client = RemotingClient(client_side, rpc_hook=hook)
        try:
            addr = f"127.0.0.1:{server.port}"
            await client.invoke(addr, RemotingCommand(1234, {"x": "1"}, b"req"), 5)
            req = seen["request"]
            assert req.ext_fields["AccessKey"] == USER[0]
            answer = await conns[0].invoke(RemotingCommand(39, {"k": "v"}), 5)
            assert answer.ext_fields["AccessKey"] == USER[0]
            from pyrmq.acl.signing import mac_for, signature

            for cmd in (req, answer):
                assert cmd.ext_fields["Signature"] == signature(
                    mac_for(USER[1]), cmd.ext_fields, cmd.body
                )
        finally:
            await client.shutdown()
            await server.shutdown()

    arun(main(), timeout=30)


def test_admin_cli_with_credentials_and_one_line_errors(arun, tmp_path, monkeypatch):
    async def main() -> None:
        async with acl_cluster(tmp_path) as c:
            base = ["admin", "updateTopic", "-n", c.namesrv_addr, "-b", c.broker_addr]
            rc, out, err = await pyrmq_cli(*base, "-t", "CliT")
            assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
            assert err.startswith("error: No accessKey is configured"), err
            admin_args = ["--access-key", ADMIN[0], "--secret-key", ADMIN[1]]
            rc, out, err = await pyrmq_cli(*base, "-t", "CliT", *admin_args)
            assert rc == 0, err
            user_args = ["--access-key", USER[0], "--secret-key", USER[1]]
            rc, out, err = await pyrmq_cli(*base, "-t", "CliT2", *user_args)
            assert rc == 1 and err.count("\n") == 1, err
            assert "Need admin permission for request code=17" in err

            where = ["-n", c.namesrv_addr, "-b", c.broker_addr]
            rc, out, err = await pyrmq_cli(
                "admin", "updateAclConfig", *where, *admin_args, "-a", "cliMade01",
                "-s", "cliSecret1", "-t", "CliT=PUB|SUB,Other=SUB", "-i", "DENY", "-m", "false",
            )  # fmt: skip
            assert rc == 0 and "success" in out, (out, err)
            rc, out, err = await pyrmq_cli(
                "admin", "updateAclConfig", *where, *admin_args, "-a", "cliMade01", "-i", "ALL"
            )
            assert rc == 1 and err.count("\n") == 1 and "permission 'ALL'" in err, err
            monkeypatch.setenv("ROCKETMQ_ACCESS_KEY", "cliMade01")
            monkeypatch.setenv("ROCKETMQ_SECRET_KEY", "cliSecret1")
            rc, out, err = await pyrmq_cli(
                "admin", "sendMessage", "-n", c.namesrv_addr, "-t", "CliT", "-p", "hello"
            )
            assert rc == 0, err
            monkeypatch.delenv("ROCKETMQ_ACCESS_KEY")
            monkeypatch.delenv("ROCKETMQ_SECRET_KEY")
            rc, out, err = await pyrmq_cli(
                "admin", "updateGlobalWhiteAddr", *where, *admin_args, "-g", "10.1.*.*"
            )
            assert rc == 0, err
            rc, out, err = await pyrmq_cli(
                "admin", "clusterAclConfigVersion", *where, *admin_args, "--json"
            )
            assert rc == 0 and '"counter"' in out, err
            rc, out, err = await pyrmq_cli(
                "admin", "deleteAclConfig", *where, *admin_args, "-a", "cliMade01"
            )
            assert rc == 0, err
            acl_path = pathlib.Path(c.broker.acl.path)  # type: ignore[union-attr]
            text = acl_path.read_text()
            assert "cliMade01" not in text and "10.1.*.*" in text
            # a hand-broken file: the update is refused in one line, the file left alone
            acl_path.write_text(text + "accounts: [\n")
            rc, out, err = await pyrmq_cli(
                "admin", "updateAclConfig", *where, *admin_args, "-a", "cliMade02", "-s", "x" * 8
            )
            assert rc == 1 and err.count("\n") == 1 and "not valid YAML" in err, err
            assert "cliMade02" not in acl_path.read_text()
            acl_path.write_text(text)
            assert sorted(os.listdir(tmp_path)) == ["plain_acl.yml", "store"]

    arun(main(), timeout=180)


def test_broker_with_missing_or_malformed_acl_file_does_not_start(arun, tmp_path):
    async def main() -> None:
        conf = tmp_path / "broker.conf"
        conf.write_text(
            f"aclEnable=true\nlistenPort=0\nstorePathRootDir={tmp_path / 'store'}\n"
            "namesrvAddr=127.0.0.1:1\n"
        )
        rc, _out, err = await pyrmq_cli("broker", "-c", str(conf), timeout=60)
        assert rc == 1 and "Traceback" not in err, err
        assert f"cannot read {tmp_path / 'plain_acl.yml'}" in err, err  # beside broker.conf
        (tmp_path / "plain_acl.yml").write_text("accounts:\n  - accessKey: x\n")
        rc, _out, err = await pyrmq_cli("broker", "-c", str(conf), timeout=60)
        assert rc == 1 and "Traceback" not in err, err
        assert "secretKey is missing" in err, err

    arun(main(), timeout=150)


def test_acl_off_ignores_credentials(arun, tmp_path):
    """Without aclEnable the three keys are ignored: signed and unsigned
    clients both work, and `AccessKey: ""` is never refused."""

    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store")) as c:
            for kw in ({}, creds(USER), {"access_key": "anything", "secret_key": "x"}):
                async with Producer("PG_off", c.namesrv_addr, **kw) as p:
                    await p.send(Message("OffT", b"x"))
            api_client = RemotingClient()
            try:
                cmd = RemotingCommand(30, {"topic": "OffT", "queueId": "0", "AccessKey": "",
                                           "OnsChannel": "ALIYUN", "Signature": "x"})  # fmt: skip
                resp = await api_client.invoke(c.broker_addr, cmd, 5)
                assert resp.code == 0, resp
            finally:
                await api_client.shutdown()

    arun(main(), timeout=60)
