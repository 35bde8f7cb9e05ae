"""TlsConfig: RocketMQ's tls.* keys, tls.config.file, and one-line errors
for files that cannot be used."""

from __future__ import annotations

import ssl

import pytest

from pyrmq.common.errors import ClientError
from pyrmq.remoting.tls import ClientAuth, TlsConfig, TlsMode, resolve_client_tls


def test_defaults_are_disabled() -> None:
    cfg = TlsConfig.from_properties({"brokerName": "b"})
    assert cfg.server_mode is TlsMode.DISABLED and not cfg.enable
    assert cfg.server_context() is None and cfg.client_context() is None


def test_keys_and_file_override(tmp_path, certs) -> None:
    f = tmp_path / "tls.properties"
    f.write_text(
        "tls.server.mode=enforcing\n"
        f"tls.server.certPath={certs.server_cert}\n"
        f"tls.server.keyPath={certs.server_key}\n"
        "tls.server.need.client.auth=require\n"
        f"tls.server.trustCertPath={certs.ca}\n"
    )
    cfg = TlsConfig.from_properties(
        {"tls.server.mode": "permissive", "tls.config.file": str(f), "tls.enable": "true"}
    )
    assert cfg.server_mode is TlsMode.ENFORCING  # the file wins
    assert cfg.server_need_client_auth is ClientAuth.REQUIRE and cfg.enable
    ctx = cfg.server_context()
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED
    # an explicit file (--tls-config) is read the same way
    assert TlsConfig.from_properties({}, str(f)).server_mode is TlsMode.ENFORCING


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        ({"tls.server.mode": "sometimes"}, "disabled | permissive | enforcing"),
        ({"tls.enable": "yes"}, "expected true or false"),
        ({"tls.server.need.client.auth": "maybe"}, "none | optional | require"),
        ({"tls.server.handshakeTimeoutMs": "-1"}, "positive number"),
        ({"tls.config.file": "/nonexistent/tls.properties"}, "cannot read config file"),
    ],
)
def test_bad_values_are_one_line_errors(props, needle) -> None:
    with pytest.raises(ClientError, match=needle) as e:
        TlsConfig.from_properties(props)
    assert "\n" not in str(e.value)


def test_unusable_files_name_the_key_and_the_file(tmp_path, certs) -> None:
    missing = str(tmp_path / "nope.pem")
    cfg = TlsConfig(TlsMode.ENFORCING, server_cert_path=missing, server_key_path=missing)
    with pytest.raises(ClientError, match=r"tls.server: cannot read .*nope.pem"):
        cfg.server_context()
    with pytest.raises(ClientError, match=r"needs tls\.server\.certPath"):
        TlsConfig(TlsMode.PERMISSIVE).server_context()
    # the client's key with the server's certificate: not a pair
    wrong = TlsConfig(
        TlsMode.ENFORCING,
        server_cert_path=str(certs.server_cert),
        server_key_path=str(certs.client_key),
    )
    with pytest.raises(ClientError, match="cannot use certificate"):
        wrong.server_context()
    no_ca = TlsConfig(
        TlsMode.ENFORCING,
        server_cert_path=str(certs.server_cert),
        server_key_path=str(certs.server_key),
        server_need_client_auth=ClientAuth.REQUIRE,
    )
    with pytest.raises(ClientError, match=r"needs tls\.server\.trustCertPath"):
        no_ca.server_context()
    with pytest.raises(ClientError, match="tls_ca: cannot load CA"):
        resolve_client_tls(True, tls_ca=missing)
    with pytest.raises(ClientError, match="need tls=True"):
        resolve_client_tls(False, tls_ca=str(certs.ca))
