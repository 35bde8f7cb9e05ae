"""TLS on a real NameServer + Broker (LocalCluster, in this process) over
127.0.0.1 sockets: permissive serves TLS and plain on one port, enforcing
refuses plain, mutual TLS refuses a client without a certificate, pulls
over TLS arrive whole (no sendfile), and hostile first bytes cost the
server nothing but the one connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import rmqcore
from pyrmq.common.errors import RemotingError
from pyrmq.common.message import Message
from pyrmq.producer.producer import Producer
from pyrmq.remoting import RemotingClient, RemotingCommand, TlsConfig, client_ssl_context
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.codes import ResponseCode as R
from pyrmq.testing import LocalCluster
from tests.integration.helpers import props, pull, send_ok, simple


@contextlib.asynccontextmanager
async def tls_cluster(tmp_path: Any, tls: TlsConfig) -> AsyncIterator[LocalCluster]:
    c = LocalCluster(str(tmp_path / "store"), tls=tls)
    await c.start()
    try:
        yield c
    finally:
        await c.shutdown()


async def topic_route_code(client: RemotingClient, addr: str, topic: str = "TBW102") -> int:
    cmd = RemotingCommand(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return (await client.invoke(addr, cmd, 5.0)).code


async def send_and_check(namesrv: str, topic: str, **tls: Any) -> None:
    async with Producer(f"pg-{topic}", namesrv, **tls) as p:
        for i in range(3):
            r = await p.send(Message(topic, f"{topic}-{i}".encode()))
            assert r.send_status.name == "SEND_OK", r


def test_permissive_serves_tls_and_plain_on_one_port(arun, tmp_path, certs) -> None:
    async def main() -> None:
        async with tls_cluster(tmp_path, certs.server_tls("permissive")) as c:
            assert c.broker is not None and c.broker.server is not None
            async with (
                Producer("pg-tls", c.namesrv_addr, tls=True, tls_ca=str(certs.ca)) as pt,
                Producer("pg-plain", c.namesrv_addr) as pp,
            ):
                for p, topic in ((pt, "TlsTopic"), (pp, "PlainTopic")):
                    for i in range(3):
                        r = await p.send(Message(topic, f"{topic}-{i}".encode()))
                        assert r.send_status.name == "SEND_OK", r
                kinds = sorted(conn.tls for conn in c.broker.server.connections)
                assert kinds == [False, True], kinds

    arun(main(), timeout=60)


def test_enforcing_refuses_plain_and_says_why(arun, tmp_path, certs) -> None:
    async def main() -> None:
        async with tls_cluster(tmp_path, certs.server_tls("enforcing")) as c:
            await send_and_check(c.namesrv_addr, "TlsTopic", tls=True, tls_ca=str(certs.ca))
            plain = RemotingClient(name="plain")
            try:
                for addr in (c.namesrv_addr, c.broker_addr):
                    with pytest.raises(RemotingError, match="the server may require TLS"):
                        await topic_route_code(plain, addr)
            finally:
                await plain.shutdown()
            # a certificate from another CA: the reason is named
            other = RemotingClient(ssl_context=client_ssl_context(str(certs.other_ca)))
            try:
                with pytest.raises(RemotingError, match="certificate verify failed"):
                    await topic_route_code(other, c.namesrv_addr)
            finally:
                await other.shutdown()
            # the server still serves TLS clients after those
            good = RemotingClient(ssl_context=client_ssl_context(str(certs.ca)))
            try:
                assert await topic_route_code(good, c.namesrv_addr) == R.SUCCESS
            finally:
                await good.shutdown()

    arun(main(), timeout=60)


def test_tls_client_against_plain_server_is_a_clear_handshake_error(arun, tmp_path, certs) -> None:
    async def main() -> None:
        async with LocalCluster(str(tmp_path / "store")) as c:
            cl = RemotingClient(ssl_context=client_ssl_context(str(certs.ca)))
            try:
                with pytest.raises(RemotingError, match=r"TLS handshake with .* failed.*TLS"):
                    await topic_route_code(cl, c.namesrv_addr)
            finally:
                await cl.shutdown()

    arun(main(), timeout=60)


def test_mutual_tls_requires_a_client_certificate(arun, tmp_path, certs) -> None:
    cfg = certs.server_tls(
        "enforcing",
        **{
            "tls.server.need.client.auth": "require",
            "tls.server.trustCertPath": str(certs.ca),
            # the broker registers with its own certificate (server + client use)
            "tls.client.certPath": str(certs.server_cert),
            "tls.client.keyPath": str(certs.server_key),
        },
    )

    async def main() -> None:
        async with tls_cluster(tmp_path, cfg) as c:
            anon = RemotingClient(ssl_context=client_ssl_context(str(certs.ca)))
            try:
                with pytest.raises(RemotingError, match=r"(?i)certificate|closed"):
                    await topic_route_code(anon, c.namesrv_addr)
            finally:
                await anon.shutdown()
            await send_and_check(
                c.namesrv_addr,
                "MtlsTopic",
                tls=True,
                tls_ca=str(certs.ca),
                tls_cert=str(certs.client_cert),
                tls_key=str(certs.client_key),
            )

    arun(main(), timeout=60)


def test_large_pull_over_tls_matches_plain_sendfile(arun, tmp_path, certs) -> None:
    """Pull answers of more than transfer_by_sendfile_min_bytes: the plain
    connection gets them by sendfile, the TLS one by copy; same bytes."""

    async def main() -> None:
        async with tls_cluster(tmp_path, certs.server_tls("permissive")) as c:
            assert c.broker is not None
            plain = RemotingClient(name="plain")
            tls = RemotingClient(name="tls", ssl_context=client_ssl_context(str(certs.ca)))
            try:
                r = await simple(
                    plain, c.broker_addr, RC.UPDATE_AND_CREATE_TOPIC,
                    topic="BigPull", readQueueNums=1, writeQueueNums=1, perm=6,
                )  # fmt: skip
                assert r.code == R.SUCCESS, r
                for i in range(40):
                    await send_ok(
                        tls, c.broker_addr, "BigPull", bytes([i]) * 1500, 0, props(KEYS=f"k{i}")
                    )
                assert c.broker.pull_processor.sendfile_min_bytes <= 16 * 1024
                by_sendfile = await pull(plain, c.broker_addr, "BigPull", 0, 0)
                for _ in range(3):  # several answers on one TLS connection, in order
                    copied = await pull(tls, c.broker_addr, "BigPull", 0, 0)
                    assert copied.code == R.SUCCESS and len(copied.body) > 16 * 1024
                    assert copied.body == by_sendfile.body
                recs = rmqcore.decode_records(copied.body, True)
                assert [m["body"] for m in recs] == [bytes([i]) * 1500 for i in range(32)]
                tail = await pull(tls, c.broker_addr, "BigPull", 0, 32)
                assert [m["queue_offset"] for m in rmqcore.decode_records(tail.body, True)] == list(
                    range(32, 40)
                )
            finally:
                await plain.shutdown()
                await tls.shutdown()

    arun(main(), timeout=60)


async def _closed_within(sock: socket.socket, limit: float) -> float:
    """Seconds until the server closes sock (reads EOF or a reset)."""
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    async with asyncio.timeout(limit):
        while True:
            try:
                data = await loop.sock_recv(sock, 4096)
            except ConnectionError:
                break
            if not data:
                break
    return time.monotonic() - t0


async def _raw(addr: str) -> socket.socket:
    host, _, port = addr.rpartition(":")
    sock = socket.socket()
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    return sock


#: the first bytes of a TLS 1.2 ClientHello record: handshake type, version,
#: a length promising 512 bytes that never come
TRUNCATED_HELLO = bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03])


def test_hostile_first_bytes_on_a_permissive_port(arun, tmp_path, certs) -> None:
    cfg = certs.server_tls("permissive", **{"tls.server.handshakeTimeoutMs": "1000"})

    async def main() -> None:
        async with tls_cluster(tmp_path, cfg) as c:
            loop = asyncio.get_running_loop()
            good_tls = RemotingClient(ssl_context=client_ssl_context(str(certs.ca)))
            good_plain = RemotingClient()
            socks: list[socket.socket] = []
            try:
                t_connect = time.monotonic()
                silent = await _raw(c.namesrv_addr)
                truncated = await _raw(c.namesrv_addr)
                await loop.sock_sendall(truncated, TRUNCATED_HELLO)
                bad_hello = await _raw(c.namesrv_addr)
                await loop.sock_sendall(bad_hello, b"\x16" + bytes(range(256)) * 4)
                garbage = await _raw(c.namesrv_addr)
                await loop.sock_sendall(garbage, b"\xff" * 64)
                socks += [silent, truncated, bad_hello, garbage]
                # meanwhile both kinds of clients are served
                assert await topic_route_code(good_tls, c.namesrv_addr) == R.SUCCESS
                assert await topic_route_code(good_plain, c.namesrv_addr) == R.SUCCESS
                # garbage that is not a frame and a bogus handshake: closed at once
                assert await _closed_within(garbage, 5) < 5
                assert await _closed_within(bad_hello, 5) < 5
                # silence and a ClientHello cut short: closed at the handshake deadline
                # (1 s after connecting), not before
                for s in (silent, truncated):
                    await _closed_within(s, 10)
                    took = time.monotonic() - t_connect
                    assert 0.9 < took < 10, took
                assert await topic_route_code(good_tls, c.namesrv_addr) == R.SUCCESS
                assert await topic_route_code(good_plain, c.namesrv_addr) == R.SUCCESS
                assert c.namesrv is not None and not c.namesrv.server._admitting
            finally:
                for s in socks:
                    s.close()
                await good_tls.shutdown()
                await good_plain.shutdown()

    arun(main(), timeout=60)


def test_enforcing_closes_a_plain_connection_at_once(arun, tmp_path, certs) -> None:
    async def main() -> None:
        async with tls_cluster(tmp_path, certs.server_tls("enforcing")) as c:
            s = await _raw(c.broker_addr)
            try:
                frame = RemotingCommand(RC.GET_BROKER_RUNTIME_INFO, {}).encode()
                await asyncio.get_running_loop().sock_sendall(s, frame)
                assert await _closed_within(s, 5) < 5
            finally:
                s.close()
        assert ssl.HAS_TLSv1_3  # the mTLS test's refusal comes after the handshake there

    arun(main(), timeout=60)
