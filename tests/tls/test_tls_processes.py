"""TLS through the command line: `pyrmq namesrv --tls-config FILE` and a
broker whose broker.conf holds the tls.* keys, as processes; a producer and
a push consumer end to end over TLS, the admin CLI with and without --tls,
and one-line startup errors for certificate files that cannot be used."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from pyrmq.common.errors import RemotingError
from pyrmq.common.message import Message
from pyrmq.consumer.push_consumer import PushConsumer
from pyrmq.consumer.types import ConsumeFromWhere
from pyrmq.producer.producer import Producer
from pyrmq.testing.certs import CertFiles
from pyrmq.testing.cluster import ProcessCluster, StandaloneProcess
from tests._cli import pyrmq_cli
from tests._waiting import wait_until


def _write(path, props: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


@pytest.fixture
def enforcing(tmp_path, certs: CertFiles) -> Iterator[ProcessCluster]:
    tls_file = _write(tmp_path / "tls.properties", certs.server_properties("enforcing"))
    broker_tls = certs.server_properties(
        "enforcing", **{"tls.enable": "true", "tls.client.trustCertPath": str(certs.ca)}
    )
    with ProcessCluster(
        tmp_path / "cluster",
        broker_names=("broker-a",),
        broker_conf=broker_tls,
        namesrv_args=["--tls-config", tls_file],
    ) as c:
        yield c


def test_enforcing_end_to_end(arun, enforcing: ProcessCluster, certs: CertFiles) -> None:
    ns = enforcing.namesrv_addr
    tls_opts = ["--tls", "--tls-ca", str(certs.ca)]
    topic = "TlsE2E"

    async def main() -> None:
        # the admin CLI over TLS (the broker registered over TLS: the name
        # server knows its cluster)
        rc, out, err = await pyrmq_cli(
            "admin", "updateTopic", "-n", ns, "-c", "DefaultCluster",
            "-t", topic, "-r", "4", "-w", "4", *tls_opts,
        )  # fmt: skip
        assert rc == 0, err
        rc, out, err = await pyrmq_cli("admin", "topicList", "-n", ns, *tls_opts)
        assert rc == 0 and topic in out, (out, err)
        # without --tls: one clear line, no traceback
        rc, out, err = await pyrmq_cli("admin", "topicList", "-n", ns, "--timeout", "3")
        assert rc == 1, (out, err)
        assert err.count("\n") == 1 and err.startswith("error: ") and "TLS" in err, err
        assert "Traceback" not in err
        # the console producer too
        rc, out, err = await pyrmq_cli(
            "produce", "-n", ns, "-t", topic, "--body", "cli", "--count", "2", "-q", *tls_opts
        )
        assert rc == 0, err

        got: dict[bytes, int] = {}

        async def listener(msgs, context) -> None:
            for m in msgs:
                got[m.body] = got.get(m.body, 0) + 1

        consumer = PushConsumer(
            "tls-cg",
            ns,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            rebalance_interval=1.0,
            poll_name_server_interval=1.0,
            tls=True,
            tls_ca=str(certs.ca),
        )
        consumer.subscribe(topic)
        consumer.register_message_listener(listener)
        sent = [f"tls-{i}".encode() for i in range(40)]
        async with Producer("tls-pg", ns, tls=True, tls_ca=str(certs.ca)) as p:
            for body in sent:
                r = await p.send(Message(topic, body))
                assert r.send_status.name == "SEND_OK"
        await consumer.start()
        try:
            sent.append(b"cli")
            await wait_until(
                lambda: set(got) == set(sent),
                "the push consumer receiving every message over TLS",
                progress=lambda: len(got),
            )
        finally:
            await consumer.shutdown()
        # a plain client is refused, and told why
        plain = Producer("plain-pg", ns, send_msg_timeout=2.0)
        await plain.start()
        try:
            with pytest.raises(RemotingError, match="may require TLS"):
                await plain.send(Message(topic, b"plain"))
        finally:
            await plain.shutdown()

    arun(main(), timeout=180)


@pytest.mark.parametrize("what", ["missing-cert", "key-mismatch", "bad-mode"])
def test_unusable_tls_settings_are_one_line_startup_errors(
    arun, tmp_path, certs: CertFiles, what: str
) -> None:
    props = certs.server_properties("enforcing")
    if what == "missing-cert":
        props["tls.server.certPath"] = str(tmp_path / "absent.pem")
        needle = "absent.pem"
    elif what == "key-mismatch":
        props["tls.server.keyPath"] = str(certs.client_key)
        needle = "cannot use certificate"
    else:
        props["tls.server.mode"] = "strict"
        needle = "disabled | permissive | enforcing"
    tls_file = _write(tmp_path / "tls.properties", props)
    broker_conf = _write(
        tmp_path / "broker.conf",
        {"storePathRootDir": str(tmp_path / "store"), "listenPort": "0", **props},
    )

    async def main() -> None:
        for args in (
            ["namesrv", "-p", "0", "--tls-config", tls_file],
            ["broker", "-c", broker_conf, "-n", "127.0.0.1:1"],
            ["standalone", "--store", str(tmp_path / "st"), "--namesrv-port", "0",
             "--broker-port", "0", "--tls-config", tls_file],
        ):  # fmt: skip
            rc, out, err = await pyrmq_cli(*args, timeout=60)
            lines = [ln for ln in err.splitlines() if not ln.startswith(("20", "WARNING"))]
            assert rc == 1, (args, out, err)
            assert "Traceback" not in err, err
            assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err

    arun(main(), timeout=120)


def test_handshake_timeout_is_bounded_for_cli_servers(arun, tmp_path, certs) -> None:
    """A process started with a short handshake timeout closes a silent
    connection after it (the key reaches the server through --tls-config)."""
    tls_file = _write(
        tmp_path / "tls.properties",
        certs.server_properties("permissive", **{"tls.server.handshakeTimeoutMs": "500"}),
    )
    with ProcessCluster(
        tmp_path / "c", broker_names=(), namesrv_args=["--tls-config", tls_file]
    ) as c:
        host, _, port = c.namesrv_addr.rpartition(":")

        async def main() -> float:
            loop = asyncio.get_running_loop()
            reader, writer = await asyncio.open_connection(host, int(port))
            t0 = loop.time()
            try:
                async with asyncio.timeout(10):
                    assert await reader.read() == b""
            finally:
                writer.close()
            return loop.time() - t0

        took = arun(main(), timeout=30)
        assert took < 10


def test_standalone_enforcing_registers_its_broker_over_tls(arun, tmp_path, certs) -> None:
    """`pyrmq standalone` with tls.server.mode=enforcing and no client keys:
    its broker registers with its own name server over TLS, trusting the
    server's certificate."""
    settings = {**certs.server_properties("enforcing"), "mappedFileSizeCommitLog": 16 << 20}
    srv = StandaloneProcess(tmp_path, settings)
    srv.start()
    try:

        async def main() -> None:
            async with Producer("st-pg", srv.namesrv, tls=True, tls_ca=str(certs.ca)) as p:
                r = await p.send(Message("StandaloneTls", b"hello"))
                assert r.send_status.name == "SEND_OK"
            rc, out, err = await pyrmq_cli(
                "admin", "clusterList", "-n", srv.namesrv, "--tls", "--tls-ca", str(certs.ca)
            )
            assert rc == 0 and "broker-a" in out, (out, err)

        arun(main(), timeout=60)
    finally:
        assert srv.stop() == 0
