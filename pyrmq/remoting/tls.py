"""TLS on the remoting ports (RocketMQ TlsSystemConfig + TlsHelper).

Settings keep RocketMQ's property names. A server's come from its config
file (namesrv.conf, broker.conf) or from a separate properties file named by
`tls.config.file` or `--tls-config FILE`, whose keys win (RocketMQ reads
them from JVM system properties, then lets `tls.config.file` override):

  key                           default    meaning
  tls.server.mode               disabled   disabled | permissive | enforcing
  tls.server.certPath                      PEM certificate (chain) of the server
  tls.server.keyPath                       PEM private key of the server
  tls.server.keyPassword                   the key's password, if it has one
  tls.server.need.client.auth   none       none | optional | require (mutual TLS)
  tls.server.trustCertPath                 PEM CA(s) client certificates must chain to
  tls.server.handshakeTimeoutMs 10000      pyrmq: bound on the first byte + handshake
  tls.enable                    false      this process's own connections (a broker's
                                           to the name server) use TLS
  tls.client.certPath / keyPath / keyPassword   its certificate, for mutual TLS
  tls.client.trustCertPath                 PEM CA(s) the server's certificate must chain to
                                           (default: the system's CAs)
  tls.client.authServer         true       verify the server's certificate
  tls.test.mode.enable          false      accept any server certificate (tests only)
  tls.config.file                          a properties file with the keys above

`permissive` serves TLS and plain connections on one port: the first byte
of a TLS ClientHello is 0x16 (a TLS handshake record), which no remoting
frame starts with below 369 MB; `enforcing` closes connections that do not
start with it; `disabled` serves plain connections only.

Deliberate differences from RocketMQ, all toward checking more: pyrmq's
defaults verify the server (RocketMQ's tls.test.mode.enable defaults to
true, which trusts any certificate), and a server that asks for client
certificates always verifies them against tls.server.trustCertPath
(RocketMQ's tls.server.authClient=false takes any). Hostnames are checked
when the server is verified and the client knows the name or IP it dialed.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import ssl
from collections.abc import Mapping
from typing import Any

from pyrmq.common.config_file import read_properties
from pyrmq.common.errors import ClientError

log = logging.getLogger("pyrmq.remoting")

#: the content type of a TLS handshake record: the first byte a TLS client
#: sends (RocketMQ's HANDSHAKE_MAGIC_CODE)
TLS_HANDSHAKE_BYTE = 0x16


class TlsMode(enum.Enum):
    """tls.server.mode (RocketMQ TlsMode)."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class ClientAuth(enum.Enum):
    """tls.server.need.client.auth (Netty ClientAuth)."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


#: property name -> TlsConfig field
_KEYS = {
    "tls.server.mode": "server_mode",
    "tls.server.certPath": "server_cert_path",
    "tls.server.keyPath": "server_key_path",
    "tls.server.keyPassword": "server_key_password",
    "tls.server.need.client.auth": "server_need_client_auth",
    "tls.server.trustCertPath": "server_trust_cert_path",
    "tls.server.authClient": "server_auth_client",
    "tls.server.handshakeTimeoutMs": "server_handshake_timeout_ms",
    "tls.enable": "enable",
    "tls.client.certPath": "client_cert_path",
    "tls.client.keyPath": "client_key_path",
    "tls.client.keyPassword": "client_key_password",
    "tls.client.trustCertPath": "client_trust_cert_path",
    "tls.client.authServer": "client_auth_server",
    "tls.test.mode.enable": "test_mode_enable",
}
_BOOL_FIELDS = frozenset(("enable", "client_auth_server", "test_mode_enable", "server_auth_client"))
TLS_CONFIG_FILE_KEY = "tls.config.file"
#: every property this module reads (config loaders do not warn about them)
TLS_PROPERTY_KEYS = frozenset(_KEYS) | {TLS_CONFIG_FILE_KEY}


def _bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise ClientError(f"{key}={value!r}: expected true or false")
    return v == "true"


def _enum(key: str, value: str, kind: type[TlsMode] | type[ClientAuth]) -> Any:
    try:
        return kind(value.strip().lower())
    except ValueError:
        allowed = " | ".join(m.value for m in kind)
        raise ClientError(f"{key}={value!r}: expected {allowed}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class TlsConfig:
    """The TLS settings of one server process (both sides: its listening
    port, and its own connections to other servers)."""

    server_mode: TlsMode = TlsMode.DISABLED
    server_cert_path: str = ""
    server_key_path: str = ""
    server_key_password: str = ""
    server_need_client_auth: ClientAuth = ClientAuth.NONE
    server_trust_cert_path: str = ""
    #: read for RocketMQ compatibility; pyrmq always verifies client certs
    server_auth_client: bool = True
    server_handshake_timeout_ms: int = 10_000
    enable: bool = False
    client_cert_path: str = ""
    client_key_path: str = ""
    client_key_password: str = ""
    client_trust_cert_path: str = ""
    client_auth_server: bool = True
    test_mode_enable: bool = False

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], config_file: str | None = None) -> TlsConfig:
        """The tls.* keys of props, then those of config_file (or of the
        file props name in tls.config.file), which win."""
        merged = {k: str(v) for k, v in props.items() if k.startswith("tls.")}
        path = config_file or merged.get(TLS_CONFIG_FILE_KEY, "").strip()
        if path:
            merged.update((k, v) for k, v in read_properties(path).items())
        unknown = sorted(k for k in merged if k not in TLS_PROPERTY_KEYS)
        if unknown:
            log.warning("ignoring TLS keys pyrmq does not know: %s", ", ".join(unknown))
        kw: dict[str, Any] = {}
        for key, field in _KEYS.items():
            if key not in merged:
                continue
            value = merged[key]
            if field == "server_mode":
                kw[field] = _enum(key, value, TlsMode)
            elif field == "server_need_client_auth":
                kw[field] = _enum(key, value, ClientAuth)
            elif field in _BOOL_FIELDS:
                kw[field] = _bool(key, value)
            elif field == "server_handshake_timeout_ms":
                if not value.strip().isdigit() or int(value) <= 0:
                    raise ClientError(f"{key}={value!r}: expected a positive number of ms")
                kw[field] = int(value)
            else:
                kw[field] = value.strip()
        return cls(**kw)

    @property
    def handshake_timeout(self) -> float:
        return self.server_handshake_timeout_ms / 1000

    def server_context(self) -> ssl.SSLContext | None:
        """The listening side's context (None when tls.server.mode is
        disabled). Reads the files now: ClientError names what is wrong."""
        if self.server_mode is TlsMode.DISABLED:
            return None
        if not self.server_cert_path or not self.server_key_path:
            raise ClientError(
                f"tls.server.mode={self.server_mode.value} needs tls.server.certPath and "
                "tls.server.keyPath (PEM files)"
            )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _load_chain(
            ctx, "tls.server", self.server_cert_path, self.server_key_path, self.server_key_password
        )
        if self.server_need_client_auth is not ClientAuth.NONE:
            if not self.server_trust_cert_path:
                raise ClientError(
                    f"tls.server.need.client.auth={self.server_need_client_auth.value} needs "
                    "tls.server.trustCertPath (the CA client certificates must chain to)"
                )
            _load_ca(ctx, "tls.server.trustCertPath", self.server_trust_cert_path)
            ctx.verify_mode = (
                ssl.CERT_REQUIRED
                if self.server_need_client_auth is ClientAuth.REQUIRE
                else ssl.CERT_OPTIONAL
            )
        return ctx

    def client_context(self) -> ssl.SSLContext | None:
        """This process's outgoing side (None unless tls.enable=true)."""
        if not self.enable:
            return None
        verify = self.client_auth_server and not self.test_mode_enable
        return client_ssl_context(
            self.client_trust_cert_path or None,
            self.client_cert_path or None,
            self.client_key_path or None,
            key_password=self.client_key_password or None,
            verify=verify,
            prefix="tls.client",
        )


def client_ssl_context(
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    *,
    key_password: str | None = None,
    verify: bool = True,
    check_hostname: bool = True,
    prefix: str = "tls",
) -> ssl.SSLContext:
    """A client's context: the server's certificate must chain to ca (the
    system's CAs when None) unless verify is false; cert + key (PEM) are
    presented to servers that ask (mutual TLS). prefix names the settings
    in error messages."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if verify:
        ctx.check_hostname = check_hostname
        if ca:
            _load_ca(ctx, f"{prefix}_ca" if prefix == "tls" else f"{prefix}.trustCertPath", ca)
            # a certificate listed there is trusted as is, even when it is
            # not a self-signed root (a server's own leaf, say)
            ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert or key:
        if not (cert and key):
            raise ClientError(f"{prefix}: a client certificate needs both its cert and key files")
        _load_chain(ctx, prefix, cert, key, key_password)
    return ctx


def _load_ca(ctx: ssl.SSLContext, what: str, path: str) -> None:
    try:
        ctx.load_verify_locations(cafile=path)
    except OSError as e:  # ssl.SSLError included
        raise ClientError(f"{what}: cannot load CA certificates from {path}: {_why(e)}") from None


def _load_chain(
    ctx: ssl.SSLContext, prefix: str, cert: str, key: str, password: str | None
) -> None:
    try:
        ctx.load_cert_chain(cert, key, password or None)
    except ssl.SSLError as e:
        raise ClientError(
            f"{prefix}: cannot use certificate {cert} with key {key}: {_why(e)}"
        ) from None
    except OSError as e:
        missing = e.filename or (cert if not _readable(cert) else key)
        raise ClientError(f"{prefix}: cannot read {missing}: {_why(e)}") from None


def _readable(path: str) -> bool:
    try:
        with open(path, "rb"):
            return True
    except OSError:
        return False


def _why(e: OSError) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason or str(e)
    return e.strerror or str(e)


def describe_handshake_error(e: BaseException) -> str:
    """A one-line reason for a failed TLS handshake, naming what the
    certificate check said when that is what failed."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {e.verify_message or e.reason}"
    if isinstance(e, ssl.SSLError):
        return e.reason or str(e)
    if isinstance(e, ConnectionError | EOFError) or (
        isinstance(e, OSError) and not isinstance(e, TimeoutError)
    ):
        return (
            f"the server closed the connection during the TLS handshake ({e or type(e).__name__}); "
            "the server may not have TLS enabled (tls.server.mode)"
        )
    if isinstance(e, TimeoutError):
        return "no TLS handshake answer in time; the server may not have TLS enabled"
    return f"{type(e).__name__}: {e}"


def resolve_client_tls(
    tls: bool | ssl.SSLContext,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> ssl.SSLContext | None:
    """What a client's tls=... arguments mean: None (plain), the context
    given, or one that checks servers against tls_ca (the system's CAs
    when None) and shows tls_cert + tls_key to servers that ask."""
    if isinstance(tls, ssl.SSLContext):
        return tls
    if not tls:
        if tls_ca or tls_cert or tls_key:
            raise ClientError("tls_ca, tls_cert and tls_key need tls=True")
        return None
    return client_ssl_context(tls_ca, tls_cert, tls_key)
