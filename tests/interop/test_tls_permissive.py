"""A permissive TLS port (tls.server.mode=permissive) still serves the real
RocketMQ C++ client (``rocketmq==0.4.4``, plain TCP) while a pyrmq client
talks TLS to the same ports."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

try:
    import rocketmq.client  # noqa: F401
except Exception as exc:  # ImportError, or OSError when the bundled librocketmq.so won't load
    pytest.skip(
        f"the RocketMQ C++ client (pip install rocketmq==0.4.4) is not usable here: {exc!r}",
        allow_module_level=True,
    )

from pyrmq.common.message import Message
from pyrmq.producer.producer import Producer
from pyrmq.testing.certs import make_test_certs, openssl_available

from .cpp import Clients, assert_send_ok, make_message, pull_until, unique


@pytest.fixture
def certs(tmp_path):
    if not openssl_available():
        pytest.skip("the openssl command is needed to make test certificates")
    return make_test_certs(tmp_path / "certs")


@pytest.fixture
def permissive(make_server, tmp_path, certs) -> Iterator[object]:
    props = certs.server_properties(
        "permissive", **{"tls.enable": "true", "tls.client.trustCertPath": str(certs.ca)}
    )
    f = tmp_path / "tls.properties"
    f.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    yield make_server("--tls-config", str(f))


def test_cpp_plain_and_pyrmq_tls_on_one_permissive_server(permissive, certs) -> None:
    srv = permissive
    topic = unique("TlsPermissive")
    clients = Clients(srv.namesrv)
    try:
        p = clients.producer()
        cpp_bodies = [f"cpp-{i}".encode() for i in range(10)]
        for body in cpp_bodies:
            assert_send_ok(p.send_sync(make_message(topic, body)))

        async def send_tls() -> list[bytes]:
            bodies = [f"tls-{i}".encode() for i in range(10)]
            async with Producer("tls-pg", srv.namesrv, tls=True, tls_ca=str(certs.ca)) as tp:
                for body in bodies:
                    r = await tp.send(Message(topic, body))
                    assert r.send_status.name == "SEND_OK"
            return bodies

        tls_bodies = asyncio.run(asyncio.wait_for(send_tls(), 60))
        got = pull_until(clients.pull_consumer(), topic, cpp_bodies + tls_bodies, timeout=30)
        assert {m.body for m in got} >= set(cpp_bodies + tls_bodies)
    finally:
        clients.close()
